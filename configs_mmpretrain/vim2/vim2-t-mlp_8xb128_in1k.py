# ViM2-T ablation, MLP channel mixer (ratio 4, GELU) instead of QS (Table 3 "ViM2 (MLP)"). Paper: 13.1M params, 80.0
# top-1 / 95.0 top-5. The ViM2-T config with the registered ablation model vim2_t_mlp; nothing else changes.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t_mlp')
