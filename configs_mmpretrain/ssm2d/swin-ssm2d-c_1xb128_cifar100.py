# 2-D SSM paper, Table 1, row "Swin w/ SSM-c" on C100: top-1 3.28 (paper; T-IN 12.76), 7.26M params, train time 2.18x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# The complex 2-D SSM. The paper's run diverged (C100 3.28, T-IN 12.76): a documented failure, not a target
# (docs/2d-ssm.md, 'Complex variant'); gradient clipping (optim_wrapper.clip_grad) would be a deviation to report.
_base_ = './swin-ssm2d-r_1xb128_cifar100.py'

model = dict(ssm_complex=True)
