# Table 13 row "{3,5,7}" (ViQS): Mask R-CNN 1x with the multi-resolution convs' kernels {3,5,7}; paper AP^b / AP^m
# 47.4 / 42.6, 40M (the {3,5} row is mask-rcnn_viqs-t_fpn_1x_coco.py). The ViQS-T 1x config with that one change; its
# ImageNet checkpoint comes from configs_mmpretrain/viqs/viqs-t-k357_8xb128_in1k.py (copy the last epoch_300.pth of
# that run to the path below).
_base_ = ['./mask-rcnn_viqs-t_fpn_1x_coco.py']

pretrained = 'checkpoints/viqs_t_k357_in1k.pth'
model = dict(backbone=dict(conv_kernels=(3, 5, 7), init_cfg=dict(checkpoint=pretrained)))
