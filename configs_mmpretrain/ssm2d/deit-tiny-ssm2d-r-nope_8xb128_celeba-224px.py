# 2-D SSM paper, Table 3 (positional-encoding ablation), DeiT-T on CelebA, row "Ours (R)" w/o PE: 89.63 (with PE:
# 89.76, the config this one inherits).
_base_ = './deit-tiny-ssm2d-r_8xb128_celeba-224px.py'

model = dict(no_pos_embed=True)
