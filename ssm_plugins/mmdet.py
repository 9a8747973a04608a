"""MMDetection 3.x adapter: ssm_plugins backbones in ``mmdet.registry.MODELS``.

Configs load it with ``custom_imports=dict(imports=['ssm_plugins.mmdet'], allow_failed_imports=False)`` and then
use ``backbone=dict(type='ViM2', arch='tiny', ...)`` (also ViQS, SwinSSM2D, ESSM2D, MyoNet; see
``ssm_plugins.openmmlab``). It is the only module of the package that imports mmdet; ``import ssm_plugins`` never
does. Importing it also lets torch's default ``weights_only`` load mmengine checkpoints (``mim test``, resume).
"""
import json

from mmdet.datasets import CocoDataset
from mmdet.registry import DATASETS, MODELS

from .openmmlab import BACKBONES, ESSM2D, SwinSSM2D, MyoNet, ViM2, ViQS

for _backbone in BACKBONES:
    MODELS.register_module(module=_backbone)


@DATASETS.register_module()
class NamedCocoDataset(CocoDataset):
    """MMDetection's ``CocoDataset``, unchanged, except that an annotation file which is not JSON raises an error
    naming it (pycocotools' ``json.load`` raises ``JSONDecodeError`` with a position only). configs_mmdet/ use it."""

    def load_data_list(self):
        try:
            return super().load_data_list()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"ann_file {self.ann_file}: not a COCO annotation file (JSON): {exc}") from exc


__all__ = ["MODELS", "ViM2", "ViQS", "SwinSSM2D", "ESSM2D", "MyoNet", "NamedCocoDataset"]
