# 2-D SSM paper, Table 1, row "Mega 2-D SSM-r" on C100: top-1 76.02 (paper; T-IN 57.95), 2.80M params, train time
# 2.03x. Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega with the real 2-D SSM in place of the EMA, applied to Q and K only (paper Sec. 5, "Mega"), V from the
# unfiltered tokens (docs/2d-ssm.md, 'Placement in the backbones'); n_ssm 8, N 16, 4 directions (the settings the
# reported parameter counts match: docs/2d-ssm.md, 'Defaults and parameter counts').
_base_ = './mega_1xb128_cifar100.py'

model = dict(model_name='mega_cifar_patch4_32_ssm2d')
