# ViM2-T ablation, w/o LST: no local summary tokens concatenated to the patches (Table 4 "w/o LST"). Paper: 13.2M
# params, 1095 img/s, 81.6 top-1. The ViM2-T config with the registered ablation model vim2_t_nolst; nothing else
# changes.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t_nolst')
