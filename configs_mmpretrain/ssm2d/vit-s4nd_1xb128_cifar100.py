# 2-D SSM paper, Table 1, row "ViT w/ S4ND" on C100: top-1 72.60 (paper; T-IN 56.10), 2.72M params, train time 2.22x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# S4ND (C in C^(n_ssm x N), n_ssm 8, N 16; paper App. F) at the 2-D SSM's place in every block.
_base_ = './vit_1xb128_cifar100.py'

model = dict(spatial_mixer='s4nd')
