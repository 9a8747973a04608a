# 2-D SSM paper, Table 1, row "Swin w/ S4ND" on T-IN: top-1 64.6 (paper; C100 79.26), 7.18M params, train time 1.29x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# S4ND (n_ssm 8, N 16) on the whole stage map after norm1, before the shift and windows.
_base_ = './swin_1xb128_tiny-imagenet.py'

model = dict(spatial_mixer='s4nd')
