# ViM2-T on ImageNet-1K, the Table 7 recipe of the MambaMixer paper (arXiv 2403.19888 v2, App. G; Table 15 row
# "ViM2-T": 13.2M, 81.9 top-1; our additions: docs/mambamixer.md, 'Training recipes').
# Every MambaMixer classification config of configs_mmpretrain/ derives from this one (or from its ViQS twin) and
# changes one thing. What the paper leaves open follows the DeiT/VMamba protocol it cites, i.e. MMPretrain's own
# Swin ImageNet recipe (_base_ below): RandAugment (2 ops, magnitude 9, std 0.5), RandomErasing 0.25, Mixup 0.8 /
# CutMix 1.0 (one of the two per batch), label smoothing 0.1, resize 256 + centre crop 224 (bicubic) to test.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]

custom_imports = dict(imports=['ssm_plugins.mmpretrain'], allow_failed_imports=False)
# --resume continues the interrupted run's random streams (ssm_plugins.openmmlab.RandomStateHook)
custom_hooks = [dict(type='RandomStateHook')]

# The timm model itself (ssm_plugins registers it); its checkpoint keys are timm's, so the Mask R-CNN / UperNet
# configs load work_dirs/<this config>/epoch_300.pth through init_cfg=dict(type='Pretrained', checkpoint=...).
model = dict(
    type='TimmClassifier',
    model_name='vim2_t',
    num_classes=1000,
    drop_path_rate=0.1,  # stochastic depth T 0.1 / S 0.3 / B 0.4 / L 0.5 [DeiT/VMamba]
    loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

# 8 GPUs x 128 = batch 1024 [paper]; data_root: --cfg-options train_dataloader.dataset.data_root=... (and val_/test_)
train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)
test_dataloader = dict(batch_size=128)

# AdamW (0.9, 0.999), lr 1e-3 at batch 1024, weight decay 0.05 [paper]; no decay on norms, biases and every
# parameter the model's no_weight_decay() names (pos/cls tokens, A_log, D, dt bias, gamma, lambda_v, router ...)
optim_wrapper = dict(
    constructor='TimmNoDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)))

# 300 epochs, 10 linear warm-up epochs from 1e-6 [paper], cosine to 1e-5 [timm/DeiT]
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=10, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=10, end=300, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)

# bf16 autocast on GPUs (the kernels keep fp32 state): add --amp to mim train (AmpOptimWrapper)
