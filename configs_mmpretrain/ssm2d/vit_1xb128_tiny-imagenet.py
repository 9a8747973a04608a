# 2-D SSM paper, Table 1, row "ViT" on T-IN: top-1 57.07 (paper; C100 73.81), 2.71M params, train time 1x. Recipe:
# _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Small-dataset ViT (Lee et al.; depth 9, dim 192, 12 heads, MLP ratio 2, 8x8 tokens (64 px, patch 8)), the plain timm
# block: the ssm2d model family with spatial_mixer='none'. Every ViT row of Table 1 inherits this config.
_base_ = ['./_base_/tiny-imagenet_bs128_lee2021.py', './_base_/lee2021_bs128_adamw_100e.py']

model = dict(model_name='vit_tinyimagenet_patch8_64_ssm2d', num_classes=200, spatial_mixer='none')
