"""State-space layers for vision and audio: 2-D SSM, eSSM, MambaMixer/QSMixer (ViM2/ViQS) and Myo.

``import ssm_plugins`` loads the kernels (``ssm_plugins.ops``) and the layers, and registers the models
with timm (at once if timm is loaded, else when the program imports timm: see ``ssm_plugins.timm``), and
makes ``torch.onnx.export`` handle our ops (on the first ONNX export: see ``ssm_plugins._onnx``).
It imports nothing from MMDetection, MMSegmentation, mmcv or SpeechBrain: their adapters
(``ssm_plugins.mmdet``, ``ssm_plugins.mmseg``, ``ssm_plugins.speechbrain``) are imported by the configs
and recipes that use them.
"""
import importlib

from . import layers, ops
from ._onnx import install as _install_onnx_registration
from .timm import install as _install_timm_registration
from .ops import backend_info

__version__ = "0.1.0"

__all__ = ["ops", "layers", "models", "backend_info", "__version__"]

_install_timm_registration()
_install_onnx_registration()


def __getattr__(name):
    # ``ssm_plugins.models`` imports timm, so it loads on first use rather than with the package
    if name == "models":
        return importlib.import_module(".models", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
