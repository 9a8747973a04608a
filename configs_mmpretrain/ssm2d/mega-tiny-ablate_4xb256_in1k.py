# 2-D SSM paper, "Figure 5" (ImageNet-1K), row "MEGA-ablate": top-1 66.97, top-5 88.17, 5.91M params. Mega ViT-T
# without a spatial layer. Recipe: mega-tiny_4xb256_in1k.py (DeiT's, not MEGA's own; a deviation).
_base_ = './mega-tiny_4xb256_in1k.py'

model = dict(model_name='mega_tiny_patch16_224_ablate')
