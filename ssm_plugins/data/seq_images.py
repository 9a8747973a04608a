"""Pixel-sequence image classification data (sMNIST, psMNIST, sCIFAR, zMNIST, zCIFAR, LRA-Image).

Readers of the official files a user downloads, and a generator of tiny files in exactly those formats:

* **MNIST** (http://yann.lecun.com/exdb/mnist/): ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each as downloaded (``.gz``) or unpacked, directly in
  ``root`` or in ``root/MNIST/raw`` (torchvision's layout). IDX format: big-endian magic ``0x0000080D`` (``D`` = the
  number of dimensions, type byte ``0x08`` = uint8), the ``D`` sizes as big-endian int32, then the data.
  Read here with numpy: torchvision's ``read_sn3_pascalvincent_tensor`` opens unpacked files only and its
  ``MNIST`` class insists on its own folder layout.
* **CIFAR-10** (python version, ``cifar-10-python.tar.gz`` unpacked): ``cifar-10-batches-py/data_batch_{1..5}``,
  ``test_batch``, ``batches.meta`` -- protocol-2 pickles with ``b'data'`` (N, 3072) uint8 (R, G, B planes,
  row-major) and ``b'labels'``. Read with ``pickle`` (torchvision's ``CIFAR10`` checks the official md5 sums, so it
  rejects every other file with that layout, generated test files included).

Pixel orders (``pixel_order``): ``row`` (raster, sMNIST / sCIFAR of S4 and eSSM), ``snake`` (boustrophedon: every
odd row reversed, the Myo paper's sMNIST / sCIFAR, S4/S5's ``snake_permutation``), ``morton`` (Z order: bits of
row and column interleaved, column as the least significant bit; zMNIST / zCIFAR), ``permuted`` (one fixed random
permutation from a seed, psMNIST). ``SequentialImages`` turns (N, H, W, C) uint8 images into (H*W, C) float
sequences in that order.

    python -m ssm_plugins.data.seq_images [--out DIR]     # tiny MNIST (idx, gz) + CIFAR-10 (pickles) files
"""
from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from ._scenes import cli, digit_bank, generated, upscale

__all__ = ["MNIST_FILES", "CIFAR10_FOLDER", "ORDERS", "read_idx", "write_idx", "load_mnist", "load_cifar10",
           "pixel_order", "train_valid_split", "SequentialImages", "seq_images", "write_cifar10"]

MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ORDERS = ("row", "snake", "morton", "permuted")
GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)  # tf.image.rgb_to_grayscale, which LRA-Image uses
NAME = "seq_images"


# ---- MNIST idx files ------------------------------------------------------------------------------------------


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_idx(path: os.PathLike) -> np.ndarray:
    """An IDX file (``.gz`` or not) as a uint8 numpy array of its stored shape."""
    path = Path(path)
    with _open(path) as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not a uint8 IDX file (magic bytes {raw[:4]!r}, expected 00 00 08 0D)")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}i", raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says shape {dims} ({int(np.prod(dims))} values), file has {data.size}")
    return data.reshape(dims).copy()  # writable (torch.from_numpy of a read-only buffer warns)


def write_idx(path: os.PathLike, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzip-compressed when ``path`` ends in ``.gz``)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    payload = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape) + array.tobytes()
    path = Path(path)
    with (gzip.open(path, "wb") if path.suffix == ".gz" else open(path, "wb")) as f:
        f.write(payload)


def _find(root: Path, stem: str) -> Path:
    for folder in (root, root / "MNIST" / "raw"):
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return folder / name
    raise FileNotFoundError(f"data_folder {str(root)!r} has no {stem} or {stem}.gz (nor in MNIST/raw/): "
                            f"download the MNIST files there")


def load_mnist(root: os.PathLike, split: str) -> Tuple[np.ndarray, np.ndarray]:
    """MNIST ``split`` ('train' or 'test'): images (N, 28, 28, 1) uint8 and labels (N,) int64."""
    if split not in MNIST_FILES:
        raise ValueError(f"split must be one of {tuple(MNIST_FILES)}, got {split!r}")
    images_file, labels_file = (_find(Path(root), stem) for stem in MNIST_FILES[split])
    images, labels = read_idx(images_file), read_idx(labels_file)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"{images_file} ({images.shape}) and {labels_file} ({labels.shape}) do not match")
    return images[..., None], labels.astype(np.int64)


# ---- CIFAR-10 pickles -----------------------------------------------------------------------------------------


def _cifar_folder(root: Path) -> Path:
    for folder in (root / CIFAR10_FOLDER, root):
        if (folder / "test_batch").is_file():
            return folder
    raise FileNotFoundError(f"data_folder {str(root)!r} has no {CIFAR10_FOLDER}/test_batch: unpack "
                            f"cifar-10-python.tar.gz there")


def load_cifar10(root: os.PathLike, split: str, grayscale: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 ``split`` ('train': data_batch_1..5, 'test': test_batch): images (N, 32, 32, 3) uint8 (or
    (N, 32, 32, 1) uint8 with ``grayscale``, LRA's ``rgb_to_grayscale`` rounded) and labels (N,) int64."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = _cifar_folder(Path(root))
    data, labels = [], []
    for name in (CIFAR10_TRAIN if split == "train" else ("test_batch",)):
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (CIFAR-10 python version)")
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        if b"data" not in batch or b"labels" not in batch:
            raise ValueError(f"{path} has no b'data' / b'labels' (is it CIFAR-100? keys: {sorted(batch)})")
        data.append(np.asarray(batch[b"data"], dtype=np.uint8))
        labels.extend(batch[b"labels"])
    images = np.concatenate(data).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    if grayscale:
        gray = images.astype(np.float32) @ np.asarray(GRAY_WEIGHTS, dtype=np.float32)
        images = np.clip(np.round(gray), 0, 255).astype(np.uint8)[..., None]
    return np.ascontiguousarray(images), np.asarray(labels, dtype=np.int64)


# ---- pixel orders and the dataset -----------------------------------------------------------------------------


def _morton_code(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    code = np.zeros_like(rows)
    for bit in range(16):
        code |= ((cols >> bit) & 1) << (2 * bit) | ((rows >> bit) & 1) << (2 * bit + 1)
    return code


def pixel_order(height: int, width: int, order: str = "row", seed: Optional[int] = None) -> torch.Tensor:
    """Index tensor ``p`` (height*width,) so that ``image.flatten()[p]`` (row-major flatten) is the sequence.

    ``row``: identity. ``snake``: odd rows right-to-left. ``morton``: Z order over the grid (for sizes that are not
    powers of 2, the Z order of the enclosing power-of-2 grid restricted to the real pixels). ``permuted``: a
    random permutation drawn from ``seed`` (required)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if height < 1 or width < 1:
        raise ValueError(f"height and width must be >= 1, got {height}x{width}")
    index = np.arange(height * width).reshape(height, width)
    if order == "snake":
        index[1::2] = index[1::2, ::-1]
        flat = index.reshape(-1)
    elif order == "morton":
        rows, cols = np.divmod(np.arange(height * width), width)
        flat = np.argsort(_morton_code(rows, cols), kind="stable")
    elif order == "permuted":
        if seed is None:
            raise ValueError("order='permuted' needs a seed (the permutation must be fixed and saved)")
        flat = np.random.default_rng(seed).permutation(height * width)
    else:
        flat = index.reshape(-1)
    return torch.as_tensor(np.ascontiguousarray(flat), dtype=torch.long)


def train_valid_split(n: int, valid_fraction: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Indices of a seeded random train/valid split of ``n`` training examples (S4's ``val_split``)."""
    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in [0, 1), got {valid_fraction}")
    perm = np.random.default_rng(seed).permutation(n)
    n_valid = int(round(n * valid_fraction))
    return np.sort(perm[n_valid:]), np.sort(perm[:n_valid])


class SequentialImages(torch.utils.data.Dataset):
    """(N, H, W, C) uint8 images -> items ``{'id', 'x': (L, C) float32, 'label': int}``, L = H*W in ``order``.

    Args:
        images, labels: arrays as returned by ``load_mnist`` / ``load_cifar10``.
        order: a name of ``ORDERS`` or an explicit index tensor from ``pixel_order`` (e.g. a saved permutation).
        mean, std: per-channel normalisation of the [0, 1] pixel values (one value per channel).
        pad_to: zero-pad each image symmetrically to ``pad_to`` x ``pad_to`` before ordering (zMNIST: 32).
        augment: RandomCrop(size, padding 4, symmetric) + RandomHorizontalFlip (LRA-Image / sCIFAR: eSSM paper,
            arXiv 2402.15290, App. E.2.4 and E.2.12; padding 4 from the S4 loaders, docs/essm.md 'Data preprocessing').
        seed: the seed of ``order='permuted'``.
        as_image: items hold the normalised (C, H, W) image instead (row order only; models that take images,
            e.g. Mega-ISO).
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, order="row", mean: Sequence[float] = (0.,),
                 std: Sequence[float] = (1.,), pad_to: Optional[int] = None, augment: bool = False,
                 seed: Optional[int] = None, prefix: str = "", as_image: bool = False):
        if images.ndim != 4 or len(images) != len(labels):
            raise ValueError(f"images must be (N, H, W, C) with one label each, got {images.shape}, {labels.shape}")
        channels = images.shape[-1]
        if len(mean) != channels or len(std) != channels:
            raise ValueError(f"mean and std need {channels} values (one per channel), got {mean}, {std}")
        self.images = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2)  # (N, C, H, W) uint8
        self.labels = [int(v) for v in labels]
        self.pad = 0
        height, width = images.shape[1:3]
        if pad_to is not None:
            if pad_to < max(height, width) or (pad_to - height) % 2 or (pad_to - width) % 2:
                raise ValueError(f"pad_to={pad_to} must exceed the image size {height}x{width} by an even number")
            self.pad = (pad_to - height) // 2
            height = width = pad_to
        self.order = order if isinstance(order, torch.Tensor) else pixel_order(height, width, order, seed)
        if self.order.numel() != height * width:
            raise ValueError(f"order has {self.order.numel()} indices for {height}x{width} = {height * width} pixels")
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None]
        self.augment = None
        if augment:
            from torchvision.transforms import v2  # the maintained implementation of these augmentations

            self.augment = v2.Compose([v2.RandomCrop(height, padding=4, padding_mode="symmetric"),
                                       v2.RandomHorizontalFlip()])
        self.prefix = prefix
        if as_image and (not isinstance(order, str) or order != "row"):
            raise ValueError(f"as_image needs order='row', got {order!r}")
        self.as_image = as_image
        self.shape = (channels, height, width)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Dict:
        image = self.images[index]
        if self.pad:
            image = torch.nn.functional.pad(image, (self.pad,) * 4)
        if self.augment is not None:
            image = self.augment(image)
        x = (image.flatten(1).float().div_(255.0) - self.mean) / self.std  # (C, H*W) row-major
        x = x.reshape(self.shape) if self.as_image else x[:, self.order].t().contiguous()
        return {"id": f"{self.prefix}{index}", "x": x, "label": self.labels[index]}


# ---- tiny generated files in the official formats -------------------------------------------------------------

SIZES = {"train": (30, 31), "test": (10, 32)}  # split -> (images per class, seed)


def digit_images(per_class: int, seed: int, side: int, colour: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Upscaled scikit-learn digits on a noisy dark background: (N, side, side, 3 or 1) uint8, shuffled labels."""
    glyphs, targets = digit_bank()
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(10), per_class))
    images = np.empty((len(labels), side, side, 3 if colour else 1), dtype=np.uint8)
    for i, label in enumerate(labels):
        glyph = glyphs[rng.choice(np.flatnonzero(targets == label))]
        size = int(rng.integers(side * 5 // 8, side - 1))
        y, x = (int(v) for v in rng.integers(0, side - size + 1, size=2))
        ink = np.zeros((side, side), dtype=np.float32)
        ink[y:y + size, x:x + size] = upscale(glyph, size)
        rgb = rng.uniform(150, 255, size=3 if colour else 1)
        back = rng.uniform(0, 60, size=3 if colour else 1) + rng.normal(0, 8, size=(side, side, 3 if colour else 1))
        images[i] = np.clip(back * (1 - ink[..., None]) + rgb * ink[..., None], 0, 255).round().astype(np.uint8)
    return images, labels


def write_cifar10(folder: Path, splits: Dict[str, Tuple[np.ndarray, np.ndarray]]) -> None:
    """Write ``{'train': (images, labels), 'test': ...}`` (images (N, 32, 32, 3) uint8) as CIFAR-10 python pickles
    (the training set spread over data_batch_1..5, as the official files)."""
    from .cifar_digits import dump_py2

    folder.mkdir(parents=True, exist_ok=True)
    for split, (images, labels) in splits.items():
        data = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
        names = CIFAR10_TRAIN if split == "train" else ("test_batch",)
        chunks = np.array_split(np.arange(len(images)), len(names))
        for k, (name, idx) in enumerate(zip(names, chunks)):
            label = f"training batch {k + 1} of 5" if split == "train" else "testing batch 1 of 1"
            dump_py2({b"batch_label": label.encode(), b"labels": [int(labels[i]) for i in idx],
                      b"data": np.ascontiguousarray(data[idx]),
                      b"filenames": [f"{CIFAR10_CLASSES[labels[i]]}_s_{i:06d}.png".encode() for i in idx]},
                     folder / name)
    dump_py2({b"label_names": [c.encode() for c in CIFAR10_CLASSES], b"num_cases_per_batch": 10000,
              b"num_vis": 3072}, folder / "batches.meta")


def _write(root: Path) -> None:
    mnist = root / "mnist"
    mnist.mkdir(parents=True)
    cifar = {}
    for split, (per_class, seed) in SIZES.items():
        images, labels = digit_images(per_class, seed, 28, colour=False)
        images_file, labels_file = MNIST_FILES[split]
        write_idx(mnist / f"{images_file}.gz", images[..., 0])  # as downloaded
        write_idx(mnist / f"{labels_file}.gz", labels)
        cifar[split] = digit_images(per_class, seed + 100, 32, colour=True)
    write_cifar10(root / "cifar10" / CIFAR10_FOLDER, cifar)


def seq_images(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Tiny MNIST (``<root>/mnist``: the four idx files, gzipped) and CIFAR-10 (``<root>/cifar10``:
    ``cifar-10-batches-py``) data sets of upscaled digits (10 classes; 300 train / 100 test images each),
    generated on first use into ``$SSM_PLUGINS_DATA/seq_images``."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, seq_images)
