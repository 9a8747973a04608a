# Moved to configs_mmdet/ssm2d/ (the 2-D SSM family has one folder name, ssm2d, in every configs_* tree); this
# path loads the same config for one more release.
_base_ = ['../ssm2d/mask-rcnn_swin-t-p4-w7-ssm2d_fpn_1x_coco.py']
