"""Baselines of the eSSM paper's efficiency studies (arXiv 2402.15290): the two recurrent ones of Fig. 7
(Sec. 5.8.1), the S4 of Figs. 1 and 6 (Sec. 5.3) and the DSS of Fig. 6.

* :class:`VanillaRecurrentSSM` ('Vanilla'): the original MIMO SSM, a real dense A (N x N), computed step by step.
* :class:`DiagonalRecurrentESSM` ('Diagonal'): the eSSM layer's diagonal Λ and parameters, computed step by step
  instead of by the FFT convolution (causal only).

'Diagonal + FFT' is :class:`ssm_plugins.layers.essm.ESSM` itself (``bidirectional=False`` for the same causal
system). All three are :class:`~ssm_plugins.layers.essm.SSMLayerBase`: the same forward and mixing after the core
(gate / head mixer, ``glu``). The paper does not describe how its Vanilla layer is parameterised (docs/essm.md,
'Efficiency baselines').
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops._backend import no_autocast
from ..ops._validate import compute_dtype
from ..ops.reference.essm import essm_recurrent
from ._common import choice, positive_int, probability, shape_or_type
from .essm import (ESSM, GLUS, SSMLayerBase, hippo_diagonal_init, hippo_legs_normal, log_uniform_log_dt,
                   trunc_normal_init)
from .lti import fft_conv, s4d_kernel

__all__ = ["VanillaRecurrentSSM", "DiagonalRecurrentESSM", "ConvolutionSSMBaseline", "S4D", "DSS"]


class DiagonalRecurrentESSM(ESSM):
    """Fig. 7 'Diagonal': :class:`ESSM` (causal) with the core run as the recurrence of docs/essm.md,
    'Recurrent mode', one time step after the other:

        σ_t = e^{λΔ} ⊙ σ_{t-1} + g ⊙ (B u_t),   y_t = γ C Re(σ_t) + D ⊙ u_t.

    Same parameters, initialisation and state_dict as ``ESSM(..., bidirectional=False)``; the same output.
    """

    def __init__(self, d_model: int, d_state: Optional[int] = None, n_heads: int = 1, **kwargs):
        if kwargs.pop("bidirectional", False):
            raise ValueError("DiagonalRecurrentESSM is causal: the recurrence has no bidirectional form")
        super().__init__(d_model, d_state, n_heads, bidirectional=False, **kwargs)

    def ssm(self, u: torch.Tensor, dt_scale: Optional[float] = None) -> torch.Tensor:
        """(B, H, L) -> (B, H, L), heads concatenated: the oracle's recurrent mode on this layer's parameters."""
        with no_autocast(u.device.type):
            return essm_recurrent(u, self.lambda_re, self.Lambda_im, self.log_dt, self.B, self.C, self.D,
                                  conj_sym=self.conj_sym, dt_scale=self._dt_scale(dt_scale),
                                  discretization=self.discretization, gbt_alpha=self.gbt_alpha)


class VanillaRecurrentSSM(SSMLayerBase):
    """Fig. 7 'Vanilla': the real MIMO SSM x' = A x + B u, y = C x + D u with a dense A (N x N), one Δ per state,
    ZOH-discretised and computed step by step: x_t = Ā x_{t-1} + B̄ u_t, y_t = C x_t + D ⊙ u_t (causal).

    ZOH of x' = Δ ⊙ (A x + B u) (Δ per state row; for a diagonal A this is the eSSM layer's discretisation with
    Im λ = 0): [[Ā, B̄], [0, I]] = exp([[diag(Δ) A, diag(Δ) B], [0, 0]]).

    Initialisation (the eSSM paper's, before diagonalisation; docs/essm.md, 'Initialisation'): A = the HiPPO-LegS
    normal part A^N (N x N; its eigenvalues -1/2 + iω are the diagonal layer's Λ with conj_sym=False), B and C
    trunc-normal N(0, 1) in [-2, 2], D = 1, log Δ log-uniform on [dt_min, dt_max].

    Parameters ``A`` (N, N), ``B`` (N, H), ``C`` (H, N), ``D`` (H,), ``log_dt`` (N,), and ESSM's mixing layers for
    ``glu`` (one head: no head mixer). (B, L, H) -> (B, L, H), or (B, H, L) with ``channels_last=False``.
    """

    def __init__(self, d_model: int, d_state: Optional[int] = None, dt_min: float = 1e-3, dt_max: float = 1e-1,
                 glu: str = "half_glu1", dropout: float = 0.0, channels_last: bool = True, device=None, dtype=None):
        super().__init__()
        d_state = d_model if d_state is None else d_state
        positive_int("d_model", d_model)
        positive_int("d_state", d_state)
        choice("glu", glu, GLUS)
        probability("dropout", dropout)
        dd = {"device": device, "dtype": dtype}
        self.d_model, self.d_state = d_model, d_state
        self.dt_min, self.dt_max = float(dt_min), float(dt_max)
        self.dt_scale = 1.0
        self.glu, self.pre_act, self.channels_last = glu, None, bool(channels_last)
        self.A = nn.Parameter(torch.empty(d_state, d_state, **dd))
        self.B = nn.Parameter(torch.empty(d_state, d_model, **dd))
        self.C = nn.Parameter(torch.empty(d_model, d_state, **dd))
        self.D = nn.Parameter(torch.empty(d_model, **dd))
        self.log_dt = nn.Parameter(torch.empty(d_state, **dd))
        self._init_mixing(1, dropout, dd)  # one head: no head mixer
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        N = self.d_state
        log_dt = log_uniform_log_dt(N, dt_min=self.dt_min, dt_max=self.dt_max)
        for param, value in ((self.A, hippo_legs_normal(N)), (self.B, trunc_normal_init(N, self.d_model)),
                             (self.C, trunc_normal_init(self.d_model, N)), (self.log_dt, log_dt)):
            param.copy_(value.to(param.dtype))
        self.D.fill_(1.0)
        self._reset_mixing()

    def extra_repr(self) -> str:
        return f"{self.d_model}, d_state={self.d_state}, glu={self.glu!r}, channels_last={self.channels_last}"

    def discretize(self, dt_scale: Optional[float] = None):
        """(Ā (N, N), B̄ (N, H)) by ZOH, one matrix exponential of the (N + H) square augmented system."""
        N, H = self.d_state, self.d_model
        acc = compute_dtype(self.A.dtype)
        dt = torch.exp(self.log_dt.to(acc)) * self._dt_scale(dt_scale)
        top = torch.cat([dt[:, None] * self.A.to(acc), dt[:, None] * self.B.to(acc)], 1)
        augmented = torch.linalg.matrix_exp(torch.cat([top, top.new_zeros(H, N + H)], 0))
        return augmented[:N, :N], augmented[:N, N:]

    def ssm(self, u: torch.Tensor, dt_scale: Optional[float] = None) -> torch.Tensor:
        """(B, H, L) -> (B, H, L) by the dense recurrence over t."""
        acc = compute_dtype(self.A.dtype)
        with no_autocast(u.device.type):
            A_bar, B_bar = self.discretize(dt_scale)
            x = u.to(acc)
            drive = torch.einsum("nh,bhl->lbn", B_bar, x)  # B̄ u_t, time first
            state = x.new_zeros(x.shape[0], self.d_state)
            states = []
            for drive_t in drive.unbind(0):
                state = state @ A_bar.T + drive_t
                states.append(state)
            y = torch.einsum("mn,lbn->bml", self.C.to(acc), torch.stack(states)) + self.D.to(acc)[:, None] * x
        return y.to(u.dtype)


class ConvolutionSSMBaseline(nn.Module):
    """The convolution baselines of the eSSM paper's Figs. 1 and 6 (S4, DSS): H independent SISO SSMs computed as a
    causal FFT convolution of each channel with a kernel of the subclass (``kernel(L)`` -> (directions, H, L));
    bidirectional (S4's and DSS's option) adds a second kernel of its own read-out on the time-reversed input (the
    parameters Fig. 6 counts). Then the S4 block: y = GELU(K * u + D ⊙ u), dropout, Linear(H, 2H) + GLU.
    (B, L, H) -> (B, L, H).
    """

    def __init__(self, d_model: int, d_state: int, bidirectional: bool, dt_min: float, dt_max: float,
                 dropout: float, dd: dict):
        super().__init__()
        positive_int("d_model", d_model)
        positive_int("d_state", d_state)
        if d_state % 2:
            raise ValueError(f"d_state must be even (N/2 conjugate pairs), got {d_state}")
        probability("dropout", dropout)
        self.d_model, self.d_state, self.bidirectional = d_model, d_state, bool(bidirectional)
        self.dt_min, self.dt_max = float(dt_min), float(dt_max)
        self.directions = 2 if bidirectional else 1
        self.log_dt = nn.Parameter(torch.empty(d_model, **dd))
        self.D = nn.Parameter(torch.empty(d_model, **dd))
        self.drop = nn.Dropout(dropout)
        self.output_linear = nn.Linear(d_model, 2 * d_model, **dd)

    def extra_repr(self) -> str:
        return f"{self.d_model}, d_state={self.d_state}, bidirectional={self.bidirectional}"

    def kernel(self, length: int) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        if not isinstance(u, torch.Tensor) or u.dim() != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u must have shape (B, L, d_model) with d_model={self.d_model}, got {shape_or_type(u)}")
        length = u.shape[1]
        x = u.transpose(1, 2)  # (B, H, L)
        k = self.kernel(length)
        y = fft_conv(x, k[0])
        if self.bidirectional:  # the second kernel on the future
            y = y + fft_conv(x, k[1], reverse=True)
        y = self.drop(F.gelu(y + self.D[:, None] * x)).transpose(1, 2)
        return F.glu(self.output_linear(y), dim=-1)


class S4D(ConvolutionSSMBaseline):
    """The S4 baseline of the eSSM paper's Figs. 1 and 6: S4D (Gu, Gupta, Goel & Ré, *On the Parameterization and
    Initialization of Diagonal State Space Models*, NeurIPS 2022), H independent SISO diagonal SSMs with N/2
    conjugate pairs each (:class:`ConvolutionSSMBaseline`), with the kernel (B = 1, ZOH):

        K_h[l] = 2 Re Σ_n C_hn (exp(Δ_h A_hn) - 1)/A_hn · exp(Δ_h A_hn l),   y = K * u + D ⊙ u

    Initialisation S4D-Lin: A = -1/2 + iπn, C ~ N(0, 1) complex, D ~ N(0, 1), log Δ uniform in [log dt_min,
    log dt_max]. Parameters ``log_dt`` (H,), ``log_A_real``, ``A_imag`` (H, N/2), ``C`` (directions, H, N/2, 2),
    ``D`` (H,), ``output_linear``.
    """

    def __init__(self, d_model: int, d_state: int = 64, bidirectional: bool = False, dt_min: float = 1e-3,
                 dt_max: float = 1e-1, dropout: float = 0.0, device=None, dtype=None):
        dd = {"device": device, "dtype": dtype}
        super().__init__(d_model, d_state, bidirectional, dt_min, dt_max, dropout, dd)
        pairs = d_state // 2
        self.log_A_real = nn.Parameter(torch.empty(d_model, pairs, **dd))
        self.A_imag = nn.Parameter(torch.empty(d_model, pairs, **dd))
        self.C = nn.Parameter(torch.empty(self.directions, d_model, pairs, 2, **dd))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        pairs = self.d_state // 2
        self.log_dt.copy_(log_uniform_log_dt(self.d_model, dt_min=self.dt_min, dt_max=self.dt_max))
        self.log_A_real.fill_(math.log(0.5))
        self.A_imag.copy_(math.pi * torch.arange(pairs, dtype=torch.float64).expand(self.d_model, pairs))
        self.C.normal_(0.0, math.sqrt(0.5))  # a standard complex normal
        self.D.normal_()
        self.output_linear.reset_parameters()

    def kernel(self, length: int) -> torch.Tensor:
        """(directions, H, L) real convolution kernels."""
        return s4d_kernel(self.log_dt, self.log_A_real, self.A_imag, self.C, length)


DSS_VERSIONS = ("softmax", "exp")


def reciprocal(x: torch.Tensor, epsilon: float) -> torch.Tensor:
    """DSS's bounded 1/x over the complex numbers: conj(x) / (|x|² + ε), at most 1/(2 sqrt ε) in modulus."""
    return x.conj() / (x * x.conj() + epsilon)


class DSS(ConvolutionSSMBaseline):
    """The DSS baseline of the eSSM paper's Fig. 6: DSS (Gupta, Gu & Berant, *Diagonal State Spaces are as
    Effective as Structured State Spaces*, NeurIPS 2022, Sec. 3): H SISO SSMs that share one diagonal Λ of N/2
    complex eigenvalues (the real part of the kernel keeps their conjugates), each with its own Δ_h and
    W_h ∈ C^(N/2) (:class:`ConvolutionSSMBaseline`), with the kernel of its Proposition 1:

        'softmax' (DSS_softmax): K_h[l] = Re Σ_n W_hn / λ_n · e^(l Δ_h λ_n) / Σ_(r<L) e^(r Δ_h λ_n)
        'exp'     (DSS_exp):     K_h[l] = Re Σ_n W_hn (e^(Δ_h λ_n) - 1) / λ_n · e^(l Δ_h λ_n),   Re λ = -exp(·) < 0

    'softmax' leaves Λ free (its row-softmax is computed from the end of the sequence for an eigenvalue with
    Re λ > 0, so no exponential overflows) and inverts with DSS's bounded reciprocal (ε = 1e-7); 'exp' keeps
    Re λ < 0 by its parameterisation. Initialisation as DSS: Λ the skew-HiPPO eigenvalues -1/2 + iω with ω > 0
    (the normal part of HiPPO-LegS at size N, :func:`hippo_diagonal_init`), W ~ N(0, 1) complex (real and
    imaginary parts each N(0, 1)), log Δ uniform in [log dt_min, log dt_max], D ~ N(0, 1). Parameters ``log_dt``
    (H,), ``Lambda`` (N/2, 2) for 'softmax' or ``Lambda_log_neg_re``, ``Lambda_im`` (N/2,) for 'exp', ``W``
    (directions, H, N/2, 2), ``D`` (H,), ``output_linear``: a bidirectional layer adds H N (a second W).
    """

    def __init__(self, d_model: int, d_state: int = 64, bidirectional: bool = False, version: str = "softmax",
                 dt_min: float = 1e-3, dt_max: float = 1e-1, epsilon: float = 1e-7, dropout: float = 0.0,
                 device=None, dtype=None):
        choice("version", version, DSS_VERSIONS)
        dd = {"device": device, "dtype": dtype}
        super().__init__(d_model, d_state, bidirectional, dt_min, dt_max, dropout, dd)
        self.version, self.epsilon = version, float(epsilon)
        pairs = d_state // 2
        if version == "softmax":
            self.Lambda = nn.Parameter(torch.empty(pairs, 2, **dd))
        else:
            self.Lambda_log_neg_re = nn.Parameter(torch.empty(pairs, **dd))
            self.Lambda_im = nn.Parameter(torch.empty(pairs, **dd))
        self.W = nn.Parameter(torch.empty(self.directions, d_model, pairs, 2, **dd))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        lam = hippo_diagonal_init(self.d_state // 2)[0]
        if self.version == "softmax":
            self.Lambda.copy_(torch.view_as_real(lam))
        else:
            self.Lambda_log_neg_re.copy_(torch.log(-lam.real))
            self.Lambda_im.copy_(lam.imag)
        self.log_dt.copy_(log_uniform_log_dt(self.d_model, dt_min=self.dt_min, dt_max=self.dt_max))
        self.W.normal_()
        self.D.normal_()
        self.output_linear.reset_parameters()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, version={self.version!r}"

    def eigenvalues(self) -> torch.Tensor:
        """Λ (N/2,) complex."""
        if self.version == "softmax":
            return torch.view_as_complex(self.Lambda.contiguous())
        return torch.complex(-self.Lambda_log_neg_re.exp(), self.Lambda_im)

    def kernel(self, length: int) -> torch.Tensor:
        """(directions, H, L) real convolution kernels."""
        lam = self.eigenvalues()
        W = torch.view_as_complex(self.W.contiguous())  # (directions, H, N/2)
        dt_lam = self.log_dt.exp()[:, None] * lam  # (H, N/2)
        steps = torch.arange(length, device=lam.device, dtype=self.log_dt.dtype)
        power = dt_lam[..., None] * steps  # (H, N/2, L): l Δ λ
        if self.version == "softmax":
            # e^(lz) / Σ_r e^(rz) = e^(z') (e^z' - 1) / (e^(Lz') - 1) with z' = -z and the exponent counted from
            # the end, l - (L - 1), where Re z > 0 (the same quotient, no overflow)
            growing = (lam.real > 0).to(dt_lam.real.dtype)
            flipped = dt_lam * (1 - 2 * growing)
            W = W * (flipped.exp() - 1) * reciprocal(((flipped * length).exp() - 1) * lam, self.epsilon)
            power = power - (growing * (length - 1))[:, None] * dt_lam[..., None]
        else:
            W = W * (dt_lam.exp() - 1) / lam
        return torch.einsum("chn,hnl->chl", W, power.exp()).real
