# Mask R-CNN + FPN with a ViQS-S backbone, 1x schedule (protocol: docs/mambamixer.md, 'COCO and ADE20K protocol').
_base_ = ['./mask-rcnn_viqs-t_fpn_1x_coco.py']

pretrained = 'checkpoints/viqs_s_in1k.pth'  # local timm checkpoint, see the ViM2-T config
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[320, 320, 320, 320]))
