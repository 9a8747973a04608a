# 2-D SSM paper, Table 1, row "ViT w/ SSM-r" on C100: top-1 74.07 (paper; T-IN 57.56), 2.72M params, train time 2.66x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The real 2-D SSM after norm1 of every block, on the patch tokens, feeding Q, K and V (docs/2d-ssm.md, 'Placement
# in the backbones'); n_ssm 8, N 16, 4 directions (paper App. F; docs/2d-ssm.md, 'Defaults and parameter counts',
# notes the smaller ViT settings of the official README: --cfg-options model.ssm_n_ssm=2 model.ssm_directions=2
# model.ssm_layernorm=True).
_base_ = './vit_1xb128_cifar100.py'

model = dict(spatial_mixer='ssm2d')
