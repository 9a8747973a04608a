"""Linear time-invariant SSMs as long convolutions: the S4 and HiPPO token mixers of MambaMixer's Table 3
(arXiv 2403.19888 v2, Sec. 4.1, "The Effect of Selective Channel Mixer") and the S4D kernel of eSSM's S4 baseline.

Both compute y = K * x along the sequence with a kernel K[l] = C Ā^l B̄ that does not depend on the input (the
difference from S6, whose Δ, B, C are read from each token), by FFT (O(L log L)); bidirectional adds a second
kernel with its own C on the reversed sequence (S4's ``bidirectional``).

* ``'s4'``: S4D-Lin (Gu, Gupta, Goel & Ré, NeurIPS 2022): per channel N/2 conjugate pairs λ = -1/2 + iπn, ZOH,
  B = 1, C ~ CN(0, 1), learnt Δ, Re λ and Im λ.
* ``'hippo'``: the HiPPO-LegS operator (Gu et al., NeurIPS 2020) with A and B fixed at their closed form, bilinear
  discretisation with a learnt Δ per channel, learnt C: the "HiPPO" SSM of LSSL (Gu et al., NeurIPS 2021), which
  keeps HiPPO's memory and learns only the read-out and the time scale.

MambaMixer does not say how its S4 and HiPPO rows are built; these readings are ours (docs/mambamixer.md, 'Table 3
token mixers').
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ._common import choice, positive_int, shape_or_type

__all__ = ["hippo_legs", "s4d_kernel", "fft_conv", "LTITokenSSM"]

LTI_KINDS = ("s4", "hippo")


def hippo_legs(n: int):
    """HiPPO-LegS (Gu et al. 2020, Eq. 2 / App. D.3), float64: A (n, n) with A_jk = -sqrt((2j+1)(2k+1)) below the
    diagonal, -(j+1) on it, 0 above; B (n,) = sqrt(2j+1)."""
    q = torch.sqrt(2 * torch.arange(n, dtype=torch.float64) + 1)
    A = torch.tril(-q[:, None] * q[None, :], -1) - torch.diag(torch.arange(1, n + 1, dtype=torch.float64))
    return A, q


def s4d_kernel(log_dt, log_A_real, A_imag, C, length: int) -> torch.Tensor:
    """S4D's ZOH kernel with B = 1 (conjugate pairs folded into 2 Re): log_dt (H,), log_A_real / A_imag (H, N/2),
    C (channels, H, N/2, 2) real view of complex -> (channels, H, length)."""
    dt = log_dt.exp()[:, None]
    A = torch.complex(-log_A_real.exp(), A_imag)
    C = torch.view_as_complex(C.contiguous()) * (torch.exp(dt * A) - 1) / A
    steps = torch.arange(length, device=A.device, dtype=dt.dtype)
    return 2 * torch.einsum("chn,hnl->chl", C, torch.exp((dt * A)[..., None] * steps)).real


def fft_conv(x: torch.Tensor, kernel: torch.Tensor, dim: int = -1, reverse: bool = False) -> torch.Tensor:
    """Causal linear convolution of x with kernel along ``dim``, by FFT at twice the length (no wrap-around); the
    kernel broadcasts against x from the right, so give ``dim`` from the end. ``reverse`` convolves the sequence
    from its end (the anti-causal half of a bidirectional SSM)."""
    length = x.shape[dim]
    if reverse:
        x = x.flip(dim)
    n = 2 * length
    y = torch.fft.irfft(torch.fft.rfft(x, n=n, dim=dim) * torch.fft.rfft(kernel, n=n, dim=dim), n=n, dim=dim)
    y = y.narrow(dim, 0, length)
    return y.flip(dim) if reverse else y


class LTITokenSSM(nn.Module):
    """H independent single-input single-output LTI SSMs along the tokens of (batch, L, H): y = K * x, plus the
    reversed kernel's output when bidirectional (no D skip, no activation: the caller's block adds them).

    Args:
        channels: H. d_state: N (even for 's4': N/2 conjugate pairs). kind: 's4' | 'hippo'.
        bidirectional: a second kernel (its own C) on the reversed sequence [False].
        dt_min, dt_max: Δ initialised log-uniform in [dt_min, dt_max] per channel [S4: 1e-3, 1e-1].

    Parameters: ``log_dt`` (H,) and ``C`` (directions, H, N/2, 2) for 's4' with ``log_A_real``, ``A_imag`` (H, N/2);
    ``log_dt`` and ``C`` (directions, H, N) for 'hippo', whose A and B are buffers (not learnt, not saved).
    """

    def __init__(self, channels: int, d_state: int = 16, kind: str = "s4", bidirectional: bool = False,
                 dt_min: float = 1e-3, dt_max: float = 1e-1):
        super().__init__()
        positive_int("channels", channels)
        positive_int("d_state", d_state)
        choice("kind", kind, LTI_KINDS)
        if kind == "s4" and d_state % 2:
            raise ValueError(f"d_state must be even for kind='s4' (N/2 conjugate pairs), got {d_state}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        self.channels, self.d_state, self.kind, self.bidirectional = channels, d_state, kind, bool(bidirectional)
        self.dt_min, self.dt_max = float(dt_min), float(dt_max)
        directions = 2 if bidirectional else 1
        self.log_dt = nn.Parameter(torch.empty(channels))
        if kind == "s4":
            pairs = d_state // 2
            self.log_A_real = nn.Parameter(torch.empty(channels, pairs))
            self.A_imag = nn.Parameter(torch.empty(channels, pairs))
            self.C = nn.Parameter(torch.empty(directions, channels, pairs, 2))
        else:
            A, B = hippo_legs(d_state)
            self.register_buffer("A", A.float(), persistent=False)
            self.register_buffer("B", B.float(), persistent=False)
            self.C = nn.Parameter(torch.empty(directions, channels, d_state))
        self.reset_parameters()

    @property
    def no_weight_decay_names(self):
        return ("log_dt", "log_A_real", "A_imag") if self.kind == "s4" else ("log_dt",)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.log_dt.uniform_(math.log(self.dt_min), math.log(self.dt_max))
        if self.kind == "s4":
            self.log_A_real.fill_(math.log(0.5))
            self.A_imag.copy_(math.pi * torch.arange(self.d_state // 2, dtype=torch.float32).expand_as(self.A_imag))
            self.C.normal_(0.0, math.sqrt(0.5))  # a standard complex normal
        else:
            self.C.normal_(0.0, 1.0 / math.sqrt(self.d_state))

    def extra_repr(self) -> str:
        return f"{self.channels}, d_state={self.d_state}, kind={self.kind!r}, bidirectional={self.bidirectional}"

    def kernel(self, length: int) -> torch.Tensor:
        """(directions, H, length) real kernels."""
        if self.kind == "s4":
            return s4d_kernel(self.log_dt, self.log_A_real, self.A_imag, self.C, length)
        # bilinear: Ā = (I - Δ/2 A)⁻¹ (I + Δ/2 A), B̄ = (I - Δ/2 A)⁻¹ Δ B; then Ā^l B̄ for l < length by doubling
        dt = self.log_dt.exp()[:, None, None]
        eye = torch.eye(self.d_state, device=dt.device, dtype=dt.dtype)
        left = eye - dt / 2 * self.A
        A_bar = torch.linalg.solve(left, eye + dt / 2 * self.A)
        powers = torch.linalg.solve(left, dt * self.B[:, None])  # (H, N, 1): Ā^0 B̄
        step = A_bar
        while powers.shape[-1] < length:
            powers = torch.cat([powers, step @ powers], dim=-1)
            step = step @ step
        return torch.einsum("dhn,hnl->dhl", self.C, powers[..., :length])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, L, H) -> (batch, L, H)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.channels:
            raise ValueError(f"x must have shape (batch, L, {self.channels}), got {shape_or_type(x)}")
        # the FFTs in float32 at least (half-precision FFTs need power-of-two lengths and lose the kernel's tail)
        dtype = torch.promote_types(x.dtype, torch.float32)
        k = self.kernel(x.shape[1]).to(dtype).transpose(-1, -2)  # (directions, L, H)
        xf = x.to(dtype)
        y = fft_conv(xf, k[0], dim=-2)
        if self.bidirectional:
            y = y + fft_conv(xf, k[1], dim=-2, reverse=True)
        return y.to(x.dtype)
