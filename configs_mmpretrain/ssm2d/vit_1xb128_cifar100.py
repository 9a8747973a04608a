# 2-D SSM paper, Table 1, row "ViT" on C100: top-1 73.81 (paper; T-IN 57.07), 2.71M params, train time 1x. Recipe:
# _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Small-dataset ViT (Lee et al.; depth 9, dim 192, 12 heads, MLP ratio 2, 8x8 tokens (32 px, patch 4)), the plain timm
# block: the ssm2d model family with spatial_mixer='none'. Every ViT row of Table 1 inherits this config.
_base_ = ['./_base_/cifar100_bs128_lee2021.py', './_base_/lee2021_bs128_adamw_100e.py']

model = dict(model_name='vit_cifar_patch4_32_ssm2d', num_classes=100, spatial_mixer='none')
