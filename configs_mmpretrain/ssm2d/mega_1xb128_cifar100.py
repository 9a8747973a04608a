# 2-D SSM paper, Table 1, row "Mega" on C100: top-1 72.27 (paper; T-IN 54.49), 2.98M params, train time 1.28x. Recipe:
# _base_/lee2021_bs128_adamw_100e.py (arXiv:2306.06635, App. F).
#
# Vision Mega (code-v1 VisionMEGA: 9 layers, embed = hidden = z = FFN = 192, laplace attention, learned position
# embedding, mean pool; 8x8 tokens (32 px, patch 4)) with Mega's own multi-head EMA. Every Mega row of Table 1
# inherits this config and changes the timm model. Stochastic depth 0.1 as the recipe (code-v1 builds Mega without
# it).
_base_ = ['./_base_/cifar100_bs128_lee2021.py', './_base_/lee2021_bs128_adamw_100e.py']

model = dict(model_name='mega_cifar_patch4_32', num_classes=100)
