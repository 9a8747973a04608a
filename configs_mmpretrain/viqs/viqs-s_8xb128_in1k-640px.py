# MambaMixer paper (arXiv 2403.19888 v2) Table 14 row "ViQS (S)" at 640x640 (38.2 GFLOPs, 80.4 top-1; Figure 3): the
# viqs-s model trained at 224 by viqs-s_8xb128_in1k.py, tested at 640 px. Only the test pipeline changes: resize the
# short side to 731 and centre-crop 640: the 224 protocol's 256/224 ratio kept at every size [D: the paper does not say
# how it resizes; docs/mambamixer.md, 'Training recipes']. The model stays built at 224, so the 224 checkpoint loads as
# is; at 640 px it resamples the position embedding (bicubic) and the channel mixers' token-axis weights (bilinear,
# area-rescaled) on the fly, as checkpoint_filter_fn of ssm_plugins/models/vim2.py does for a model built at 640.
# Use with
#   mim test mmpretrain configs_mmpretrain/viqs/viqs-s_8xb128_in1k-640px.py \
#       --checkpoint work_dirs/viqs-s_8xb128_in1k/epoch_300.pth
_base_ = ['./viqs-s_8xb128_in1k.py']

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=731, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=640),
    dict(type='PackInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
