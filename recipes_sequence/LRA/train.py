#!/usr/bin/env python3
"""Recipe: Long Range Arena (ListOps, Text, Retrieval, Image, Pathfinder, Path-X).

Papers: eSSM (Liang & Li, arXiv 2402.15290) Tables 2 / 7, settings Table 10 + App. E.2 (gaps: docs/essm.md);
the 2-D SSM paper's Mega-ISO LRA-Image (Fig. 4); the Myosotis paper's ListOps / Pathfinder / Path-X use the
same train.py (hparams/myo_*.yaml).

To run this recipe (data: the official files a user downloads, see README.md):
    python train.py hparams/essm_listops.yaml --data_folder=/path/to/lra_release
    python train.py hparams/essm_text.yaml --data_folder=/path/to/imdb          # holds aclImdb/
    python train.py hparams/essm_retrieval.yaml --data_folder=/path/to/lra_release
    python train.py hparams/essm_image.yaml --data_folder=/path/to/cifar10      # holds cifar-10-batches-py/
    python train.py hparams/essm_pathfinder.yaml --data_folder=/path/to/lra_release
    python train.py hparams/essm_pathx.yaml --data_folder=/path/to/lra_release

Token tasks are padded per batch with id 0 (SpeechBrain's PaddedBatch); the model gets the padding mask (pooling
over the valid steps; with ``mask_padding: True`` also zeroed before every SSM convolution). The best valid
checkpoint is tested; the test accuracy goes to ``<output_folder>/test_stats.json``.
"""
import os
import sys


from ssm_plugins.data import lra
from ssm_plugins.data.seq_images import SequentialImages, load_cifar10, train_valid_split

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sequence_brain import main  # noqa: E402  (recipes_sequence/sequence_brain.py, shared with sequential_images/)

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")


def _subset(examples, indices):
    return [examples[i] for i in indices]


def dataio_prep(hparams):
    """train / valid / test datasets of ``hparams['task']`` from the official files in ``data_folder``."""
    task, root = hparams["task"], hparams["data_folder"]
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task in ("listops", "retrieval"):
        read, cls = (lra.read_listops, lra.TokenSequences) if task == "listops" else (lra.read_aan, lra.TokenPairs)
        return {split: cls(read(root, split, hparams["max_length"]), prefix=f"{split}_")
                for split in ("train", "valid", "test")}
    if task == "text":
        train = lra.read_imdb(root, "train", hparams["max_length"])
        test = lra.read_imdb(root, "test", hparams["max_length"])
        if hparams["valid_fraction"] > 0:
            train_idx, valid_idx = train_valid_split(len(train), hparams["valid_fraction"], hparams["split_seed"])
            train, valid = _subset(train, train_idx), _subset(train, valid_idx)
        else:  # LRA's protocol: IMDB has no validation split, the test set serves as both
            valid = test
        return {"train": lra.TokenSequences(train, "train_"), "valid": lra.TokenSequences(valid, "valid_"),
                "test": lra.TokenSequences(test, "test_")}
    if task == "image":
        (images, labels), test = (load_cifar10(root, split, grayscale=True) for split in ("train", "test"))
        train_idx, valid_idx = train_valid_split(len(labels), hparams["valid_fraction"], hparams["split_seed"])
        common = dict(order="row", mean=hparams["mean"], std=hparams["std"], as_image=hparams.get("as_image", False))
        return {"train": SequentialImages(images[train_idx], labels[train_idx], augment=hparams["augment"],
                                          prefix="train_", **common),
                "valid": SequentialImages(images[valid_idx], labels[valid_idx], prefix="valid_", **common),
                "test": SequentialImages(*test, prefix="test_", **common)}
    paths, labels = lra.read_pathfinder(root, task)
    splits = lra.split_indices(len(paths), hparams["split_fractions"], hparams["split_seed"])
    return {split: lra.PathfinderImages([paths[i] for i in idx], labels[idx], hparams["mean"][0],
                                        hparams["std"][0], prefix=f"{split}_")
            for split, idx in splits.items()}


if __name__ == "__main__":
    main(dataio_prep, result_keys=("task",))
