# MambaMixer Table 3 "Hippo + QS": ViM2-T with the HiPPO (fixed HiPPO-LegS A and B, bidirectional) token mixer of
# layers/lti.py in place of S6, and the QS channel mixer. Paper: 18.5M params, 77.5 top-1 / 94.0 top-5; ours 11.12M
# (the paper's backbone for these rows is not described; ours keeps ViM2-T's, docs/mambamixer.md 'Table 3 token
# mixers').
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t', token_mixer='hippo', channel_mixer=True)
