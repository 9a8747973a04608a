"""MMPretrain 1.x adapter: our timm models as MMPretrain classifiers, our backbones in ``mmpretrain.registry.MODELS``.

Configs load it with ``custom_imports=dict(imports=['ssm_plugins.mmpretrain'], allow_failed_imports=False)``. Then

* ``model=dict(type='TimmClassifier', model_name='vim2_t', num_classes=1000, ...)`` is MMPretrain's own wrapper of a
  timm model (loss, Mixup/CutMix through ``train_cfg.augments``); importing this module registers our models in timm,
  so every name of ``timm.list_models()`` that ssm_plugins adds works there. Its checkpoints hold the timm model's
  own keys (TimmClassifier strips its ``model.`` prefix when saving), so the Mask R-CNN / UperNet configs'
  ``init_cfg=dict(type='Pretrained', checkpoint=...)`` load them as they are (``_TimmBackbone.load_pretrained``).
* ``ViM2``, ``ViQS``, ``SwinSSM2D``, ``ESSM2D``, ``MyoNet`` (``ssm_plugins.openmmlab``) are registered as backbones
  too, for ``ImageClassifier`` with an MMPretrain neck/head or for feature extraction.
* ``optim_wrapper=dict(constructor='TimmNoDecayOptimWrapperConstructor', ...)`` (``ssm_plugins.openmmlab``,
  registered in mmengine's root registry; our MMDetection/MMSegmentation configs use it too) exempts from weight decay
  exactly the parameters the model's ``no_weight_decay()`` names (position/class tokens, SSM parameters ...), as
  timm's own training script does, on top of ``paramwise_cfg`` (norms, biases).

Laid out as MMPretrain lays out its own: ``datasets`` (CIFAR-100, Tiny-ImageNet, CelebA as released), ``classifiers``
(``TimmMultiLabelClassifier``), ``metrics`` (``MultiLabelAccuracy``). It is the only package of ours that imports
mmpretrain; ``import ssm_plugins`` never does.
"""
from __future__ import annotations

from mmpretrain.registry import MODELS

from ..openmmlab import (BACKBONES, ESSM2D, MyoNet, SwinSSM2D, TimmNoDecayOptimWrapperConstructor, ViM2, ViQS,
                         no_weight_decay_parameters)  # also registers our timm models and the constructor
from .classifiers import TimmMultiLabelClassifier
from .datasets import (CELEBA_ATTRIBUTES, CelebA, LocalCIFAR100, TinyImageNet, TrainingFraction, fraction_indices,
                       read_celeba_attributes, read_celeba_partition)
from .metrics import MultiLabelAccuracy

for _backbone in BACKBONES:
    MODELS.register_module(module=_backbone)

__all__ = ["MODELS", "ViM2", "ViQS", "SwinSSM2D", "ESSM2D", "MyoNet", "TimmNoDecayOptimWrapperConstructor",
           "no_weight_decay_parameters", "LocalCIFAR100", "TinyImageNet", "CelebA", "CELEBA_ATTRIBUTES",
           "read_celeba_attributes", "read_celeba_partition", "TrainingFraction", "fraction_indices",
           "TimmMultiLabelClassifier", "MultiLabelAccuracy"]
