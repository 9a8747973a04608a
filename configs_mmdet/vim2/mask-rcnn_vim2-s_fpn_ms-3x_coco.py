# ViM2-S Mask R-CNN, 3x schedule with multi-scale training (docs/mambamixer.md, 'COCO and ADE20K protocol').
_base_ = ['./mask-rcnn_vim2-t_fpn_ms-3x_coco.py']

pretrained = 'checkpoints/vim2_s_in1k.pth'  # local timm checkpoint, see the ViM2-T config
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[320, 320, 320, 320]))
