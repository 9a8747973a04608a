# 2-D SSM paper, Table 1, row "ViT w/ SSM-c" on T-IN: top-1 57.66 (paper; C100 73.91), 2.73M params, train time 2.89x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The complex 2-D SSM (polar A, Cartesian B and C as code-v1; docs/2d-ssm.md, 'Parameterisation').
_base_ = './vit-ssm2d-r_1xb128_tiny-imagenet.py'

model = dict(ssm_complex=True)
