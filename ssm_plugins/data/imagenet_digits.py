"""ImageNet-format classification data from scikit-learn's digits (deterministic, never downloaded).

Layout, as MMPretrain's ``ImageNet`` dataset (and timm's / torchvision's ImageFolder for ``train/``) reads it::

    train/<class>/<class>_<n>.JPEG       one folder per class (the ILSVRC2012 training layout)
    val/ILSVRC2012_val_<n>.JPEG          flat, as the official validation tarball unpacks
    meta/train.txt                       "<class>/<file> <label>" per line (MMPretrain's meta files)
    meta/val.txt                         "<file> <label>" per line
    meta/classes.txt                     one class name per line, in label order

Each image is one digit scene of ``coco_digits``' kind: a noisy canvas with a single upscaled digit, so a backbone
pre-trained here has learnt the features that the detection/segmentation sets need (classes 'zero'..'nine').

    python -m ssm_plugins.data.imagenet_digits [--out DIR]
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ._scenes import DIGIT_NAMES, cli, generated, scenes

NAME = "imagenet_digits"
CLASSES = DIGIT_NAMES
IMAGE_SIZE = 64
SPLITS = {"train": (1000, 10), "val": (200, 11)}  # split -> (images, seed); seeds differ from the dense sets'


def _write(root: Path) -> None:
    from PIL import Image

    (root / "meta").mkdir(parents=True)
    (root / "meta" / "classes.txt").write_text("".join(f"{name}\n" for name in CLASSES))
    for split, (n_images, seed) in SPLITS.items():
        lines = []
        # one digit per canvas, 70-95 % of its side (an object-centred crop, as ImageNet's images mostly are)
        for index, scene in enumerate(scenes(n_images, seed, size_range=(IMAGE_SIZE, IMAGE_SIZE),
                                             digit_range=(IMAGE_SIZE * 7 // 10, IMAGE_SIZE * 19 // 20), max_digits=1)):
            if len(scene.labels) != 1:  # the digit could not be placed (too little ink): no image
                continue
            (label,) = scene.labels
            if split == "train":
                name = f"{CLASSES[label]}/{CLASSES[label]}_{index:05d}.JPEG"
            else:
                name = f"ILSVRC2012_val_{index + 1:08d}.JPEG"
            path = root / split / name
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(scene.image).save(path, format="JPEG", quality=95)
            lines.append(f"{name} {label}\n")
        (root / "meta" / f"{split}.txt").write_text("".join(lines))


def imagenet_digits(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Path of the generated data set (``$SSM_PLUGINS_DATA/imagenet_digits`` by default), generating it on first use."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, imagenet_digits)
