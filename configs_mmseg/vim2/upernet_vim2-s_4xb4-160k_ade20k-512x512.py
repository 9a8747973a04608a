# UperNet with a ViM2-S backbone on ADE20K (protocol: docs/mambamixer.md, 'COCO and ADE20K protocol').
_base_ = ['./upernet_vim2-t_4xb4-160k_ade20k-512x512.py']

checkpoint_file = 'checkpoints/vim2_s_in1k.pth'  # local timm checkpoint, see the ViM2-T config
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3, init_cfg=dict(checkpoint=checkpoint_file)),
    decode_head=dict(in_channels=[320, 320, 320, 320]),
    auxiliary_head=dict(in_channels=320))
