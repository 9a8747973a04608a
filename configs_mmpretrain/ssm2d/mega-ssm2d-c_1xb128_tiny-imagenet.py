# 2-D SSM paper, Table 1, row "Mega 2-D SSM-c" on T-IN: top-1 56.51 (paper; C100 75.09), 2.84M params, train time
# 2.03x. Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The complex 2-D SSM in place of Mega's EMA.
_base_ = './mega-ssm2d-r_1xb128_tiny-imagenet.py'

model = dict(ssm_complex=True)
