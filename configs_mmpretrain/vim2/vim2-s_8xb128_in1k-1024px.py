# MambaMixer paper (arXiv 2403.19888 v2) Table 14 row "ViM2 (S)" at 1024x1024 (110.1 GFLOPs, 65.3 top-1; Figure 3): the
# vim2-s model trained at 224 by vim2-s_8xb128_in1k.py, tested at 1024 px. Only the test pipeline changes: resize the
# short side to 1170 and centre-crop 1024: the 224 protocol's 256/224 ratio kept at every size [D: the paper does not
# say how it resizes; docs/mambamixer.md, 'Training recipes']. The model stays built at 224, so the 224 checkpoint loads
# as is; at 1024 px it resamples the position embedding (bicubic) and the channel mixers' token-axis weights (bilinear,
# area-rescaled) on the fly, as checkpoint_filter_fn of ssm_plugins/models/vim2.py does for a model built at 1024.
# Use with
#   mim test mmpretrain configs_mmpretrain/vim2/vim2-s_8xb128_in1k-1024px.py \
#       --checkpoint work_dirs/vim2-s_8xb128_in1k/epoch_300.pth
_base_ = ['./vim2-s_8xb128_in1k.py']

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=1170, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=1024),
    dict(type='PackInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
