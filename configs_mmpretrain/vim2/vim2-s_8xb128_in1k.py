# ViM2-S on ImageNet-1K: Table 15 row "ViM2-S" (28M params, 5.3 GFLOPs, 83.8 top-1 / 96.6 top-5). The ViM2-T config
# with the S model and its stochastic depth (0.3; T 0.1 / S 0.3 / B 0.4 / L 0.5 [D, DeiT/VMamba]); the Table 7 recipe
# is unchanged.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_s', drop_path_rate=0.3)
