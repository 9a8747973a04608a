# ViQS-T ablation, MLP channel mixer (ratio 4, GELU) instead of QS (Table 3 "ViQS (MLP)"). Paper: 10.1M, 80.3 top-1 /
# 95.1 top-5. The ViQS-T config with the registered ablation model viqs_t_mlp; nothing else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_mlp')
