# Tiny-ImageNet-200, the small-dataset pipeline of Lee et al. 2021 that the 2-D SSM paper (arXiv:2306.06635,
# App. F; details: docs/2d-ssm.md, 'Training recipes') trains with: 64 px, random crop (pad 4) + flip, AutoAugment
# (ImageNet policy), random erasing 0.25, repeated augmentation x3, batch 128. Mixup/CutMix and label smoothing:
# lee2021_bs128_adamw_100e.py.
#
# Auto-augmentation: the paper's text says RandAugment; its code (code-v1) uses AutoAugment's ImageNet policy for
# Tiny-ImageNet, which MMPretrain ships ('imagenet'), so that is used here (the CIFAR-100 twin uses RandAugment
# for want of a CIFAR policy; docs/2d-ssm.md, 'Training recipes').
#
# Data: the unpacked official tiny-imagenet-200.zip at data/tiny-imagenet-200 (wnids.txt, train/<wnid>/images/,
# val/images/ + val/val_annotations.txt). TinyImageNet (our adapter) reads the flat official val/ folder through
# val_annotations.txt. Generated stand-in: python -m ssm_plugins.data.tiny_imagenet_digits --out DIR.
dataset_type = 'TinyImageNet'
# Tiny-ImageNet's per-channel statistics (Lee et al.), RGB, 0-255
tiny_imagenet_mean = [122.451, 114.266, 101.363]
data_preprocessor = dict(num_classes=200, mean=tiny_imagenet_mean, std=[58.701, 57.758, 57.681], to_rgb=True)
bgr_mean = tiny_imagenet_mean[::-1]  # the transforms below see the BGR image LoadImageFromFile gives

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomCrop', crop_size=64, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='AutoAugment', policies='imagenet', hparams=dict(pad_val=[round(x) for x in bgr_mean])),
    # p 0.25, area 0.02-0.4, aspect 0.3-1/0.3, filled with the mean colour (Zhong et al.'s defaults, Lee et al.)
    dict(type='RandomErasing', erase_prob=0.25, mode='const', min_area_ratio=0.02, max_area_ratio=0.4,
         aspect_range=(0.3, 1 / 0.3), fill_color=bgr_mean),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/tiny-imagenet-200', split='train', pipeline=train_pipeline),
    sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True),  # repeated augmentation x3
)
val_dataloader = dict(
    batch_size=128,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/tiny-imagenet-200', split='val', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
