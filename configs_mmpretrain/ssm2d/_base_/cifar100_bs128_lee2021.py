# CIFAR-100, the small-dataset pipeline of Lee et al. 2021 ("ViT for small-size datasets") that the 2-D SSM paper
# (arXiv:2306.06635, App. F; details: docs/2d-ssm.md, 'Training recipes') trains with: 32 px, random crop (pad 4)
# + flip, RandAugment, random erasing 0.25, repeated augmentation x3, batch 128. Mixup/CutMix and label smoothing
# are in lee2021_bs128_adamw_100e.py (model side).
#
# Auto-augmentation: the paper's text says RandAugment; its code (code-v1) uses AutoAugment's CIFAR policy, which
# MMPretrain does not ship (its AutoAugment presets: 'imagenet' only). So CIFAR-100 uses RandAugment, the paper's
# text (docs/2d-ssm.md, 'Training recipes'), with DeiT's setting (2 ops, magnitude 9, std 0.5).
#
# Data: the unpacked official archive, data/cifar100/cifar-100-python/{train,test,meta}; LocalCIFAR100 (our
# adapter) is MMPretrain's CIFAR100 reader without its md5 check of the official files (so a local or generated
# copy reads too: python -m ssm_plugins.data.cifar_digits --out data/cifar100) and never downloads.
dataset_type = 'LocalCIFAR100'
cifar100_mean = [129.304, 124.070, 112.434]  # RGB, 0-255 (the pickles hold RGB)
data_preprocessor = dict(num_classes=100, mean=cifar100_mean, std=[68.170, 65.392, 70.418], to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=32, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandAugment', policies='timm_increasing', num_policies=2, total_level=10, magnitude_level=9,
         magnitude_std=0.5, hparams=dict(pad_val=[round(x) for x in cifar100_mean], interpolation='bicubic')),
    # p 0.25, area 0.02-0.4, aspect 0.3-1/0.3, filled with the mean colour (Zhong et al.'s defaults, Lee et al.)
    dict(type='RandomErasing', erase_prob=0.25, mode='const', min_area_ratio=0.02, max_area_ratio=0.4,
         aspect_range=(0.3, 1 / 0.3), fill_color=cifar100_mean),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/cifar100', split='train', pipeline=train_pipeline),
    sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True),  # repeated augmentation x3
)
val_dataloader = dict(
    batch_size=128,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root='data/cifar100', split='test', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
