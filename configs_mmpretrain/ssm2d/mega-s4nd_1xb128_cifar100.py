# 2-D SSM paper, Table 1, row "Mega w/ S4ND" on C100: top-1 74.9 (paper; T-IN 56.65), 2.80M params, train time 1.46x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Mega with S4ND in place of the EMA (Q/K/gate path only).
_base_ = './mega_1xb128_cifar100.py'

model = dict(model_name='mega_cifar_patch4_32_s4nd')
