# 2-D SSM paper, "Figure 5" (ImageNet-1K, MEGA ViT-T variants; a table printed as a figure), row "EMA (= original
# MEGA)": top-1 69.73, top-5 89.76, 6.21M params. The three rows: mega-tiny{,-ablate,-ssm2d-r}_4xb256_in1k.py. Mega
# ViT-T: the mega-image repository's mega_tiny_patch16_224 (depth 12, dim 192, hidden / FFN 384, z 64, EMA N 16; 14x14
# tokens).
#
# Recipe: the paper uses MEGA's own ImageNet recipe (App. F), which it does not give; we do not guess it
# (docs/2d-ssm.md, 'Mega ImageNet and LRA recipes').
# This config uses the DeiT recipe instead, a deviation to report with any result: MMPretrain's DeiT/Swin ImageNet
# pipeline (RandomResizedCrop 224, flip, RandAugment 2/9/0.5, random erasing 0.25; resize 256 + centre crop 224 to
# test), repeated augmentation x3, AdamW lr 5e-4 x 1024 / 512, weight decay 0.05 (0 on norms, biases, position
# embedding and the SSM's A, B, C), 300 epochs, 5 linear warm-up epochs from 1e-6, cosine to 1e-5, label smoothing
# 0.1, Mixup 0.8 / CutMix 1.0, stochastic depth 0.1. 4 GPUs x 256 = batch 1024.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]

custom_imports = dict(imports=['ssm_plugins.mmpretrain'], allow_failed_imports=False)
# --resume continues the interrupted run's random streams (ssm_plugins.openmmlab.RandomStateHook)
custom_hooks = [dict(type='RandomStateHook')]

model = dict(
    type='TimmClassifier',
    model_name='mega_tiny_patch16_224',
    num_classes=1000,
    drop_path_rate=0.1,
    loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

train_dataloader = dict(batch_size=256, sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True))
val_dataloader = dict(batch_size=256)
test_dataloader = dict(batch_size=256)

optim_wrapper = dict(
    constructor='TimmNoDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=5e-4 * 1024 / 512, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(_delete_=True, norm_decay_mult=0.0, bias_decay_mult=0.0))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5, end=300, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)

default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=1, save_best='auto'))
