# 2-D SSM paper, Table 2 (CelebA, 40 attributes), row "DeiT-B": mean attribute accuracy 90.13, 85.829M params. Recipe:
# _base_/celeba_bs1024_adamw_deit_20e.py (DeiT, 20 epochs: App. F; BCE), 224 px, 8 GPUs x 128.
#
# DeiT-B (ViT-B/16: dim 768, depth 12, 12 heads; 14x14 tokens, class token, no distillation token: docs/2d-ssm.md,
# 'CelebA choices'), the plain timm block: the ssm2d model family with spatial_mixer='none'. The DeiT-B rows of
# Table 2 inherit this config.
_base_ = [
    './_base_/celeba_bs128_deit-224px.py',
    './_base_/celeba_bs1024_adamw_deit_20e.py',
]

model = dict(model_name='deit_base_patch16_224_ssm2d', spatial_mixer='none')
