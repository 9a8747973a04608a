# ViQS-B on ImageNet-1K: Table 15 row "ViQS-B" (45M, 9.0 GFLOPs, 84.9 / 97.0). The ViQS-T config with the B model and
# its stochastic depth (0.4; T 0.1 / S 0.3 / B 0.4 / L 0.5 [D, DeiT/VMamba]); the Table 7 recipe is unchanged.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_b', drop_path_rate=0.4)
