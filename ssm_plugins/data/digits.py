"""scikit-learn's 8x8 handwritten digits (1,797 images shipped inside the package) as a fixed split."""
from __future__ import annotations

import torch


def digits_split(split: str, test_fraction: float = 0.2, seed: int = 0):
    """Return ``(images, labels)`` for ``split`` in {'train', 'test'}: images (n, 1, 8, 8) in [0, 1].

    The split is a fixed permutation (``seed``), so every run and every test sees the same data.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    from sklearn.datasets import load_digits  # scikit-learn ships the data; imported only when used

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(labels) * test_fraction))
    idx = order[:n_test] if split == "test" else order[n_test:]
    return images[idx], labels[idx]
