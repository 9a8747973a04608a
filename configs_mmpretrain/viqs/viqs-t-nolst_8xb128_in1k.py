# ViQS-T ablation, w/o LST: no local summary tokens concatenated to the patches (Table 4 "w/o LST"). Paper: 10.1M,
# 1174 img/s, 81.6 top-1. The ViQS-T config with the registered ablation model viqs_t_nolst; nothing else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_nolst')
