"""Mega's multi-head damped EMA (Ma et al., "Mega: Moving Average Equipped Gated Attention", ICLR 2023), the
spatial layer of Mega and of Table 1's "Swin w/ EMA" row in "2-D SSM: A General Spatial Layer for Visual
Transformers" (arXiv:2306.06635: Sec. 5, App. F; docs/2d-ssm.md).

On the row-major flattened token grid, per channel d and EMA dimension n, h_t = α ⊙ β x_t + (1 - α ⊙ δ) ⊙ h_{t-1},
y_t = Σ_n η_n h_t[n] / sqrt(N); bidirectional (a second EMA over the reversed sequence, shifted by one step so x_t
is counted once), then silu(y + ω ⊙ x). Computed as one FFT convolution with the closed-form kernel.
"""
from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ops
from ._common import choice, positive_int, shape_or_type

__all__ = ["MultiHeadEMA"]

_INPUT_FMTS = ("NLC", "NHWC")


class MultiHeadEMA(nn.Module):
    """Mega's multi-head damped EMA over a sequence (NLC) or a row-major flattened token grid (NHWC).

    Args:
        dim: channels D.
        d_state: EMA dimension N per channel [D: 16, code-v1 ``--ndim``].
        bidirectional: add an EMA over the reversed sequence (shifted by one step) [D: True, Mega's vision models].
        input_fmt: "NLC" (B, L, D) or "NHWC" (B, H, W, D); the output has the same layout.

    Parameters (K = 2D if bidirectional else D): ``alpha``, ``delta``, ``beta`` (K, N, 1), ``gamma`` (K, N), ``omega``
    (D,); α = σ(alpha), δ = σ(delta). ``no_weight_decay_names`` lists the EMA parameters (alpha, delta, beta, gamma);
    omega, the skip, is decayed like the 2-D SSM's D.
    """

    no_weight_decay_names = ("alpha", "delta", "beta", "gamma")

    def __init__(self, dim: int, d_state: int = 16, bidirectional: bool = True, input_fmt: str = "NHWC",
                 device=None, dtype=None):
        super().__init__()
        positive_int("dim", dim)
        positive_int("d_state", d_state)
        choice("input_fmt", input_fmt, _INPUT_FMTS)
        dd = {"device": device, "dtype": dtype}
        self.dim = dim
        self.d_state = d_state
        self.bidirectional = bool(bidirectional)
        self.input_fmt = input_fmt
        self.scale = math.sqrt(1.0 / d_state)
        kernel_dim = 2 * dim if self.bidirectional else dim
        self.alpha = nn.Parameter(torch.empty(kernel_dim, d_state, 1, **dd))
        self.delta = nn.Parameter(torch.empty(kernel_dim, d_state, 1, **dd))
        self.beta = nn.Parameter(torch.empty(kernel_dim, d_state, 1, **dd))
        self.gamma = nn.Parameter(torch.empty(kernel_dim, d_state, **dd))
        self.omega = nn.Parameter(torch.empty(dim, **dd))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Mega's initialisation: α, δ logits ~ N(0, 0.2²); β ~ N(±1, 0.02²) alternating in n; η, ω ~ N(0, 1)."""
        with torch.no_grad():
            self.alpha.normal_(0.0, 0.2)
            self.delta.normal_(0.0, 0.2)
            sign = torch.ones(self.d_state, 1, device=self.beta.device, dtype=self.beta.dtype)
            sign[1::2] = -1.0  # [1, -1, 1, ...]: Mega found it more stable
            self.beta.normal_(0.0, 0.02).add_(sign)
            self.gamma.normal_(0.0, 1.0)
            self.omega.normal_(0.0, 1.0)

    def extra_repr(self) -> str:
        return f"{self.dim}, d_state={self.d_state}, bidirectional={self.bidirectional}, input_fmt={self.input_fmt!r}"

    def coeffs(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """p = α β (input weight) and q = 1 - α δ (damped decay), each (K, N, 1)."""
        alpha = torch.sigmoid(self.alpha)
        return alpha * self.beta, 1.0 - alpha * torch.sigmoid(self.delta)

    def compute_kernel(self, length: int) -> torch.Tensor:
        """Per-direction causal kernels (K, length): k[l] = Σ_n p_n q_n^l η_n / sqrt(N), float32 (float64 params)."""
        positive_int("length", length)
        acc = torch.float64 if self.alpha.dtype == torch.float64 else torch.float32
        p, q = (t.to(acc) for t in self.coeffs())
        steps = torch.arange(length, device=q.device, dtype=acc)
        decay = torch.exp(steps * torch.log(q))  # (K, N, L); q in (0, 1)
        return torch.einsum("knl,kn->kl", p * decay, self.gamma.to(acc) * self.scale)

    def full_kernel(self, length: int) -> torch.Tensor:
        """The kernel as one (D, 1, 2L-1) non-causal filter centred at L-1 (causal (D, 1, L) if unidirectional):
        taps t >= 0 weigh x[i - t] (forward EMA), t < 0 weigh x[i + |t|] with the backward kernel at |t| - 1."""
        kernel = self.compute_kernel(length)
        if not self.bidirectional:
            return kernel[:, None]
        forward, backward = kernel[:self.dim], kernel[self.dim:]
        return torch.cat([backward[:, :length - 1].flip(-1), forward], dim=-1)[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expected = 3 if self.input_fmt == "NLC" else 4
        if not isinstance(x, torch.Tensor) or x.dim() != expected or x.shape[-1] != self.dim:
            what = "(B, L, dim)" if self.input_fmt == "NLC" else "(B, H, W, dim)"
            got = shape_or_type(x)
            raise ValueError(f"x must have shape {what} with dim={self.dim} ({self.input_fmt}), got {got}")
        shape = x.shape
        seq = x.reshape(shape[0], -1, self.dim)  # row-major token order
        length = seq.shape[1]
        if length < 1:
            raise ValueError(f"x must have at least one token, got shape {tuple(shape)}")
        kernel = self.full_kernel(length)
        origin = (0, length - 1) if self.bidirectional else (0, 0)
        # a 1-D convolution is the 2-D one on a 1 x L grid: (B, D, 1, L) (*) (D, 1, taps)
        y = ops.fft_conv2d(seq.transpose(1, 2).unsqueeze(2), kernel, origin=origin).squeeze(2).transpose(1, 2)
        y = F.silu(y + seq * self.omega.to(y.dtype))
        return y.reshape(shape)
