# 2-D SSM paper, Table 1, row "Mega-ablate" on T-IN: top-1 56.43 (paper; C100 74.82), 2.75M params, train time 1.1x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega with the EMA removed (identity; paper Sec. 5, "Mega").
_base_ = './mega_1xb128_tiny-imagenet.py'

model = dict(model_name='mega_tinyimagenet_patch8_64_ablate')
