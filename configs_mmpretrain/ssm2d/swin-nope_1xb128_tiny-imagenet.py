# 2-D SSM paper, Table 3 (positional-encoding ablation), Swin on T-IN, row "Baseline" w/o PE: 58.97 (with PE: 61.29,
# the config this one inherits).
#
# No absolute position embedding; the relative position bias of the windows stays (docs/2d-ssm.md, 'Removing the
# positional encoding').
_base_ = './swin_1xb128_tiny-imagenet.py'

model = dict(no_pos_embed=True)
