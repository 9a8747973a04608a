# 2-D SSM paper, Table 2 (CelebA, 40 attributes), row "DeiT-S w. SSM-r": mean attribute accuracy 90.24, 21.688M
# params. Recipe: _base_/celeba_bs1024_adamw_deit_20e.py (DeiT, 20 epochs: App. F; BCE), 224 px, 8 GPUs x 128.
#
# The real 2-D SSM after norm1 of every block, on the 14x14 patch tokens (the class token bypasses it), feeding Q, K
# and V (docs/2d-ssm.md, 'Placement in the backbones'); n_ssm 8, N 16, 4 directions (the reported deltas suggest a
# smaller N x S: docs/2d-ssm.md, 'Defaults and parameter counts').
_base_ = './deit-small_8xb128_celeba-224px.py'

model = dict(spatial_mixer='ssm2d')
