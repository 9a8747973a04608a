# 2-D SSM paper, Table 3 (positional-encoding ablation), ViT on C100, row "Ours (C)" w/o PE: 74.67 (with PE: 73.91,
# the config this one inherits).
_base_ = './vit-ssm2d-c_1xb128_cifar100.py'

model = dict(no_pos_embed=True)
