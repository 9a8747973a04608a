# ViQS-T with multi-resolution conv kernels {3,5,7,9} (the default is {3,5}): the ImageNet-1K pre-training of the
# Table 13 row "{3,5,7,9}" backbone (Table 13 reports COCO only: AP^b / AP^m 47.2 / 42.1, 40M with Mask R-CNN; no
# ImageNet figure). Its checkpoint feeds configs_mmdet/viqs/mask-rcnn_viqs-t-k3579_fpn_1x_coco.py (the conv weights'
# shapes depend on the kernel set, so a {3,5} checkpoint cannot be loaded there).
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(conv_kernels=(3, 5, 7, 9))
