# ViQS-S on ImageNet-1K: Table 15 row "ViQS-S" (23M, 4.7 GFLOPs, 83.8 / 96.5). The ViQS-T config with the S model and
# its stochastic depth (0.3; T 0.1 / S 0.3 / B 0.4 / L 0.5 [D, DeiT/VMamba]); the Table 7 recipe is unchanged.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_s', drop_path_rate=0.3)
