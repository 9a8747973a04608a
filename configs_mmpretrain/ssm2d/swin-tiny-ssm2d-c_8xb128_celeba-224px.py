# 2-D SSM paper, Table 2 (CelebA, 40 attributes), row "Swin-T w. SSM-c": mean attribute accuracy 91.78, 27.558M
# params. Recipe: _base_/celeba_bs1024_adamw_deit_20e.py (DeiT, 20 epochs: App. F; BCE), 224 px, 8 GPUs x 128.
#
# The complex 2-D SSM.
_base_ = './swin-tiny-ssm2d-r_8xb128_celeba-224px.py'

model = dict(ssm_complex=True)
