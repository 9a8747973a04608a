# 2-D SSM paper, Table 1, row "ViT w/ SSM-c" on C100: top-1 73.91 (paper; T-IN 57.66), 2.73M params, train time 2.89x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The complex 2-D SSM (polar A, Cartesian B and C as code-v1; docs/2d-ssm.md, 'Parameterisation').
_base_ = './vit-ssm2d-r_1xb128_cifar100.py'

model = dict(ssm_complex=True)
