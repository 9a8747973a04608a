#!/usr/bin/env python3
"""Recipe: pixel-level 1-D image classification (sMNIST, psMNIST, sCIFAR; snake / Morton orders).

Papers: eSSM (Liang & Li, arXiv 2402.15290) Table 9, settings Table 10 / App. E.2 (gaps: docs/essm.md); the
Myosotis paper's sMNIST / sCIFAR (snake order) and zMNIST / zCIFAR (Morton order) use the same train.py.

To run this recipe (data: the official MNIST idx files or the CIFAR-10 python pickles, see README.md):
    python train.py hparams/essm_smnist.yaml --data_folder=/path/to/mnist
    python train.py hparams/essm_psmnist.yaml --data_folder=/path/to/mnist
    python train.py hparams/essm_scifar.yaml --data_folder=/path/to/cifar10     # holds cifar-10-batches-py/

Images become (H*W, C) pixel sequences in the hparams' ``order`` (row / snake / morton / permuted); the training
split is divided into train / valid by a seeded random ``valid_fraction``; the best valid checkpoint is tested.
A ``permuted`` order is drawn once from ``permutation_seed`` and saved as ``<save_folder>/permutation.pt`` (read
back when the run resumes, so the whole run uses one permutation).
"""
import os
import sys

import torch

from ssm_plugins.data.seq_images import (SequentialImages, load_cifar10, load_mnist, pixel_order,
                                         train_valid_split)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sequence_brain import main  # noqa: E402  (recipes_sequence/sequence_brain.py, shared with LRA/)

DATASETS = ("mnist", "cifar10")


def image_order(hparams, height, width):
    """The pixel order: a name, or for 'permuted' the saved permutation (drawn and saved on the first run)."""
    order = hparams["order"]
    if order != "permuted":
        return order
    path = os.path.join(hparams["save_folder"], "permutation.pt")
    if os.path.isfile(path):
        return torch.load(path)
    permutation = pixel_order(height, width, "permuted", seed=hparams["permutation_seed"])
    os.makedirs(hparams["save_folder"], exist_ok=True)
    torch.save(permutation, path)
    return permutation


def dataio_prep(hparams):
    """train / valid / test ``SequentialImages`` from the official files in ``data_folder``."""
    name = hparams["dataset"]
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {name!r}")
    if name == "mnist":
        train, test = (load_mnist(hparams["data_folder"], split) for split in ("train", "test"))
    else:
        train, test = (load_cifar10(hparams["data_folder"], split, grayscale=hparams.get("grayscale", False))
                       for split in ("train", "test"))
    pad_to = hparams.get("pad_to")
    side = pad_to or train[0].shape[1]
    order = image_order(hparams, side, pad_to or train[0].shape[2])
    train_idx, valid_idx = train_valid_split(len(train[1]), hparams["valid_fraction"], hparams["split_seed"])
    common = dict(order=order, mean=hparams["mean"], std=hparams["std"], pad_to=pad_to,
                  as_image=hparams.get("as_image", False))
    return {
        "train": SequentialImages(train[0][train_idx], train[1][train_idx], augment=hparams.get("augment", False),
                                  prefix="train_", **common),
        "valid": SequentialImages(train[0][valid_idx], train[1][valid_idx], prefix="valid_", **common),
        "test": SequentialImages(*test, prefix="test_", **common),
    }


if __name__ == "__main__":
    main(dataio_prep, result_keys=("dataset", "order"))
