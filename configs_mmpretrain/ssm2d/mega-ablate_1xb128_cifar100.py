# 2-D SSM paper, Table 1, row "Mega-ablate" on C100: top-1 74.82 (paper; T-IN 56.43), 2.75M params, train time 1.1x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega with the EMA removed (identity; paper Sec. 5, "Mega").
_base_ = './mega_1xb128_cifar100.py'

model = dict(model_name='mega_cifar_patch4_32_ablate')
