# 2-D SSM paper, Table 3 (positional-encoding ablation), Swin on T-IN, row "Ours (R)" w/o PE: 65.44 (with PE: 65.77,
# the config this one inherits).
_base_ = './swin-ssm2d-r_1xb128_tiny-imagenet.py'

model = dict(no_pos_embed=True)
