# ViM2-T ablation, w/o SoS: the four cross-scans C1-C4 for every image, summed, no router (Table 4 "w/o SoS" = Table
# 12 "Cross-Scan (4)"). Paper: 13.2M params, 1067 img/s, 80.8 top-1. The ViM2-T config with the registered ablation
# model vim2_t_nosos; nothing else changes.
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t_nosos')
