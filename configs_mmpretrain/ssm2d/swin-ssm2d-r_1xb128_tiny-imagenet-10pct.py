# 2-D SSM paper, Figure 3 ("The effect of the training set size"), Swin w/ SSM-r on T-IN at 10 % of the training
# set: swin_1xb128_tiny-imagenet-10pct.py plus the spatial layer (the sweep of the figure: --cfg-options
# train_dataloader.dataset.fraction=0.25 ...).
_base_ = './swin_1xb128_tiny-imagenet-10pct.py'

model = dict(spatial_mixer='ssm2d')
