# eSSM 2-D backbone essm_2d_tiny (an extension, docs/essm.md '2-D backbone': patch 4, widths 96-768, depths 2/2/6/2,
# Swin-T's layout) on ImageNet-1K. The paper has no ImageNet experiment for this backbone, so there is no figure to
# compare with: this config gives the 2-D backbone an ImageNet-1K checkpoint (which the ESSM2D / MyoNet backbones of
# ssm_plugins.mmdet and ssm_plugins.mmseg load through init_cfg=dict(type='Pretrained', checkpoint=...)) with the
# same DeiT/Swin recipe as the ViM2/ViQS configs, which it inherits unchanged (AdamW lr 1e-3 at batch 8 x 128 =
# 1024, weight decay 0.05 with none on norms, biases and the model's no_weight_decay() SSM parameters, 300 epochs
# with 10 warm-up epochs and cosine decay, RandAugment, Mixup/CutMix, RandomErasing 0.25, label smoothing 0.1, 224
# px; see configs_mmpretrain/vim2/vim2-t_8xb128_in1k.py). Only the model and its stochastic depth change. Stochastic
# depth 0.1: the model has 6.8M parameters, DeiT-T's size, so DeiT-T's rate.
_base_ = ['../vim2/vim2-t_8xb128_in1k.py']

model = dict(model_name='essm_2d_tiny', drop_path_rate=0.1)
