# ViM2-B on ImageNet-1K: Table 15 row "ViM2-B" (74M, 17.9 GFLOPs, 85.0 / 97.1). The ViM2-T config with the B model and
# its stochastic depth (0.4; T 0.1 / S 0.3 / B 0.4 / L 0.5 [D, DeiT/VMamba]); the Table 7 recipe is unchanged.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_b', drop_path_rate=0.4)
