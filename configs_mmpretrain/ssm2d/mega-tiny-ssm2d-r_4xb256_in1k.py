# 2-D SSM paper, "Figure 5" (ImageNet-1K), row "2D-SSM-r": top-1 70.11, top-5 90.19, 5.96M params. Mega ViT-T with the
# real 2-D SSM in place of the EMA (Q/K path; 14x14 kernels; n_ssm 8, N 16, 4 directions). Recipe:
# mega-tiny_4xb256_in1k.py (DeiT's, not MEGA's own; a deviation).
_base_ = './mega-tiny_4xb256_in1k.py'

model = dict(model_name='mega_tiny_patch16_224_ssm2d')
