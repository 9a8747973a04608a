# ViQS-T ablation, w/o Attn: sum instead of cross-scan attention (Table 4 "w/o Attn"). Under the top-1 routing of
# classification there is one scan per image and nothing to attend over, so this is the same network as the full model
# (the paper's ViQS row matches its full model to the digit). Paper: 10.1M, 1172 img/s, 81.7 top-1. The ViQS-T config
# with the registered ablation model viqs_t_noattn; nothing else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_noattn')
