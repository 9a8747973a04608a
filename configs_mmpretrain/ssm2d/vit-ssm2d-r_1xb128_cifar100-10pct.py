# 2-D SSM paper, Figure 3 ("The effect of the training set size"), ViT w/ SSM-r on C100 at 10 % of the training
# set: vit_1xb128_cifar100-10pct.py plus the spatial layer (the sweep of the figure: --cfg-options
# train_dataloader.dataset.fraction=0.25 ...).
_base_ = './vit_1xb128_cifar100-10pct.py'

model = dict(spatial_mixer='ssm2d')
