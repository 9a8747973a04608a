# 2-D SSM paper, Table 1, row "Swin w/ EMA" on C100: top-1 77.01 (paper; T-IN 60.13), 7.52M params, train time 1.39x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega's multi-head EMA on the flattened stage map at the 2-D SSM's place (after norm1, before the windows).
_base_ = './swin_1xb128_cifar100.py'

model = dict(spatial_mixer='ema')
