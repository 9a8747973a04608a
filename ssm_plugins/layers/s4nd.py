"""S4ND in the comparison setting of "2-D SSM: A General Spatial Layer for Visual Transformers" (arXiv:2306.06635:
Sec. 5, Table 1, App. F; docs/2d-ssm.md), Table 1's "w/ S4ND" rows.

One 1-D diagonal SSM per axis (S4D, ZOH, bidirectional); the global 2-D kernel is the outer product of the two axis
kernels (rank 1 per channel, Theorem 4.2), C in C^{n_ssm x N} shared by the channels of a group instead of
C^{H x N}; plus D ⊙ x.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .. import ops
from ._common import choice, positive_int
from .essm import hippo_diagonal_init
from .ssm2d import grid_to_nchw

__all__ = ["S4ND"]


class S4ND(nn.Module):
    """S4ND over a (height x width) grid in the 2-D SSM paper's comparison setting (paper App. F; docs/2d-ssm.md,
    'Placement in the backbones').

    Per axis a (0: height, 1: width) a diagonal SSM with n_ssm groups of N/2 complex modes (conjugate pairs,
    as S4's ``d_state``), ZOH-discretised with a per-channel step Δ_{a,c}; channel c uses group c mod n_ssm:

        k_{a,c}^{dir}[l] = 2 Re Σ_n C^{dir}_{a,g,n} B_{a,g,n} (e^{Δ A} - 1)/A · e^{Δ A l},   l = 0..L_a-1

    Bidirectional per axis as S4ND (and Mega's EMA): taps t >= 0 use the forward kernel, t < 0 the backward one
    at |t| - 1. The 2-D kernel is the outer product K_c[a, b] = k_{0,c}[a] k_{1,c}[b] (rank 1, Theorem 4.2),
    applied as one zero-padded FFT convolution (``ops.fft_conv2d``); y = K_c (*) x_c + D_c x_c.

    Args:
        dim: channels. d_state: N, the state size per axis (N/2 complex modes) [D: 16, App. F].
        n_ssm: groups of (A, B, C) shared by the channels, c -> c mod n_ssm [D: 8, App. F].
        bidirectional: [D: True, official S4ND config]. init: "legs" (diagonal of HiPPO-LegS, S4D-LegS: the
            official config's ``init: legs`` without its low-rank term) or "lin" (S4D-Lin) [D: "legs"].
        dt_min, dt_max: range of the log-uniform initial Δ [D: 0.001, 0.1, official config].
        input_fmt: "NCHW" or "NHWC" [D: "NHWC"].

    Parameters: ``log_dt`` (2, dim); ``A_log_re``, ``A_im`` (2, n_ssm, N/2) with A = -exp(A_log_re) + i A_im;
    ``B`` (2, n_ssm, N/2, 2) and ``C`` (2, dirs, n_ssm, N/2, 2) as (re, im) pairs; ``D`` (dim,).
    ``no_weight_decay_names``: log_dt, A_log_re, A_im, B, C (D is decayed, as the 2-D SSM's).

    Deviation from the official code [X]: the official layer wraps S4's DPLR kernel (A = Λ - PP*, Cauchy kernel);
    here A is diagonal (S4D), which keeps the kernel a closed-form Vandermonde product. Everything else (per-axis
    bidirectional kernels, outer product, C in C^{n_ssm x N}, per-channel Δ, D skip, no activation) follows it.
    """

    no_weight_decay_names = ("log_dt", "A_log_re", "A_im", "B", "C")
    INITS = ("legs", "lin")

    def __init__(self, dim: int, d_state: int = 16, n_ssm: int = 8, bidirectional: bool = True, init: str = "legs",
                 dt_min: float = 0.001, dt_max: float = 0.1, input_fmt: str = "NHWC", device=None, dtype=None):
        super().__init__()
        for name, value in (("dim", dim), ("d_state", d_state), ("n_ssm", n_ssm)):
            positive_int(name, value)
        if d_state % 2:
            raise ValueError(f"d_state must be even (N/2 complex conjugate modes), got {d_state!r}")
        choice("init", init, self.INITS)
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"dt_min and dt_max must satisfy 0 < dt_min <= dt_max, got {dt_min!r}, {dt_max!r}")
        if input_fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"input_fmt must be 'NCHW' or 'NHWC', got {input_fmt!r}")
        dd = {"device": device, "dtype": dtype}
        self.dim = dim
        self.d_state = d_state
        self.n_ssm = n_ssm
        self.bidirectional = bool(bidirectional)
        self.init = init
        self.dt_min, self.dt_max = float(dt_min), float(dt_max)
        self.input_fmt = input_fmt
        modes = d_state // 2
        dirs = 2 if self.bidirectional else 1
        self.log_dt = nn.Parameter(torch.empty(2, dim, **dd))
        self.A_log_re = nn.Parameter(torch.empty(2, n_ssm, modes, **dd))
        self.A_im = nn.Parameter(torch.empty(2, n_ssm, modes, **dd))
        self.B = nn.Parameter(torch.empty(2, n_ssm, modes, 2, **dd))
        self.C = nn.Parameter(torch.empty(2, dirs, n_ssm, modes, 2, **dd))
        self.D = nn.Parameter(torch.empty(dim, **dd))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """A, B from S4D-LegS (λ = -1/2 + iω, B = V* b_LegS) or S4D-Lin (λ = -1/2 + iπn, B = 1); C ~ CN(0, 1);
        Δ log-uniform in [dt_min, dt_max]; D ~ N(0, 1) (S4's defaults)."""
        modes = self.d_state // 2
        if self.init == "legs":
            lam, V = hippo_diagonal_init(modes, conj_sym=True, init="paper")
            b_legs = torch.sqrt(2 * torch.arange(2 * modes, dtype=torch.float64) + 1).to(torch.complex128)
            b = V.conj().transpose(0, 1) @ b_legs
        else:
            lam = torch.complex(torch.full((modes,), -0.5, dtype=torch.float64),
                                math.pi * torch.arange(modes, dtype=torch.float64))
            b = torch.ones(modes, dtype=torch.complex128)
        with torch.no_grad():
            if self.A_im.is_meta:  # shapes only
                return
            self.log_dt.uniform_(math.log(self.dt_min), math.log(self.dt_max))
            self.A_log_re.copy_(torch.log(-lam.real).expand_as(self.A_log_re))
            self.A_im.copy_(lam.imag.expand_as(self.A_im))
            self.B.copy_(torch.view_as_real(b).expand_as(self.B))
            self.C.normal_(0.0, math.sqrt(0.5))  # each part N(0, 1/2): C ~ CN(0, 1)
            self.D.normal_(0.0, 1.0)

    def extra_repr(self) -> str:
        return (f"{self.dim}, d_state={self.d_state}, n_ssm={self.n_ssm}, bidirectional={self.bidirectional}, "
                f"init={self.init!r}, input_fmt={self.input_fmt!r}")

    def axis_kernels(self, axis: int, length: int) -> torch.Tensor:
        """Per-channel, per-direction causal kernels of one axis: (dirs, dim, length), float32 (float64 params)."""
        positive_int("length", length)
        wide = self.A_im.dtype == torch.float64
        acc, cacc = (torch.float64, torch.complex128) if wide else (torch.float32, torch.complex64)
        group = torch.arange(self.dim, device=self.A_im.device) % self.n_ssm
        A = torch.complex(-torch.exp(self.A_log_re[axis].to(acc)), self.A_im[axis].to(acc))[group]  # (dim, N/2)
        B = torch.view_as_complex(self.B[axis].to(acc).contiguous())[group]
        C = torch.view_as_complex(self.C[axis].to(acc).contiguous())[:, group]  # (dirs, dim, N/2)
        dtA = torch.exp(self.log_dt[axis].to(acc))[:, None] * A
        dB = B * (torch.exp(dtA) - 1.0) / A  # ZOH
        steps = torch.arange(length, device=A.device, dtype=acc).to(cacc)
        vander = torch.exp(dtA[..., None] * steps)  # (dim, N/2, L)
        return 2.0 * torch.einsum("edn,dnl->edl", C * dB, vander).real

    def axis_kernel(self, axis: int, length: int) -> torch.Tensor:
        """One axis's kernel as a (dim, 2L-1) filter centred at L-1 (or causal (dim, L) if unidirectional)."""
        kernels = self.axis_kernels(axis, length)
        if not self.bidirectional:
            return kernels[0]
        return torch.cat([kernels[1][:, :length - 1].flip(-1), kernels[0]], dim=-1)

    def compute_kernel(self, height: int, width: int) -> torch.Tensor:
        """The global 2-D kernels (dim, 2H-1, 2W-1) (causal (dim, H, W) if unidirectional): outer products."""
        return self.axis_kernel(0, height)[:, :, None] * self.axis_kernel(1, width)[:, None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = grid_to_nchw(x, self.dim, self.input_fmt)
        height, width = x.shape[-2:]
        origin = (height - 1, width - 1) if self.bidirectional else (0, 0)
        y = ops.fft_conv2d(x, self.compute_kernel(height, width), origin=origin)
        y = y + self.D.to(y.dtype)[:, None, None] * x
        return y.permute(0, 2, 3, 1) if self.input_fmt == "NHWC" else y
