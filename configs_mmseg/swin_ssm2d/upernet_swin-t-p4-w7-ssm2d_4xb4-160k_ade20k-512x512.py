# Moved to configs_mmseg/ssm2d/ (the 2-D SSM family has one folder name, ssm2d, in every configs_* tree); this
# path loads the same config for one more release.
_base_ = ['../ssm2d/upernet_swin-t-p4-w7-ssm2d_4xb4-160k_ade20k-512x512.py']
