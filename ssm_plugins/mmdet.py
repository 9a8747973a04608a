"""MMDetection 3.x adapter: ssm_plugins backbones in ``mmdet.registry.MODELS``.

Configs load it with ``custom_imports=dict(imports=['ssm_plugins.mmdet'], allow_failed_imports=False)``.
It is the only module of the package that imports mmdet; ``import ssm_plugins`` never does.
The backbones themselves arrive with the detection/segmentation issue.
"""
from mmdet.registry import MODELS

__all__ = ["MODELS"]
