# ViM2-T ablation, w/o Conv: no multi-resolution conv branch (Table 4 "w/o Conv"). Paper: 13.2M params, 1093 img/s,
# 80.0 top-1. The ViM2-T config with the registered ablation model vim2_t_noconv; nothing else changes.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t_noconv')
