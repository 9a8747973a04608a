# Mask R-CNN + FPN with Swin-T whose blocks carry the 2-D SSM (arXiv 2306.06635), ms-3x schedule. Same protocol as the
# ViM2/ViQS configs (AdamW lr 1e-4, wd 0.05, drop path 0.2 as MMDetection's Swin-T).
_base_ = ['../vim2/mask-rcnn_vim2-t_fpn_ms-3x_coco.py']

pretrained = 'checkpoints/swin_tiny_patch4_window7_224_ssm2d_in1k.pth'  # local timm checkpoint
model = dict(
    backbone=dict(
        _delete_=True,
        type='SwinSSM2D',
        arch='tiny',
        img_size=(800, 1344),
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))
