# 2-D SSM paper, Table 1, row "Mega w/ S4ND" on T-IN: top-1 56.65 (paper; C100 74.9), 2.80M params, train time 1.46x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega with S4ND in place of the EMA (Q/K/gate path only).
_base_ = './mega_1xb128_tiny-imagenet.py'

model = dict(model_name='mega_tinyimagenet_patch8_64_s4nd')
