# UperNet with Swin-T whose blocks carry the 2-D SSM (arXiv 2306.06635) on ADE20K. Same protocol as the ViM2/ViQS
# configs; drop path 0.3 as MMSegmentation's Swin-T UperNet.
_base_ = ['../vim2/upernet_vim2-t_4xb4-160k_ade20k-512x512.py']

checkpoint_file = 'checkpoints/swin_tiny_patch4_window7_224_ssm2d_in1k.pth'  # local timm checkpoint
model = dict(
    backbone=dict(
        _delete_=True,
        type='SwinSSM2D',
        arch='tiny',
        img_size=512,
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file)),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
