# 2-D SSM paper, Table 1, row "Swin w/ S4ND" on C100: top-1 79.26 (paper; T-IN 64.6), 7.18M params, train time 1.29x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# S4ND (n_ssm 8, N 16) on the whole stage map after norm1, before the shift and windows.
_base_ = './swin_1xb128_cifar100.py'

model = dict(spatial_mixer='s4nd')
