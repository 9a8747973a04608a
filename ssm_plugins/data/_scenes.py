"""Scenes of scikit-learn's digits pasted on noisy canvases, and the cache folder they are written to.

Shared by the COCO-format (``coco_digits``) and ADE20K-format (``ade_digits``) generators: one scene gives an
RGB image and, per pasted digit, its class and its own ink mask (digits never overlap, so masks are exact).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import numpy as np

FORMAT_VERSION = 1  # bump when the generated content changes: complete folders of another version are rewritten
DATA_ENV = "SSM_PLUGINS_DATA"  # overrides the cache folder ~/.cache/ssm_plugins/data
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# Words, not '0'..'9': mmengine's --cfg-options parser turns '0' into the int 0, and class names must match.


def data_home() -> Path:
    """Folder the embedded data sets are generated into (``$SSM_PLUGINS_DATA`` or ~/.cache/ssm_plugins/data)."""
    return Path(os.environ.get(DATA_ENV) or Path.home() / ".cache" / "ssm_plugins" / "data")


@dataclass(frozen=True)
class Scene:
    image: np.ndarray  # (H, W, 3) uint8, RGB
    labels: Tuple[int, ...]  # digit class of each pasted instance
    masks: Tuple[np.ndarray, ...]  # (H, W) bool ink mask of each instance


def digit_bank():
    from sklearn.datasets import load_digits  # ships the 1,797 8x8 digits; imported only when generating

    digits = load_digits()
    return digits.images.astype(np.float32) / 16.0, digits.target.astype(np.int64)


def upscale(glyph: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of an 8x8 glyph to size x size (numpy only, so generation needs no image library)."""
    src = (np.arange(size) + 0.5) * glyph.shape[0] / size - 0.5
    src = np.clip(src, 0, glyph.shape[0] - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, glyph.shape[0] - 1)
    frac = src - lo
    rows = glyph[lo] * (1 - frac)[:, None] + glyph[hi] * frac[:, None]
    return rows[:, lo] * (1 - frac)[None, :] + rows[:, hi] * frac[None, :]


def _overlaps(box, boxes, margin: int = 2) -> bool:
    y, x, s = box
    return any(y < by + bs + margin and by < y + s + margin and x < bx + bs + margin and bx < x + s + margin
               for by, bx, bs in boxes)


def make_scene(rng: np.random.Generator, glyphs: np.ndarray, targets: np.ndarray,
               size_range=(128, 256), digit_range=(28, 80), max_digits: int = 4) -> Scene:
    """One canvas (random height/width in ``size_range``) with 1..max_digits non-overlapping digits."""
    height, width = (int(v) for v in rng.integers(size_range[0], size_range[1] + 1, size=2))
    base = rng.uniform(20, 90, size=3)
    image = np.clip(base + rng.normal(0, 12, size=(height, width, 3)), 0, 255)
    boxes, labels, masks = [], [], []
    for _ in range(int(rng.integers(1, max_digits + 1))):
        for _attempt in range(20):  # a few tries to find a free spot, else fewer digits
            side = int(rng.integers(digit_range[0], min(digit_range[1], height, width) + 1))
            box = (int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1)), side)
            if not _overlaps(box, boxes):
                break
        else:
            continue
        idx = int(rng.integers(len(targets)))
        ink = upscale(glyphs[idx], side)
        mask = ink > 0.35
        if mask.sum() < 16:
            continue
        y, x, _ = box
        color = rng.uniform(160, 255, size=3)
        patch = image[y:y + side, x:x + side]
        patch[:] = patch * (1 - ink[..., None]) + color * ink[..., None]
        full = np.zeros((height, width), dtype=bool)
        full[y:y + side, x:x + side] = mask
        boxes.append(box)
        labels.append(int(targets[idx]))
        masks.append(full)
    return Scene(image.round().astype(np.uint8), tuple(labels), tuple(masks))


def scenes(n: int, seed: int, **kwargs) -> List[Scene]:
    glyphs, targets = digit_bank()
    rng = np.random.default_rng(seed)
    return [make_scene(rng, glyphs, targets, **kwargs) for _ in range(n)]


def generated(name: str, write: Callable[[Path], None], root: Optional[os.PathLike] = None,
              overwrite: bool = False) -> Path:
    """Return ``root`` (default ``data_home()/name``), writing the data set there first if it is missing.

    Written into a temporary sibling folder and renamed, so concurrent first uses never see half a data set.
    """
    root = Path(root) if root is not None else data_home() / name
    done, stamp = root / ".complete", f"{name} v{FORMAT_VERSION}\n"

    def complete() -> bool:
        return done.exists() and done.read_text() == stamp

    if complete() and not overwrite:
        return root
    if root.exists() and not done.exists() and any(root.iterdir()):  # never delete a folder we did not write
        raise ValueError(f"root {str(root)!r} exists, is not empty and holds no generated {name} data; "
                         f"give a new or empty folder")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        write(tmp)
        (tmp / ".complete").write_text(stamp)
        if root.exists():
            if complete() and not overwrite:  # another process finished first
                return root
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def cli(name: str, build: Callable[..., Path], argv=None) -> Path:
    parser = argparse.ArgumentParser(prog=f"python -m ssm_plugins.data.{name}",
                                     description=f"Generate the {name} data set (deterministic, offline).")
    parser.add_argument("--out", default=None, help=f"output folder (default: {data_home() / name})")
    parser.add_argument("--overwrite", action="store_true", help="regenerate even if the folder is complete")
    args = parser.parse_args(argv)
    root = build(args.out, overwrite=args.overwrite)
    print(root)
    return root
