"""COCO-format instance segmentation data from scikit-learn's digits (deterministic, never downloaded).

Layout, as MMDetection's ``CocoDataset`` configs expect under ``data_root``::

    train2017/*.jpg  val2017/*.jpg  annotations/instances_{train,val}2017.json

Each image is a noisy canvas (128-256 px a side) with 1-4 upscaled, non-overlapping digits. Categories are the
ten digits, named ``DIGIT_NAMES`` ('zero'..'nine', ids 1..10); every instance has its tight bbox, the
uncompressed RLE of its own ink mask (exact, holes included), area = ink pixels and iscrowd=0.

    python -m ssm_plugins.data.coco_digits [--out DIR]
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

from ._scenes import DIGIT_NAMES, cli, generated, scenes

NAME = "coco_digits"
SPLITS = {"train": (100, 0), "val": (30, 1)}  # split -> (images, seed)


def mask_to_rle(mask: np.ndarray) -> dict:
    """COCO uncompressed RLE: run lengths over the column-major pixels, starting with a run of zeros."""
    flat = np.asarray(mask, dtype=np.uint8).flatten(order="F")
    change = np.flatnonzero(np.diff(np.concatenate([[0], flat, [1 - flat[-1]]])))
    counts = np.diff(np.concatenate([[0], change])).tolist()
    return {"counts": [int(c) for c in counts], "size": [int(mask.shape[0]), int(mask.shape[1])]}


def _write(root: Path) -> None:
    from PIL import Image

    (root / "annotations").mkdir(parents=True)
    categories = [{"id": i + 1, "name": name, "supercategory": "digit"} for i, name in enumerate(DIGIT_NAMES)]
    for split, (n_images, seed) in SPLITS.items():
        folder = root / f"{split}2017"
        folder.mkdir()
        images, annotations = [], []
        for image_id, scene in enumerate(scenes(n_images, seed), start=1):
            file_name = f"{image_id:06d}.jpg"
            Image.fromarray(scene.image).save(folder / file_name, quality=95)
            height, width = scene.image.shape[:2]
            images.append({"id": image_id, "file_name": file_name, "height": height, "width": width})
            for label, mask in zip(scene.labels, scene.masks):
                ys, xs = np.nonzero(mask)
                x0, y0 = int(xs.min()), int(ys.min())
                annotations.append({
                    "id": len(annotations) + 1, "image_id": image_id, "category_id": label + 1,
                    "bbox": [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0],
                    "area": int(mask.sum()), "segmentation": mask_to_rle(mask), "iscrowd": 0})
        with open(root / "annotations" / f"instances_{split}2017.json", "w") as f:
            json.dump({"images": images, "annotations": annotations, "categories": categories}, f)


def coco_digits(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Path of the generated data set (``$SSM_PLUGINS_DATA/coco_digits`` by default), generating it on first use."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, coco_digits)
