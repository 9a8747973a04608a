# ViM2-T ablation, w/o QS: no channel mixer (Table 3 "ViM2 - QS", Table 4 "w/o QS"). Paper: 11.3M params, 1148 img/s,
# 78.4 top-1 (Table 3: 93.9 top-5). The ViM2-T config with the registered ablation model vim2_t_noqs; nothing else
# changes.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t_noqs')
