# CelebA, 40 binary attributes (multi-label), 224 px, DeiT's augmentations (arXiv:2306.06635, App. F): the aligned
# 178x218 images resized to 224x224 [paper], horizontal flip, RandAugment (2 ops, magnitude 9, std 0.5), random
# erasing 0.25, repeated augmentation x3 [DeiT]. Not DeiT's RandomResizedCrop: the attributes sit at fixed places
# of an aligned face (hat, beard, ...) and a crop of 8-100 % of the image would cut them away.
# Metric: the mean accuracy over the 40 attributes [paper] (MultiLabelAccuracy, our adapter: MMPretrain's
# multi-label metrics give precision / recall / F1 / mAP, not accuracy); mAP as well.
#
# Data: the official release at data/celeba: img_align_celeba/*.jpg, list_attr_celeba.txt,
# list_eval_partition.txt (train 0 / val 1 / test 2). CelebA (our adapter) reads them; generated stand-in:
# python -m ssm_plugins.data.celeba_digits --out DIR.
dataset_type = 'CelebA'
data_preprocessor = dict(
    num_classes=40,
    mean=[123.675, 116.28, 103.53],  # ImageNet's, RGB (DeiT)
    std=[58.395, 57.12, 57.375],
    to_rgb=True,
    to_onehot=True)  # multi-hot targets for BCE (and for Mixup/CutMix to mix)
bgr_mean = data_preprocessor['mean'][::-1]
bgr_std = data_preprocessor['std'][::-1]

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(224, 224), backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandAugment', policies='timm_increasing', num_policies=2, total_level=10, magnitude_level=9,
         magnitude_std=0.5, hparams=dict(pad_val=[round(x) for x in bgr_mean], interpolation='bicubic')),
    dict(type='RandomErasing', erase_prob=0.25, mode='rand', min_area_ratio=0.02, max_area_ratio=1 / 3,
         fill_color=bgr_mean, fill_std=bgr_std),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(224, 224), backend='pillow', interpolation='bicubic'),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=128,
    num_workers=5,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/celeba', split='train', pipeline=train_pipeline),
    sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True),
)
val_dataloader = dict(
    batch_size=128,
    num_workers=5,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/celeba', split='val', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = [dict(type='MultiLabelAccuracy'), dict(type='AveragePrecision')]
# the test partition (2) of list_eval_partition.txt
test_dataloader = dict(
    batch_size=128,
    num_workers=5,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/celeba', split='test', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
test_evaluator = val_evaluator
