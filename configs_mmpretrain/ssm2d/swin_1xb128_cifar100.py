# 2-D SSM paper, Table 1, row "Swin-reprod." on C100: top-1 77.98 (paper; T-IN 61.29), 7.15M params, train time 1x.
# Recipe: _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Also the config of row "Swin (Lee et al. reported)" (C100 76.87, T-IN 60.87): the same model and recipe.
# Small-dataset Swin (Lee et al.; embed 96, depths (2, 6, 4), heads (3, 6, 12), window 4, MLP ratio 2, absolute
# position embedding + relative position bias; 16/8/4 maps (32 px, patch 2)), the plain timm block: the ssm2d model
# family with spatial_mixer='none'. Standard window attention, not the official README's --use_mega_gating
# (docs/2d-ssm.md, 'Placement in the backbones'). Every Swin row of Table 1 inherits this config.
_base_ = ['./_base_/cifar100_bs128_lee2021.py', './_base_/lee2021_bs128_adamw_100e.py']

model = dict(model_name='swin_cifar_patch2_window4_32_ssm2d', num_classes=100, spatial_mixer='none')
