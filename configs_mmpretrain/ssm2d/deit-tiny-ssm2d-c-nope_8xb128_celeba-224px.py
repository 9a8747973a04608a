# 2-D SSM paper, Table 3 (positional-encoding ablation), DeiT-T on CelebA, row "Ours (C)" w/o PE: 89.83 (with PE:
# 89.84, the config this one inherits).
_base_ = './deit-tiny-ssm2d-c_8xb128_celeba-224px.py'

model = dict(no_pos_embed=True)
