# MambaMixer as a plain sequence backbone on ImageNet-1K (MambaMixer paper, arXiv 2403.19888 v2, App. G, Table 1
# "MambaMixer": 81.4 top-1): 12 layers x 768, patch 16, non-causal S6 token mixer on the row-major patch sequence,
# no conv branch (docs/mambamixer.md, 'Plain sequence backbones'). The paper trains it "following M2" (App. G): the
# Table 7 recipe of the ViM2 configs, which this inherits; stochastic depth is not given for it: ViT-B's 0.1 [D].
_base_ = ['../vim2/vim2-t_8xb128_in1k.py']

model = dict(model_name='svim2_b16', drop_path_rate=0.1)
