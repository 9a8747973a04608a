# 2-D SSM paper, Table 3 (positional-encoding ablation), ViT on C100, row "Baseline" w/o PE: 64.09 (with PE: 73.26,
# the config this one inherits).
#
# No learned absolute position embedding (docs/2d-ssm.md, 'Removing the positional encoding'); the class token
# stays.
_base_ = './vit_1xb128_cifar100.py'

model = dict(no_pos_embed=True)
