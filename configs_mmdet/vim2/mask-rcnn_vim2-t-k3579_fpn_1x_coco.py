# Table 13 row "{3,5,7,9}" (ViM2): Mask R-CNN 1x with the multi-resolution convs' kernels {3,5,7,9}; paper AP^b / AP^m
# 47.7 / 42.9, 48M (the {3,5} row is mask-rcnn_vim2-t_fpn_1x_coco.py). The ViM2-T 1x config with that one change; its
# ImageNet checkpoint comes from configs_mmpretrain/vim2/vim2-t-k3579_8xb128_in1k.py (copy the last epoch_300.pth of
# that run to the path below).
_base_ = ['./mask-rcnn_vim2-t_fpn_1x_coco.py']

pretrained = 'checkpoints/vim2_t_k3579_in1k.pth'
model = dict(backbone=dict(conv_kernels=(3, 5, 7, 9), init_cfg=dict(checkpoint=pretrained)))
