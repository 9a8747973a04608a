# 2-D SSM paper, Figure 3 ("The effect of the training set size"), ViT on C100 at a fraction of its training
# set: 10 % here (the paper plots the curve and prints no values). Everything else is vit_1xb128_cifar100.py.
#
# TrainingFraction (ssm_plugins.mmpretrain) keeps a seeded random fraction of each class (of the images for the
# multi-label CelebA); the validation set stays whole. The sweep of the figure, one run per fraction:
#   --cfg-options train_dataloader.dataset.fraction=0.25 (and 0.5, 0.75; 1.0 is vit_1xb128_cifar100.py)
_base_ = './vit_1xb128_cifar100.py'

train_dataloader = dict(dataset=dict(_delete_=True, type='TrainingFraction', fraction=0.1, seed=0,
                                     dataset={{_base_.train_dataloader.dataset}}))
