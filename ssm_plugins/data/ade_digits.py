"""ADE20K-format semantic segmentation data from scikit-learn's digits (deterministic, never downloaded).

Layout, as MMSegmentation's ``ADE20KDataset`` configs expect under ``data_root``::

    images/{training,validation}/*.jpg  annotations/{training,validation}/*.png

Same scenes as ``coco_digits``. Label maps follow ADE20K: 0 = "other" (the canvas, ignored with
``reduce_zero_label=True``), 1..10 = the digits 'zero'..'nine' (``CLASSES``), so a model has 10 classes.

    python -m ssm_plugins.data.ade_digits [--out DIR]
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np

from ._scenes import DIGIT_NAMES, cli, generated, scenes

NAME = "ade_digits"
CLASSES = DIGIT_NAMES
SPLITS = {"training": (100, 2), "validation": (30, 3)}  # split -> (images, seed)


def _write(root: Path) -> None:
    from PIL import Image

    for split, (n_images, seed) in SPLITS.items():
        (root / "images" / split).mkdir(parents=True)
        (root / "annotations" / split).mkdir(parents=True)
        for index, scene in enumerate(scenes(n_images, seed), start=1):
            label_map = np.zeros(scene.image.shape[:2], dtype=np.uint8)
            for label, mask in zip(scene.labels, scene.masks):
                label_map[mask] = label + 1
            stem = f"ADE_digits_{split}_{index:06d}"
            Image.fromarray(scene.image).save(root / "images" / split / f"{stem}.jpg", quality=95)
            Image.fromarray(label_map).save(root / "annotations" / split / f"{stem}.png")


def ade_digits(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Path of the generated data set (``$SSM_PLUGINS_DATA/ade_digits`` by default), generating it on first use."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, ade_digits)
