# 2-D SSM paper, Table 2 (CelebA, 40 attributes), row "Swin-T": mean attribute accuracy 91.48, 27.550M params. Recipe:
# _base_/celeba_bs1024_adamw_deit_20e.py (DeiT, 20 epochs: App. F; BCE), 224 px, 8 GPUs x 128.
#
# Swin-T (patch 4, window 7, depths (2, 2, 6, 2); 56/28/14/7 maps), the plain timm block: the ssm2d model family with
# spatial_mixer='none'. Stochastic depth 0.2, Swin-T's own setting. The Swin-T rows inherit this config.
_base_ = [
    './_base_/celeba_bs128_deit-224px.py',
    './_base_/celeba_bs1024_adamw_deit_20e.py',
]

model = dict(model_name='swin_tiny_patch4_window7_224_ssm2d', spatial_mixer='none', drop_path_rate=0.2)
