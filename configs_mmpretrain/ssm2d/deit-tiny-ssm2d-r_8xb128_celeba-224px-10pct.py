# 2-D SSM paper, Figure 3 ("The effect of the training set size"), DeiT-T w. SSM-r on CelebA at 10 % of the training
# set: deit-tiny_8xb128_celeba-224px-10pct.py plus the spatial layer (the sweep of the figure: --cfg-options
# train_dataloader.dataset.fraction=0.25 ...).
_base_ = './deit-tiny_8xb128_celeba-224px-10pct.py'

model = dict(spatial_mixer='ssm2d')
