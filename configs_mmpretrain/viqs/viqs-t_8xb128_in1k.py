# ViQS-T on ImageNet-1K: Table 15 row "ViQS-T" (10.1M params, 1.9 GFLOPs, 81.7 top-1 / 95.8 top-5). The ViM2-T config
# (Table 7 recipe, stochastic depth 0.1) with the QSMixer token mixer; every ViQS config derives from this one.
_base_ = ['../vim2/vim2-t_8xb128_in1k.py']

model = dict(model_name='viqs_t')
