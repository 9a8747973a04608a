# 2-D SSM paper, Table 1, row "Mega 2-D SSM-r" on T-IN: top-1 57.95 (paper; C100 76.02), 2.80M params, train time
# 2.03x. Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega with the real 2-D SSM in place of the EMA, applied to Q and K only (paper Sec. 5, "Mega"), V from the
# unfiltered tokens (docs/2d-ssm.md, 'Placement in the backbones'); n_ssm 8, N 16, 4 directions (the settings the
# reported parameter counts match: docs/2d-ssm.md, 'Defaults and parameter counts').
_base_ = './mega_1xb128_tiny-imagenet.py'

model = dict(model_name='mega_tinyimagenet_patch8_64_ssm2d')
