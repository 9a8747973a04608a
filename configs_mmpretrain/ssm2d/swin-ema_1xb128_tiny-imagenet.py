# 2-D SSM paper, Table 1, row "Swin w/ EMA" on T-IN: top-1 60.13 (paper; C100 77.01), 7.52M params, train time 1.39x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega's multi-head EMA on the flattened stage map at the 2-D SSM's place (after norm1, before the windows).
_base_ = './swin_1xb128_tiny-imagenet.py'

model = dict(spatial_mixer='ema')
