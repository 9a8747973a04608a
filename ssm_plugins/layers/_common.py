"""What the layer modules share (torch only): argument checks, stochastic depth, the mixers' norm factory and the
wording of input-shape errors.

The checks raise ``ValueError`` naming the argument and what was expected, e.g.
``ValueError: dim must be a positive int, got 0``.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..ops._validate import traced_int

__all__ = ["eigh_fixed_phase", "is_positive_int", "positive_int", "probability", "choice", "shape_or_type",
           "drop_path", "DropPath", "MIXER_NORMS", "make_mixer_norm", "check_tokens"]


# ---- initialisation -------------------------------------------------------------------------------------------


def eigh_fixed_phase(matrix: torch.Tensor):
    """``torch.linalg.eigh`` with each eigenvector's phase fixed: its first entry of magnitude > 1e-8 made real and
    positive. eigh leaves the phases free and LAPACK's choice can differ between CPUs, which made the HiPPO
    initialisations (B, C projected on these vectors) depend on the machine."""
    values, vectors = torch.linalg.eigh(matrix)
    first = (vectors.abs() > 1e-8).to(torch.int64).argmax(0)  # per column, the first entry that is not ~0
    pivot = vectors.gather(0, first[None]).squeeze(0)
    phase = pivot.abs() / pivot if vectors.is_complex() else pivot.sign()  # pivot * phase = |pivot|
    return values, vectors * phase[None]


# ---- argument checks -------------------------------------------------------------------------------------------


def is_positive_int(value, minimum: int = 1) -> bool:
    """True for an int (not a bool) of at least ``minimum``. Under ``torch.jit.trace`` (mmengine's and fvcore's
    FLOP counters trace) a size read off a tensor is a 0-dim integer tensor, which counts as its int."""
    value = traced_int(value)
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


def positive_int(name: str, value) -> int:
    """``value`` when it is a positive int (bools are not), else ``ValueError: <name> must be a positive int``."""
    if not is_positive_int(value):
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def probability(name: str, value) -> float:
    """``float(value)`` for a number in [0, 1) (bools are not), else ``ValueError: <name> must be a float in [0, 1)``
    (dropout and drop-path rates)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {value!r}")
    return float(value)


def choice(name: str, value, allowed):
    """``value`` when it is one of ``allowed``, else ``ValueError: <name> must be one of <allowed>``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def shape_or_type(x) -> object:
    """What an input-shape error reports as "got": the shape of a tensor, the type name of anything else."""
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


# ---- stochastic depth ------------------------------------------------------------------------------------------


def drop_path(x: torch.Tensor, prob: float, training: bool) -> torch.Tensor:
    """Stochastic depth per sample: in training, each sample (batch dim 0) is zeroed with probability ``prob`` and
    the kept ones scaled by 1 / (1 - prob), so the expectation is ``x``; ``x`` itself in eval or at prob 0."""
    if prob == 0.0 or not training:
        return x
    keep = 1.0 - prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
    return x * mask / keep


class DropPath(nn.Module):
    """:func:`drop_path` as a module (batch dim 0, scaled by 1/keep; identity in eval or at prob 0)."""

    def __init__(self, prob: float = 0.):
        super().__init__()
        self.prob = probability("drop_path", prob)

    def extra_repr(self) -> str:
        return f"prob={self.prob}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.prob, self.training)


# ---- norms -----------------------------------------------------------------------------------------------------

MIXER_NORMS = ("layernorm", "rmsnorm")


def make_mixer_norm(norm: str, dim: int) -> nn.Module:
    """The MambaMixer-family norm over the last dimension: "layernorm" or "rmsnorm", both with eps 1e-6."""
    choice("norm", norm, MIXER_NORMS)
    return nn.LayerNorm(dim, eps=1e-6) if norm == "layernorm" else nn.RMSNorm(dim, eps=1e-6)


def check_tokens(name: str, x, dim: int, num_tokens=None, why: str = "") -> None:
    """x must be a (batch, L, dim) tensor with L >= 1 (and L == num_tokens when given; ``why`` says where that
    count comes from); otherwise a ValueError naming ``name``."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != dim or x.shape[1] < 1:
        shape = shape_or_type(x)
        raise ValueError(f"{name} must have shape (batch, L, dim={dim}) with L >= 1, got {shape}")
    if num_tokens is not None and x.shape[1] != num_tokens:
        raise ValueError(f"{name} must have L = {num_tokens} tokens{why}, got shape {tuple(x.shape)}")
