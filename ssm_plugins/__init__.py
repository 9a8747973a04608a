"""State-space layers for vision and audio: 2-D SSM, eSSM, MambaMixer/QSMixer (ViM2/ViQS) and Myo.

``import ssm_plugins`` loads the kernels (``ssm_plugins.ops``), the layers and the models, and registers
the models with timm. It imports nothing from MMDetection, MMSegmentation, mmcv or SpeechBrain: their
adapters (``ssm_plugins.mmdet``, ``ssm_plugins.mmseg``, ``ssm_plugins.speechbrain``) are imported by the
configs and recipes that use them.
"""
from . import ops
from . import layers, models
from .ops import backend_info

__version__ = "0.1.0"

__all__ = ["ops", "backend_info", "__version__"]
