# 2-D SSM paper, Table 3 (positional-encoding ablation), Swin on T-IN, row "Ours (C)" w/o PE: 2.16 (with PE: 3.28, the
# config this one inherits).
_base_ = './swin-ssm2d-c_1xb128_tiny-imagenet.py'

model = dict(no_pos_embed=True)
