"""Backbones, one file per paper family, registered in timm (``@register_model``) when imported."""
from . import essm, mega, myo, s5, ssm2d, svim2, tsm2, vim2
