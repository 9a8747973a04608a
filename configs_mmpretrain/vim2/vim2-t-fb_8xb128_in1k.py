# ViM2-T ablation, w/ f+b: the naive forward + backward selective channel mixer, two separate S6 blocks (Table 4 "w/
# f+b"). Paper: 16.8M params, 1162 img/s, 81.4 top-1. The ViM2-T config with the registered ablation model vim2_t_fb;
# nothing else changes.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t_fb')
