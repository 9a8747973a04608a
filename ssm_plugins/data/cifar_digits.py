"""CIFAR-100-format data from scikit-learn's digits (deterministic, never downloaded).

The layout and pickles of the official ``cifar-100-python.tar.gz`` once unpacked, under ``root``::

    cifar-100-python/train    dict: b'filenames', b'batch_label', b'fine_labels', b'coarse_labels', b'data'
    cifar-100-python/test     the same keys
    cifar-100-python/meta     dict: b'fine_label_names', b'coarse_label_names'

``b'data'`` is a uint8 array (N, 3072): the 1024 red, then green, then blue values of a 32x32 image, row-major.
The files are protocol-2 pickles whose strings are Python 2 ``str`` (opcode BINSTRING), as the official ones
(written by Python 2): ``pickle.load(f, encoding='bytes')`` gives the ``b'data'`` keys of the CIFAR web page's
recipe, ``encoding='latin1'`` (what MMPretrain and torchvision use) gives ``'data'``.

100 fine classes = 10 digits x 10 ink hues (``fine = 10 * digit + hue``); the 20 coarse classes group each digit's
hues in two halves of five (``coarse = fine // 5``), like CIFAR-100's 20 superclasses of 5 classes. Each image is
one upscaled digit in a hue of the palette on a dark noisy background.

MMPretrain's own ``CIFAR100`` dataset checks the md5 sums of the official files (and downloads them if they
differ); ``ssm_plugins.mmpretrain.LocalCIFAR100`` reads this layout (the official files too) without that check.

    python -m ssm_plugins.data.cifar_digits [--out DIR]
"""
from __future__ import annotations

import colorsys
import io
import os
import pickle
import struct
from pathlib import Path
from typing import Optional

import numpy as np

from ._scenes import DIGIT_NAMES, cli, digit_bank, generated, upscale

NAME = "cifar_digits"
BASE_FOLDER = "cifar-100-python"  # the official archive's folder (MMPretrain's CIFAR100.base_folder)
IMAGE_SIZE = 32
HUES = ("red", "orange", "yellow", "lime", "green", "cyan", "azure", "blue", "violet", "magenta")  # 36 deg apart
FINE_LABEL_NAMES = tuple(f"{digit}_{hue}" for digit in DIGIT_NAMES for hue in HUES)
COARSE_LABEL_NAMES = tuple(f"{digit}_{half}" for digit in DIGIT_NAMES for half in ("red_to_green", "cyan_to_magenta"))
SPLITS = {"train": (20, 20, "training batch 1 of 1"), "test": (5, 21, "testing batch 1 of 1")}
# split -> (images per fine class, seed, b'batch_label'); seeds differ from the other generated sets'


class _Py2Pickler(pickle._Pickler):  # the pure-Python pickler: its dispatch table can be extended
    """Writes ``bytes`` as Python 2 ``str`` (SHORT_BINSTRING / BINSTRING), the string type of the official files.

    Python 3 writes bytes at protocol 2 as a call to ``codecs.encode``; Python 2 readers and ``encoding='bytes'``
    would then see text, not the official byte strings."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def dump_py2(obj, path: Path) -> None:
    """Pickle ``obj`` (protocol 2, byte strings as Python 2 ``str``) to ``path``."""
    buffer = io.BytesIO()
    _Py2Pickler(buffer, protocol=2).dump(obj)
    path.write_bytes(buffer.getvalue())


def hue_rgb(hue_index: int, n_hues: int, rng: np.random.Generator, value: float = 0.95) -> np.ndarray:
    """An ink colour (RGB, 0-255) of the ``hue_index``-th of ``n_hues`` evenly spaced hues, slightly jittered."""
    hue = (hue_index + rng.uniform(-0.2, 0.2)) / n_hues % 1.0
    return np.array(colorsys.hsv_to_rgb(hue, rng.uniform(0.75, 1.0), value)) * 255


def paste_digit(image: np.ndarray, glyph: np.ndarray, y: int, x: int, side: int, rgb: np.ndarray) -> None:
    """Alpha-blend an 8x8 digit glyph, upscaled to ``side``, in colour ``rgb`` at (y, x) of a float image."""
    ink = upscale(glyph, side)[..., None]
    patch = image[y:y + side, x:x + side]
    patch[:] = patch * (1 - ink) + rgb * ink


def _image(rng: np.random.Generator, glyph: np.ndarray, hue: int) -> np.ndarray:
    image = np.clip(rng.uniform(10, 70, size=3) + rng.normal(0, 10, size=(IMAGE_SIZE, IMAGE_SIZE, 3)), 0, 255)
    side = int(rng.integers(18, 29))
    y, x = (int(v) for v in rng.integers(0, IMAGE_SIZE - side + 1, size=2))
    paste_digit(image, glyph, y, x, side, hue_rgb(hue, len(HUES), rng))
    return image.round().astype(np.uint8)


def _write(root: Path) -> None:
    glyphs, targets = digit_bank()
    by_digit = [np.flatnonzero(targets == digit) for digit in range(len(DIGIT_NAMES))]
    folder = root / BASE_FOLDER
    folder.mkdir(parents=True)
    for split, (per_class, seed, batch_label) in SPLITS.items():
        rng = np.random.default_rng(seed)
        fine = rng.permutation(np.repeat(np.arange(len(FINE_LABEL_NAMES)), per_class))  # shuffled, as the official
        data = np.empty((len(fine), 3 * IMAGE_SIZE * IMAGE_SIZE), dtype=np.uint8)
        for i, label in enumerate(fine):
            digit, hue = divmod(int(label), len(HUES))
            glyph = glyphs[rng.choice(by_digit[digit])]
            data[i] = _image(rng, glyph, hue).transpose(2, 0, 1).reshape(-1)  # channel planes: R, G, B
        dump_py2({
            b"filenames": [f"{FINE_LABEL_NAMES[label]}_s_{i:06d}.png".encode() for i, label in enumerate(fine)],
            b"batch_label": batch_label.encode(),
            b"fine_labels": [int(label) for label in fine],
            b"coarse_labels": [int(label) // 5 for label in fine],
            b"data": data,
        }, folder / split)
    dump_py2({b"fine_label_names": [name.encode() for name in FINE_LABEL_NAMES],
              b"coarse_label_names": [name.encode() for name in COARSE_LABEL_NAMES]}, folder / "meta")


def cifar_digits(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Path of the generated data set (``$SSM_PLUGINS_DATA/cifar_digits`` by default), generating it on first use.

    Point a CIFAR-100 config at it with ``data_root=<this path>`` (the pickles are in its ``cifar-100-python/``)."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, cifar_digits)
