# ViQS-T ablation, w/o QS: no channel mixer (Table 3 "ViQS - QS", Table 4 "w/o QS"). Paper: 9.8M, 1219 img/s, 78.2
# top-1 (Table 3: 94.3 top-5). The ViQS-T config with the registered ablation model viqs_t_noqs; nothing else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_noqs')
