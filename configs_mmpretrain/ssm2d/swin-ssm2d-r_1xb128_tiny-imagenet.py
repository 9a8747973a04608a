# 2-D SSM paper, Table 1, row "Swin w/ SSM-r" on T-IN: top-1 65.77 (paper; C100 80.12), 7.25M params, train time
# 2.16x. Recipe: _base_/lee2021_bs128_adamw_100e.py (2d-ssm.md §4.1).
#
# The real 2-D SSM on the whole stage map after norm1 of every block, before the cyclic shift and window partition
# (spec §2.2); kernels as large as the stage map; n_ssm 8, N 16, 4 directions.
_base_ = './swin_1xb128_tiny-imagenet.py'

model = dict(spatial_mixer='ssm2d')
