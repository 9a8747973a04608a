# 2-D SSM paper, Table 1, row "Mega 2-D SSM-c" on C100: top-1 75.09 (paper; T-IN 56.51), 2.84M params, train time
# 2.03x. Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The complex 2-D SSM in place of Mega's EMA.
_base_ = './mega-ssm2d-r_1xb128_cifar100.py'

model = dict(ssm_complex=True)
