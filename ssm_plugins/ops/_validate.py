"""Argument checks shared by the ops: a ValueError that names the argument and what was expected."""
from __future__ import annotations

from typing import Sequence

import torch

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def traced_int(value):
    """``value`` as a Python int where ``torch.jit.trace`` (mmengine's FLOP counter, the TorchScript ONNX exporter)
    made a size read off a tensor a 0-dim integer tensor; anything else unchanged, for the checks to judge."""
    if isinstance(value, torch.Tensor) and torch.jit.is_tracing() and value.dim() == 0 \
            and not value.is_floating_point() and value.dtype != torch.bool:
        return int(value)
    return value


def tensor(name: str, value, ndim: int | Sequence[int], what: str) -> torch.Tensor:
    """Check that ``value`` is a floating tensor with ``ndim`` dims; ``what`` describes the shape."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {what}, got {type(value).__name__}")
    dims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if value.dim() not in dims:
        raise ValueError(f"{name} must have shape {what}, got {tuple(value.shape)}")
    if value.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be float32, float64, float16 or bfloat16, got {value.dtype}")
    return value


def size(name: str, value: torch.Tensor, dim: int, expected: int, what: str) -> None:
    if value.shape[dim] != expected:
        raise ValueError(f"{name} must have shape {what} (size {expected} at dim {dim}), got {tuple(value.shape)}")


def same_device(**tensors: torch.Tensor | None) -> None:
    devices = {n: t.device for n, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        raise ValueError(f"all tensors must be on one device, got {devices}")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: float64 for float64 input, float32 for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32
