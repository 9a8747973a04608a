# Mask R-CNN + FPN with a ViM2-T backbone, 1x schedule (MambaMixer, arXiv 2403.19888 v2, App. G: the paper's COCO
# protocol follows VMamba, i.e. MMDetection's Swin Mask R-CNN config, with AdamW lr 1e-4; the detector and the rest:
# docs/mambamixer.md, 'COCO and ADE20K protocol'). Every config of configs_mmdet/ derives from this one;
# it inherits the installed mmdet's Swin-T config and replaces the backbone.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']

custom_imports = dict(imports=['ssm_plugins.mmdet'], allow_failed_imports=False)
# --resume continues the interrupted run's random streams (ssm_plugins.openmmlab.hooks.RandomStateHook)
custom_hooks = [dict(type='RandomStateHook')]

# ImageNet-1K checkpoint of the timm model (vim2_t) on local disk; nothing is downloaded. Set it with
# --cfg-options model.backbone.init_cfg.checkpoint=PATH (or model.backbone.init_cfg=None to start from scratch).
pretrained = 'checkpoints/vim2_t_in1k.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='ViM2',
        arch='tiny',
        # built for the largest padded 1x input (800 x 1344); other sizes resample the position embedding and
        # the channel mixer's token-axis weights on the fly (docs/mambamixer.md, 'Channel mixer at other token counts')
        img_size=(800, 1344),
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    # the dense pyramid (docs/mambamixer.md, 'Dense outputs'): all four levels have the embedding width D
    neck=dict(in_channels=[192, 192, 192, 192]))

# AdamW lr 1e-4 [paper], weight decay 0.05 [VMamba/Swin]; no decay on norms (paramwise_cfg, and the Swin base
# config's custom_keys: 'norm', its position tables) and on exactly the parameters the backbone's timm model
# names in no_weight_decay() (position / level embeddings, the class token, the SSM parameters): one list, the
# one our timm and MMPretrain training use (TimmNoDecayOptimWrapperConstructor, ssm_plugins.openmmlab.optimizers)
optim_wrapper = dict(
    constructor='TimmNoDecayOptimWrapperConstructor',
    paramwise_cfg=dict(norm_decay_mult=0.))

# mmdet's CocoDataset, except that a corrupt annotation file raises an error naming it (ssm_plugins.mmdet)
train_dataloader = dict(dataset=dict(type='NamedCocoDataset'))
val_dataloader = dict(dataset=dict(type='NamedCocoDataset'))
test_dataloader = dict(dataset=dict(type='NamedCocoDataset'))

# data_root (default data/coco/) is baked into the dataloaders and evaluators when the config is read; to move it
# override train_dataloader.dataset.data_root, val_dataloader.dataset.data_root, test_dataloader.dataset.data_root,
# val_evaluator.ann_file and test_evaluator.ann_file (see configs_mmdet/README.md).
