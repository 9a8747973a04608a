"""Embedded default data: built from data installed packages ship or generated (never downloaded), deterministic.

- ``digits_split``: scikit-learn's 8x8 digits as a fixed train/test split (image classification).
- Classification sets in the official on-disk formats, written on first use into ``data_home()``:
  ``imagenet_digits`` (ImageNet folders + MMPretrain meta files), ``cifar_digits`` (CIFAR-100 python pickles),
  ``tiny_imagenet_digits`` (Tiny-ImageNet-200 layout), ``celeba_digits`` (CelebA images + attribute/partition files).
- Dense-prediction sets, written on first use into ``data_home()``: ``ssm_plugins.data.coco_digits.coco_digits()``
  (COCO instances) and ``ssm_plugins.data.ade_digits.ade_digits()`` (ADE20K layout).
- Speech: ``generate_mixtures`` (two-source mixtures in the wsj0-2mix layout, ``ssm_plugins.data.mixtures``) and
  ``ssm_plugins.data.keywords`` (a Speech Commands-layout keyword set).
- Sequences (``recipes_sequence/``): ``ssm_plugins.data.lra`` (the LRA release files: ListOps / AAN TSVs, aclImdb,
  Pathfinder / Path-X metadata + PNGs), ``ssm_plugins.data.seq_images`` (MNIST idx files, CIFAR-10 pickles) and
  ``ssm_plugins.data.timeseries`` (ETT / Weather / Electricity / Traffic CSVs).
Each generator module is also a CLI (``python -m ssm_plugins.data.<name> --out DIR``).
"""
from ._scenes import DATA_ENV, DIGIT_NAMES, data_home
from .digits import digits_split
from .mixtures import generate_mixtures, prepare_wsjmix_csv

__all__ = ["DATA_ENV", "DIGIT_NAMES", "data_home", "digits_split", "generate_mixtures", "prepare_wsjmix_csv"]
