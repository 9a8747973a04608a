"""Data: readers of the released formats, and the embedded default data (built from data that installed packages ship,
or generated; deterministic, never downloaded) written in exactly those formats, so the same code reads both.

Readers of released files (a user's download, read as released; each module also generates tiny files in the format):

- ``lra``: the Long Range Arena release (ListOps / AAN TSVs, aclImdb, Pathfinder / Path-X metadata + PNGs).
- ``seq_images``: MNIST idx files, CIFAR-10 python pickles (sMNIST, psMNIST, sCIFAR, zMNIST, zCIFAR, LRA-Image).
- ``timeseries``: the ETT / Autoformer CSVs and LSTNet's raw tables, with their standard splits.
- ``mixtures.prepare_wsjmix_csv``: a wsj0-2mix folder -> the separation recipe's CSVs.
- ``action_segmentation``: MS-TCN's release (GTEA / 50Salads / Breakfast: mapping, split bundles, I3D features,
  per-frame labels) and its evaluation (accuracy, edit score, F1@k).
- ``action_localization``: the HACS Segments release as ActionFormer-family code reads it (ActivityNet-format JSON,
  SlowFast feature pickles or ``.npy``) and ActivityNet's detection mAP at tIoU thresholds.
- The image sets' readers are the toolboxes' own (MMPretrain's ImageNet / CIFAR / CustomDataset, MMDetection's
  CocoDataset, MMSegmentation's ADE20KDataset; ``ssm_plugins.mmpretrain.datasets`` where MMPretrain has none).

Generators of embedded data, in the official on-disk formats, written on first use into ``data_home()``:

- ``digits_split``: scikit-learn's 8x8 digits as a fixed train/test split (in memory; the main job).
- Classification: ``imagenet_digits`` (ImageNet folders + MMPretrain meta files), ``cifar_digits`` (CIFAR-100
  python pickles), ``tiny_imagenet_digits`` (Tiny-ImageNet-200 layout), ``celeba_digits`` (CelebA images +
  attribute / partition files).
- Dense prediction: ``coco_digits`` (COCO instances) and ``ade_digits`` (ADE20K layout), from ``_scenes``.
- Speech: ``mixtures.generate_mixtures`` (two-source mixtures in the wsj0-2mix layout) and ``keywords`` (a Speech
  Commands-layout keyword set).

Each generator module is also a CLI (``python -m ssm_plugins.data.<name> --out DIR``). The ``--cfg-options`` that
turn a paper config into a seconds-long CPU run on that data are ``ssm_plugins.openmmlab_tiny``.
"""
from ._scenes import DATA_ENV, DIGIT_NAMES, data_home
from .digits import digits_split
from .mixtures import generate_mixtures, prepare_wsjmix_csv

__all__ = ["DATA_ENV", "DIGIT_NAMES", "data_home", "digits_split", "generate_mixtures", "prepare_wsjmix_csv"]
