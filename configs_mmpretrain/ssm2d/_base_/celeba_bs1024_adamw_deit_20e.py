# The 2-D SSM paper's CelebA recipe (arXiv:2306.06635, App. F): DeiT's hyperparameters for 20 epochs (as S4ND's
# CelebA protocol); from scratch and BCE-with-logits on the 40 attributes are our choices (docs/2d-ssm.md, 'CelebA
# choices'). DeiT: AdamW lr 5e-4 x batch / 512
# (1e-3 at 8 x 128), weight decay 0.05 (0 on norms, biases, position embedding, class token and the SSM's A, B, C),
# 5 linear warm-up epochs from 1e-6, cosine to 1e-5, Mixup 0.8 / CutMix 1.0 (one per batch), stochastic depth 0.1.
# Not DeiT's label smoothing: MMPretrain's multi-label smoothing (mode='multi_label') maps every positive target to
# 1 - eps, so it would undo the mixed targets of Mixup/CutMix; plain BCE keeps them (docs/2d-ssm.md, 'CelebA choices').
# Reported metric: the best validation mean attribute accuracy over the epochs, kept as best_*.pth.
_base_ = ['mmpretrain::_base_/default_runtime.py']

custom_imports = dict(imports=['ssm_plugins.mmpretrain'], allow_failed_imports=False)
# --resume continues the interrupted run's random streams (ssm_plugins.openmmlab.RandomStateHook)
custom_hooks = [dict(type='RandomStateHook')]

# each row config sets model_name (a timm model of ssm_plugins) and the row's options
model = dict(
    type='TimmMultiLabelClassifier',  # TimmClassifier with a sigmoid per attribute (our adapter)
    num_classes=40,
    drop_path_rate=0.1,
    loss=dict(type='CrossEntropyLoss', use_sigmoid=True),  # BCE with logits, mean over images and attributes
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

optim_wrapper = dict(
    constructor='TimmNoDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=5e-4 * 1024 / 512, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5, end=20, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=20, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=1024)

default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=1,
                                     save_best='multi-label/mean_accuracy', rule='greater'))
