# ViQS-T ablation, w/o SoS: the four cross-scans C1-C4 for every image, summed, no router (Table 4 "w/o SoS" = Table
# 12 "Cross-Scan (4)"). Paper: 10.1M, 1129 img/s, 81.2 top-1 (Table 12: 1129 img/s, 81.2). The ViQS-T config with the
# registered ablation model viqs_t_nosos; nothing else changes.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(model_name='viqs_t_nosos')
