"""Mega block of the 2-D SSM paper's Mega rows ("2-D SSM: A General Spatial Layer for Visual Transformers",
arXiv:2306.06635: Sec. 5, Table 1, App. F; docs/2d-ssm.md), on Mega (Ma et al., ICLR 2023).

* :class:`MovingAverageGatedAttention` -- Mega's gated single-head attention (laplace attention, relative
  position bias) whose spatial mixer (EMA, 2-D SSM, S4ND or none) filters the Q/K/gate path only; V comes from
  the unfiltered input (paper Sec. 5, "Mega": "we only perform our layer on Q, K").
* :class:`NormalizedFeedForward` and :class:`MegaBlock` (= MovingAverageGatedAttention + normalised FFN).

The spatial mixers and their options live in ``ssm_plugins.layers.spatial_mixers`` (:class:`SpatialMixerOptions`,
:func:`make_spatial_mixer`), the comparison layers in ``layers/ema.py`` (:class:`MultiHeadEMA`) and
``layers/s4nd.py`` (:class:`S4ND`); their names are importable from here too.

Markers (docs/2d-ssm.md): [D] a default that the paper or the official code settles, [X] an extension beyond
them.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import DropPath, choice, positive_int, probability, shape_or_type
from .ema import MultiHeadEMA
from .essm import BatchNormNLC
from .s4nd import S4ND
from .spatial_mixers import SPATIAL_MIXERS, SpatialMixerOptions, make_spatial_mixer

__all__ = ["MultiHeadEMA", "S4ND", "RelativePositionBias", "MovingAverageGatedAttention", "NormalizedFeedForward",
           "MegaBlock", "BatchNormNHWC", "make_spatial_mixer", "laplace_attention", "SPATIAL_MIXERS",
           "SpatialMixerOptions"]


def laplace_attention(scores: torch.Tensor, mu: float = math.sqrt(0.5), sigma: float = math.sqrt(0.25 / math.pi)):
    """Mega's laplace attention function f(x) = ½ (1 + erf((x - μ) / (σ √2))), with μ = √½ and σ = √(1/4π) so that
    it approximates relu² near x = μ (Ma et al. 2022, §3.3 of their appendix)."""
    return 0.5 * (1.0 + torch.erf((scores - mu) / (sigma * math.sqrt(2.0))))


# ---- Mega block ------------------------------------------------------------------------------------------------


class BatchNormNHWC(BatchNormNLC):
    """BatchNorm over the channels of a channels-last tensor (..., C): statistics over the batch and every
    token, as Mega's ``SequenceNorm('batchnorm')`` on (L, B, C) sequences (Mega's LRA models)."""


class RelativePositionBias(nn.Module):
    """Mega's 1-D relative position bias over the flattened tokens: bias[i, j] = b[j - i + M - 1], b of 2M - 1.

    Sequences longer than ``max_positions`` M [X]: the table is linearly resampled to 2L - 1 entries (the
    official layer raises), so a model trained at one resolution runs at larger ones.
    """

    def __init__(self, max_positions: int, device=None, dtype=None):
        super().__init__()
        self.max_positions = positive_int("max_positions", max_positions)
        self.rel_pos_bias = nn.Parameter(torch.empty(2 * max_positions - 1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.rel_pos_bias, mean=0.0, std=0.02)

    def extra_repr(self) -> str:
        return f"max_positions={self.max_positions}"

    def forward(self, length: int) -> torch.Tensor:
        table = self.rel_pos_bias
        if length <= self.max_positions:
            table = table[self.max_positions - length:self.max_positions + length - 1]
        else:
            table = F.interpolate(table[None, None], size=2 * length - 1, mode="linear", align_corners=True)[0, 0]
        index = torch.arange(length, device=table.device)
        return table[index[None, :] - index[:, None] + length - 1]  # (L, L)


def _spatial_mixer_options(spatial_mixer: Union[str, SpatialMixerOptions],
                           mixer_kwargs: Optional[Dict[str, Any]] = None) -> SpatialMixerOptions:
    """The blocks' two call forms as one options object: a kind with ``mixer_kwargs``
    (:meth:`SpatialMixerOptions.from_mixer_kwargs`), or a SpatialMixerOptions as it is."""
    if isinstance(spatial_mixer, SpatialMixerOptions):
        if mixer_kwargs:
            raise ValueError(f"mixer_kwargs must be empty when spatial_mixer is a SpatialMixerOptions (set its "
                             f"fields instead), got {sorted(mixer_kwargs)}")
        return spatial_mixer
    return SpatialMixerOptions.from_mixer_kwargs(spatial_mixer, mixer_kwargs)


class MovingAverageGatedAttention(nn.Module):
    """Mega's moving-average gated attention on a (B, H, W, dim) token grid, pre-norm (paper Sec. 5, "Mega";
    docs/2d-ssm.md, 'Placement in the backbones'):

        x' = Norm(x);  v = silu(W_v x' + b);  mx = dropout(mixer(x'))          # V from the UNFILTERED x'
        u, z, r, h_x = split(W_mx mx + b);  u = σ(u);  z, r = silu(z), silu(r);  q, k = z γ_{q,k} + β_{q,k}
        A = laplace(q kᵀ / L + rel_bias)  (or softmax(q kᵀ / sqrt(z_dim) + rel_bias))
        h = silu(h_x + W_h((A v) ⊙ r));  out = x + u ⊙ (drop_path(dropout(h)) - x)

    Args:
        dim: D. zdim: shared Q/K dimension. hdim: value / gate dimension.
        spatial_mixer: "ema" (Mega), "ssm2d", "s4nd" or "none" (Mega-ablate), with ``mixer_kwargs`` the layer's
            keyword arguments (:meth:`SpatialMixerOptions.from_mixer_kwargs`); or a SpatialMixerOptions (no
            mixer_kwargs).
        attn_activation: "laplace" [D: Mega's vision models] or "softmax".
        max_positions: tokens the relative position bias covers natively; None disables the bias.
        drop, attn_drop, hidden_drop: dropout on mx and h; on the attention weights; on v. drop_path: on h.
    """

    ATTN_ACTIVATIONS = ("laplace", "softmax")

    def __init__(
            self,
            dim: int,
            zdim: int,
            hdim: int,
            spatial_mixer: Union[str, SpatialMixerOptions] = "ema",
            mixer_kwargs: Optional[Dict[str, Any]] = None,
            attn_activation: str = "laplace",
            max_positions: Optional[int] = 1024,
            drop: float = 0.,
            attn_drop: float = 0.,
            hidden_drop: float = 0.,
            drop_path: float = 0.,
            norm_layer=nn.LayerNorm,
            device=None,
            dtype=None,
    ):
        super().__init__()
        for name, value in (("dim", dim), ("zdim", zdim), ("hdim", hdim)):
            positive_int(name, value)
        choice("attn_activation", attn_activation, self.ATTN_ACTIVATIONS)
        for name, value in (("drop", drop), ("attn_drop", attn_drop), ("hidden_drop", hidden_drop),
                            ("drop_path", drop_path)):
            probability(name, value)
        dd = {"device": device, "dtype": dtype}
        self.dim, self.zdim, self.hdim = dim, zdim, hdim
        mixer_options = _spatial_mixer_options(spatial_mixer, mixer_kwargs)
        self.spatial_mixer = mixer_options.kind
        self.attn_activation = attn_activation
        self.norm = norm_layer(dim, **dd)
        self.mixer = mixer_options.build(dim, **dd)
        self.v_proj = nn.Linear(dim, hdim, **dd)
        self.mx_proj = nn.Linear(dim, zdim + hdim + 2 * dim, **dd)
        self.h_proj = nn.Linear(hdim, dim, **dd)
        self.gamma = nn.Parameter(torch.empty(2, zdim, **dd))
        self.beta = nn.Parameter(torch.empty(2, zdim, **dd))
        self.rel_pos_bias = RelativePositionBias(max_positions, **dd) if max_positions else None
        self.drop = nn.Dropout(drop)
        self.attn_drop = nn.Dropout(attn_drop)
        self.hidden_drop = nn.Dropout(hidden_drop)
        self.drop_path = DropPath(drop_path)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Mega's initialisation: projections N(0, 0.02²) with zero bias, γ ~ N(0, 0.02²), β = 0."""
        for linear in (self.v_proj, self.mx_proj, self.h_proj):
            nn.init.normal_(linear.weight, mean=0.0, std=0.02)
            nn.init.zeros_(linear.bias)
        nn.init.normal_(self.gamma, mean=0.0, std=0.02)
        nn.init.zeros_(self.beta)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, zdim={self.zdim}, hdim={self.hdim}, spatial_mixer={self.spatial_mixer!r}, "
                f"attn_activation={self.attn_activation!r}")

    def attention(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Attention weights (B, L, L) from q, k (B, L, zdim)."""
        length = k.shape[1]
        if self.attn_activation == "laplace":
            scores = q @ k.transpose(1, 2) / length
        else:
            scores = (q * self.zdim ** -0.5) @ k.transpose(1, 2)
        if self.rel_pos_bias is not None:
            scores = scores + self.rel_pos_bias(length).to(scores.dtype)
        return laplace_attention(scores) if self.attn_activation == "laplace" else scores.softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[-1] != self.dim:
            got = shape_or_type(x)
            raise ValueError(f"x must have shape (B, H, W, dim) with dim={self.dim}, got {got}")
        batch, height, width, _ = x.shape
        residual = x
        x = self.norm(x)
        v = F.silu(self.v_proj(x)).reshape(batch, height * width, self.hdim)
        mx = self.drop(self.mixer(x))  # the spatial layer filters the Q/K/gate path only
        u, zr, hx = torch.split(self.mx_proj(mx), [self.dim, self.zdim + self.hdim, self.dim], dim=-1)
        u = torch.sigmoid(u)
        z, r = torch.split(F.silu(zr), [self.zdim, self.hdim], dim=-1)
        qk = z.unsqueeze(-2) * self.gamma + self.beta  # (B, H, W, 2, zdim)
        q, k = (t.reshape(batch, height * width, self.zdim) for t in qk.unbind(dim=-2))
        attn = self.attn_drop(self.attention(q, k))
        h = (attn @ self.hidden_drop(v)).reshape(batch, height, width, self.hdim)
        h = F.silu(hx + self.h_proj(h * r))
        h = self.drop_path(self.drop(h))
        return torch.addcmul(residual, u, h - residual)


class NormalizedFeedForward(nn.Module):
    """Mega's normalised FFN: x + drop_path(dropout(fc2(hidden_drop(silu(fc1(Norm(x)))))))."""

    def __init__(self, dim: int, hidden_dim: int, drop: float = 0., hidden_drop: float = 0., drop_path: float = 0.,
                 norm_layer=nn.LayerNorm, device=None, dtype=None):
        super().__init__()
        positive_int("dim", dim)
        positive_int("hidden_dim", hidden_dim)
        dd = {"device": device, "dtype": dtype}
        self.norm = norm_layer(dim, **dd)
        self.fc1 = nn.Linear(dim, hidden_dim, **dd)
        self.fc2 = nn.Linear(hidden_dim, dim, **dd)
        self.drop = nn.Dropout(probability("drop", drop))
        self.hidden_drop = nn.Dropout(probability("hidden_drop", hidden_drop))
        self.drop_path = DropPath(probability("drop_path", drop_path))
        for linear in (self.fc1, self.fc2):
            nn.init.normal_(linear.weight, mean=0.0, std=0.02)
            nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(self.hidden_drop(F.silu(self.fc1(self.norm(x)))))
        return x + self.drop_path(self.drop(y))


class MegaBlock(nn.Module):
    """One Mega layer: :class:`MovingAverageGatedAttention` then :class:`NormalizedFeedForward`, on (B, H, W, D)."""

    def __init__(
            self,
            dim: int,
            zdim: int,
            hdim: int,
            ffn_dim: int,
            spatial_mixer: Union[str, SpatialMixerOptions] = "ema",
            mixer_kwargs: Optional[Dict[str, Any]] = None,
            attn_activation: str = "laplace",
            max_positions: Optional[int] = 1024,
            drop: float = 0.,
            attn_drop: float = 0.,
            hidden_drop: float = 0.,
            drop_path: float = 0.,
            norm_layer=nn.LayerNorm,
            device=None,
            dtype=None,
    ):
        super().__init__()
        dd = {"device": device, "dtype": dtype}
        self.attn = MovingAverageGatedAttention(
            dim, zdim, hdim, spatial_mixer=spatial_mixer, mixer_kwargs=mixer_kwargs, attn_activation=attn_activation,
            max_positions=max_positions, drop=drop, attn_drop=attn_drop, hidden_drop=hidden_drop,
            drop_path=drop_path, norm_layer=norm_layer, **dd)
        self.ffn = NormalizedFeedForward(dim, ffn_dim, drop=drop, drop_path=drop_path, norm_layer=norm_layer, **dd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attn(x))
