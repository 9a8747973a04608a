# ViQS-T ablation, w/o Conv: no multi-resolution conv branch (Table 4 "w/o Conv"). Paper: 10.1M, 1168 img/s, 80.4
# top-1. The ViQS-T config with the registered ablation model viqs_t_noconv; nothing else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_noconv')
