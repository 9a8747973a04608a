# 2-D SSM paper, Table 2 (CelebA, 40 attributes), row "Swin-T w. SSM-r": mean attribute accuracy 91.68, 27.556M
# params. Recipe: _base_/celeba_bs1024_adamw_deit_20e.py (DeiT, 20 epochs: App. F; BCE), 224 px, 8 GPUs x 128.
#
# The real 2-D SSM on each whole stage map after norm1, before the shift and windows (docs/2d-ssm.md, 'Placement
# in the backbones').
_base_ = './swin-tiny_8xb128_celeba-224px.py'

model = dict(spatial_mixer='ssm2d')
