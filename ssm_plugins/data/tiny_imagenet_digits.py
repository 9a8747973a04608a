"""Tiny-ImageNet-200-format data from scikit-learn's digits (deterministic, never downloaded).

The layout of the official ``tiny-imagenet-200.zip`` once unpacked, under ``root``::

    wnids.txt                               the 200 class ids, one per line (not sorted)
    words.txt                               "<wnid>\\t<words>" per line
    train/<wnid>/images/<wnid>_<k>.JPEG     64x64 RGB JPEG
    train/<wnid>/<wnid>_boxes.txt           "<file>\\t<x0>\\t<y0>\\t<x1>\\t<y1>" per image
    val/images/val_<k>.JPEG                 flat
    val/val_annotations.txt                 "<file>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1>" per image
    test/images/test_<k>.JPEG               no labels (as the official test set)

200 classes = 10 digits x 10 ink hues x 2 backgrounds (dark, light); the wnids are made-up ids of the official
form ("n" + 8 digits, from n99000000 on). Each image is one upscaled digit; its bounding box is the box of the
pasted glyph. ``ssm_plugins.mmpretrain.TinyImageNet`` reads this layout (the official data too).

    python -m ssm_plugins.data.tiny_imagenet_digits [--out DIR]
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from ._scenes import DIGIT_NAMES, cli, digit_bank, generated
from .cifar_digits import HUES, hue_rgb, paste_digit

NAME = "tiny_imagenet_digits"
IMAGE_SIZE = 64
BACKGROUNDS = ("dark", "light")
WNIDS = tuple(f"n{99000000 + i:08d}" for i in range(len(DIGIT_NAMES) * len(HUES) * len(BACKGROUNDS)))
WORDS = tuple(f"{digit}, {hue} {background}" for digit in DIGIT_NAMES for hue in HUES for background in BACKGROUNDS)
SPLITS = {"train": (10, 30), "val": (3, 31), "test": (1, 32)}  # split -> (images per class, seed)


def _image(rng: np.random.Generator, glyph: np.ndarray, label: int) -> Tuple[np.ndarray, Tuple[int, int, int, int]]:
    """(64x64x3 uint8 image, box x0 y0 x1 y1 inclusive) of class ``label``."""
    rest, background = divmod(label, len(BACKGROUNDS))
    hue = rest % len(HUES)
    level = (10, 70) if BACKGROUNDS[background] == "dark" else (170, 235)
    image = np.clip(rng.uniform(*level, size=3) + rng.normal(0, 10, size=(IMAGE_SIZE, IMAGE_SIZE, 3)), 0, 255)
    side = int(rng.integers(28, 61))
    y, x = (int(v) for v in rng.integers(0, IMAGE_SIZE - side + 1, size=2))
    paste_digit(image, glyph, y, x, side, hue_rgb(hue, len(HUES), rng, value=0.95 if background == 0 else 0.55))
    return image.round().astype(np.uint8), (x, y, x + side - 1, y + side - 1)


def _write(root: Path) -> None:
    from PIL import Image

    glyphs, targets = digit_bank()
    by_digit = [np.flatnonzero(targets == digit) for digit in range(len(DIGIT_NAMES))]
    root.mkdir(parents=True, exist_ok=True)
    order = np.random.default_rng(33).permutation(len(WNIDS))  # the official wnids.txt is in no particular order
    (root / "wnids.txt").write_text("".join(f"{WNIDS[i]}\n" for i in order))
    (root / "words.txt").write_text("".join(f"{wnid}\t{words}\n" for wnid, words in zip(WNIDS, WORDS)))

    def save(path: Path, image: np.ndarray) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(path, format="JPEG", quality=95)

    for split, (per_class, seed) in SPLITS.items():
        rng = np.random.default_rng(seed)
        labels = np.repeat(np.arange(len(WNIDS)), per_class)
        if split != "train":
            labels = rng.permutation(labels)  # the official val/test images are not grouped by class
        boxes = {wnid: [] for wnid in WNIDS}
        val_lines = []
        for k, label in enumerate(labels):
            wnid = WNIDS[label]
            digit = int(label) // (len(HUES) * len(BACKGROUNDS))
            image, box = _image(rng, glyphs[rng.choice(by_digit[digit])], int(label))
            box_text = "\t".join(str(v) for v in box)
            if split == "train":
                name = f"{wnid}_{len(boxes[wnid])}.JPEG"
                save(root / "train" / wnid / "images" / name, image)
                boxes[wnid].append(f"{name}\t{box_text}\n")
            elif split == "val":
                name = f"val_{k}.JPEG"
                save(root / "val" / "images" / name, image)
                val_lines.append(f"{name}\t{wnid}\t{box_text}\n")
            else:
                save(root / "test" / "images" / f"test_{k}.JPEG", image)
        if split == "train":
            for wnid, lines in boxes.items():
                (root / "train" / wnid / f"{wnid}_boxes.txt").write_text("".join(lines))
        elif split == "val":
            (root / "val" / "val_annotations.txt").write_text("".join(val_lines))


def tiny_imagenet_digits(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Path of the generated data set (``$SSM_PLUGINS_DATA/tiny_imagenet_digits`` by default), generating it on
    first use. Point a Tiny-ImageNet config at it with ``data_root=<this path>``."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, tiny_imagenet_digits)
