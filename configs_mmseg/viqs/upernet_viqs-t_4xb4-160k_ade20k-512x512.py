# UperNet with a ViQS-T backbone (QSMixer token mixer) on ADE20K: the ViM2-T config with the other token mixer
# (docs/mambamixer.md, 'COCO and ADE20K protocol').
_base_ = ['../vim2/upernet_vim2-t_4xb4-160k_ade20k-512x512.py']

checkpoint_file = 'checkpoints/viqs_t_in1k.pth'  # local timm checkpoint, see the ViM2-T config
model = dict(backbone=dict(type='ViQS', init_cfg=dict(checkpoint=checkpoint_file)))
