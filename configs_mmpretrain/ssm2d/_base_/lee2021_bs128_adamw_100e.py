# The 2-D SSM paper's CIFAR-100 / Tiny-ImageNet recipe (arXiv:2306.06635, App. F, and Lee et al. 2021; details
# not in the paper: docs/2d-ssm.md, 'Training recipes'; "no tuning except stochastic depth"): AdamW lr 3e-3
# [paper; code-v1 default 1e-3], batch 128, weight decay 0.05 (0 on the SSM parameters), 100 epochs, 10 linear
# warm-up epochs from 1e-6 then cosine to 1e-6, per iteration; label smoothing 0.1; Mixup (alpha 1) or CutMix
# (alpha 1) on half of the batches, one of the two at random; stochastic depth 0.1.
# Reported metric: the best validation top-1 over the epochs (code-v1 best_acc1), kept as best_*.pth.
_base_ = ['mmpretrain::_base_/default_runtime.py']

custom_imports = dict(imports=['ssm_plugins.mmpretrain'], allow_failed_imports=False)
# --resume continues the interrupted run's random streams (ssm_plugins.openmmlab.RandomStateHook)
custom_hooks = [dict(type='RandomStateHook')]

# each row config sets model_name (a timm model of ssm_plugins) and the row's options
model = dict(
    type='TimmClassifier',
    drop_path_rate=0.1,  # doubled (0.2) "in certain scenarios" (paper App. F): --cfg-options to try it
    loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
    # probabilities 0.25 + 0.25: a batch is mixed with p 0.5, by Mixup or CutMix 50/50
    train_cfg=dict(augments=[dict(type='Mixup', alpha=1.0), dict(type='CutMix', alpha=1.0)], probs=[0.25, 0.25]))

# no decay on norms, biases and every parameter the model's no_weight_decay() names: the SSM's A, B, C (paper
# App. E.2), position embeddings, class token (as timm's training script, which Lee et al. use)
optim_wrapper = dict(
    constructor='TimmNoDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=3e-3, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 3e-3, by_epoch=True, end=10, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-6, by_epoch=True, begin=10, end=100, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=100, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)

default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=1, save_best='auto'))
