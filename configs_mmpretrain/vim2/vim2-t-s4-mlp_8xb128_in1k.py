# MambaMixer Table 3 "S4 + MLP": ViM2-T with the S4 (S4D-Lin, bidirectional) token mixer of layers/lti.py in place of
# S6, and the MLP channel mixer (ratio 4, GELU). Paper: 18.3M params, 72.7 top-1 / 92.8 top-5; ours 20.19M (the
# paper's backbone for these rows is not described; ours keeps ViM2-T's, docs/mambamixer.md 'Table 3 token mixers').
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t', token_mixer='s4', channel_mixer='mlp')
