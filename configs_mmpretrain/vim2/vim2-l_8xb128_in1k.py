# ViM2-L on ImageNet-1K: Table 15 row "ViM2-L" (122M, 23.2 GFLOPs, 85.5 / 97.3). The ViM2-T config with the L model
# and its stochastic depth (0.5; T 0.1 / S 0.3 / B 0.4 / L 0.5 [D, DeiT/VMamba]); the Table 7 recipe is unchanged.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_l', drop_path_rate=0.5)
