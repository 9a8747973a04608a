"""MMSegmentation 1.x adapter: ssm_plugins backbones in ``mmseg.registry.MODELS``.

Configs load it with ``custom_imports=dict(imports=['ssm_plugins.mmseg'], allow_failed_imports=False)``.
It is the only module of the package that imports mmseg; ``import ssm_plugins`` never does.
The backbones themselves arrive with the detection/segmentation issue.
"""
from mmseg.registry import MODELS

__all__ = ["MODELS"]
