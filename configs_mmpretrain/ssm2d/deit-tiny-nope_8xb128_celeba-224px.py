# 2-D SSM paper, Table 3 (positional-encoding ablation), DeiT-T on CelebA, row "Baseline" w/o PE: 87.99 (with PE:
# 88.43, the config this one inherits).
#
# No learned absolute position embedding (docs/2d-ssm.md, 'Removing the positional encoding').
_base_ = './deit-tiny_8xb128_celeba-224px.py'

model = dict(no_pos_embed=True)
