# UperNet (+ auxiliary FCN head) with a ViM2-T backbone on ADE20K, crop 512, 160k iterations, total batch 16
# (4 GPUs x 4 images) (MambaMixer, arXiv 2403.19888 v2, App. G: the paper's protocol follows VMamba, i.e.
# MMSegmentation's Swin UperNet config: AdamW lr 6e-5, wd 0.01, 1500 linear warm-up iterations then poly decay,
# power 1; the rest: docs/mambamixer.md, 'COCO and ADE20K protocol'). Every config of configs_mmseg/ derives from
# this one; it inherits the installed mmseg's Swin-T config and replaces the backbone.
_base_ = ['mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py']

custom_imports = dict(imports=['ssm_plugins.mmseg'], allow_failed_imports=False)
# --resume continues the interrupted run's random streams (ssm_plugins.openmmlab.hooks.RandomStateHook)
custom_hooks = [dict(type='RandomStateHook')]

# ImageNet-1K checkpoint of the timm model (vim2_t) on local disk; nothing is downloaded. Set it with
# --cfg-options model.backbone.init_cfg.checkpoint=PATH (or model.backbone.init_cfg=None to start from scratch).
checkpoint_file = 'checkpoints/vim2_t_in1k.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='ViM2',
        arch='tiny',
        img_size=512,  # the crop; other sizes (whole-image test) resample the token-grid weights on the fly
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file)),
    # the dense pyramid (docs/mambamixer.md, 'Dense outputs'): all four levels have the embedding width D; the
    # auxiliary head reads level 3 (1/16)
    decode_head=dict(in_channels=[192, 192, 192, 192]),
    auxiliary_head=dict(in_channels=192))

# no decay on norms (paramwise_cfg, and the Swin base config's custom_keys: 'norm',
# its position tables) and on exactly the parameters the backbone's timm model names in no_weight_decay()
# (position / level embeddings, the class token, the SSM parameters): one list, the one our timm and MMPretrain
# training use (TimmNoDecayOptimWrapperConstructor, ssm_plugins.openmmlab.optimizers)
optim_wrapper = dict(
    constructor='TimmNoDecayOptimWrapperConstructor',
    paramwise_cfg=dict(norm_decay_mult=0.))

# 4 GPUs x 4 images = 16 [paper]
train_dataloader = dict(batch_size=4)

# data_root (default data/ade/ADEChallengeData2016) is baked into the dataloaders when the config is read; to move
# it override train_dataloader.dataset.data_root, val_dataloader.dataset.data_root and
# test_dataloader.dataset.data_root (see configs_mmseg/README.md).
