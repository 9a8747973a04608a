# Table 13 row "{3}" (ViQS): Mask R-CNN 1x with the multi-resolution convs' kernels {3}; paper AP^b / AP^m 47.3 /
# 42.4, 40M (the {3,5} row is mask-rcnn_viqs-t_fpn_1x_coco.py). The ViQS-T 1x config with that one change; its
# ImageNet checkpoint comes from configs_mmpretrain/viqs/viqs-t-k3_8xb128_in1k.py (copy the last epoch_300.pth of that
# run to the path below).
_base_ = ['./mask-rcnn_viqs-t_fpn_1x_coco.py']

pretrained = 'checkpoints/viqs_t_k3_in1k.pth'
model = dict(backbone=dict(conv_kernels=(3,), init_cfg=dict(checkpoint=pretrained)))
