# ViQS-T ablation, w/ f+b: the naive forward + backward selective channel mixer, two separate S6 blocks (Table 4 "w/
# f+b"). Paper: 13.0M, 1007 img/s, 81.6 top-1. The ViQS-T config with the registered ablation model viqs_t_fb; nothing
# else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_fb')
