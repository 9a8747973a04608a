# ViM2-T Mask R-CNN, 3x schedule with multi-scale training (docs/mambamixer.md, 'COCO and ADE20K protocol'):
# 36 epochs, steps at 27 and 33, the DETR-style multi-scale + random-crop augmentation of MMDetection's Swin
# ms-crop-3x config.
_base_ = ['./mask-rcnn_vim2-t_fpn_1x_coco.py']

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomChoice',
        transforms=[
            [dict(type='RandomChoiceResize', scales=[(s, 1333) for s in range(480, 801, 32)], keep_ratio=True)],
            [
                dict(type='RandomChoiceResize', scales=[(400, 1333), (500, 1333), (600, 1333)], keep_ratio=True),
                dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600), allow_negative_crop=True),
                dict(type='RandomChoiceResize', scales=[(s, 1333) for s in range(480, 801, 32)], keep_ratio=True),
            ],
        ]),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[27, 33], gamma=0.1),
]
