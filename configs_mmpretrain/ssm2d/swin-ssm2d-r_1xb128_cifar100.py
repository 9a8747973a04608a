# 2-D SSM paper, Table 1, row "Swin w/ SSM-r" on C100: top-1 80.12 (paper; T-IN 65.77), 7.25M params, train time
# 2.16x. Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The real 2-D SSM on the whole stage map after norm1 of every block, before the cyclic shift and window partition
# (docs/2d-ssm.md, 'Placement in the backbones'); kernels as large as the stage map; n_ssm 8, N 16, 4 directions.
_base_ = './swin_1xb128_cifar100.py'

model = dict(spatial_mixer='ssm2d')
