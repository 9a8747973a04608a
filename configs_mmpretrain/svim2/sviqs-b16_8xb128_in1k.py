# QSMixer as a plain sequence backbone on ImageNet-1K (MambaMixer paper, arXiv 2403.19888 v2, Table 1
# "QSMixer": 81.2 top-1; docs/mambamixer.md, 'Plain sequence backbones'); the MambaMixer twin
# (svim2-b16_8xb128_in1k.py) with the quasi-separable token mixer.
_base_ = ['./svim2-b16_8xb128_in1k.py']

model = dict(model_name='sviqs_b16')
