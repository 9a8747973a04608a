# 2-D SSM paper, Table 3 (positional-encoding ablation), ViT on C100, row "Ours (R)" w/o PE: 74.89 (with PE: 74.07,
# the config this one inherits).
_base_ = './vit-ssm2d-r_1xb128_cifar100.py'

model = dict(no_pos_embed=True)
