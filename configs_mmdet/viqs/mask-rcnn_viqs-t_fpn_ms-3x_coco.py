# Mask R-CNN + FPN with a ViQS-T backbone (QSMixer token mixer), ms-3x schedule: the ViM2-T config with the other
# token mixer (docs/mambamixer.md, 'COCO and ADE20K protocol').
_base_ = ['../vim2/mask-rcnn_vim2-t_fpn_ms-3x_coco.py']

pretrained = 'checkpoints/viqs_t_in1k.pth'  # local timm checkpoint, see the ViM2-T config
model = dict(backbone=dict(type='ViQS', init_cfg=dict(checkpoint=pretrained)))
