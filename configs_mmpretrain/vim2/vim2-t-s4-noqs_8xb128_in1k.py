# MambaMixer Table 3 "S4": ViM2-T with the S4 (S4D-Lin, bidirectional) token mixer of layers/lti.py in place of S6,
# and no channel mixer. Paper: 17.7M params, 68.9 top-1 / 90.5 top-5; ours 9.52M (the paper's backbone for these rows
# is not described; ours keeps ViM2-T's, docs/mambamixer.md 'Table 3 token mixers').
_base_ = ['./vim2-t_8xb128_in1k.py']

model = dict(model_name='vim2_t', token_mixer='s4', channel_mixer=False)
