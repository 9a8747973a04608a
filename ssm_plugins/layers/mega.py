"""Mega block and the spatial layers the 2-D SSM paper compares against ("2-D SSM: A General Spatial Layer for
Visual Transformers", arXiv:2306.06635: Sec. 5, Table 1, App. F; docs/2d-ssm.md).

* :class:`MultiHeadEMA` -- Mega's multi-head damped EMA (Ma et al. 2022) on the row-major flattened token grid:
  per channel d and EMA dimension n, h_t = α ⊙ β x_t + (1 - α ⊙ δ) ⊙ h_{t-1}, y_t = Σ_n η_n h_t[n] / sqrt(N);
  bidirectional (a second EMA over the reversed sequence, shifted by one step so x_t is counted once), then
  silu(y + ω ⊙ x). Computed as one FFT convolution with the closed-form kernel.
* :class:`S4ND` -- the S4ND layer in the paper's comparison setting (App. F): one 1-D diagonal SSM per axis
  (S4D, ZOH, bidirectional), the global 2-D kernel is the outer product of the two axis kernels (rank 1 per
  channel, Theorem 4.2), C in C^{n_ssm x N} shared by the channels of a group instead of C^{H x N}; plus D ⊙ x.
* :class:`MovingAverageGatedAttention` -- Mega's gated single-head attention (laplace attention, relative
  position bias) whose spatial mixer (EMA, 2-D SSM, S4ND or none) filters the Q/K/gate path only; V comes from
  the unfiltered input (paper Sec. 5, "Mega": "we only perform our layer on Q, K").
* :class:`NormalizedFeedForward` and :class:`MegaBlock` (= MovingAverageGatedAttention + normalised FFN).

:func:`make_spatial_mixer` builds any of the four mixers for an (B, H, W, C) token grid; the ViT/Swin models of
``ssm_plugins.models.ssm2d`` use it for Table 1's "w/ S4ND" and "w/ EMA" rows.

Markers (docs/2d-ssm.md): [D] a default that the paper or the official code settles, [X] an extension beyond
them.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ops
from ._common import DropPath, choice, positive_int, probability, shape_or_type
from .essm import BatchNormNLC, hippo_diagonal_init
from .ssm2d import SSM2D, grid_to_nchw

__all__ = ["MultiHeadEMA", "S4ND", "RelativePositionBias", "MovingAverageGatedAttention", "NormalizedFeedForward",
           "MegaBlock", "BatchNormNHWC", "make_spatial_mixer", "laplace_attention", "SPATIAL_MIXERS"]

SPATIAL_MIXERS = ("ssm2d", "s4nd", "ema", "none")
_INPUT_FMTS = ("NLC", "NHWC")


def laplace_attention(scores: torch.Tensor, mu: float = math.sqrt(0.5), sigma: float = math.sqrt(0.25 / math.pi)):
    """Mega's laplace attention function f(x) = ½ (1 + erf((x - μ) / (σ √2))), with μ = √½ and σ = √(1/4π) so that
    it approximates relu² near x = μ (Ma et al. 2022, §3.3 of their appendix)."""
    return 0.5 * (1.0 + torch.erf((scores - mu) / (sigma * math.sqrt(2.0))))


# ---- multi-head EMA ------------------------------------------------------------------------------------------


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


# ---- S4ND ------------------------------------------------------------------------------------------------------


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


# ---- spatial mixer factory -----------------------------------------------------------------------------------


def make_spatial_mixer(
        kind: str,
        dim: int,
        d_state: int = 16,
        n_ssm: int = 8,
        directions: int = 4,
        complex: bool = False,
        complex_param: str = "cartesian",
        layernorm: bool = False,
        fused: bool = True,
        extra: Optional[Dict[str, Any]] = None,
        device=None,
        dtype=None,
) -> nn.Module:
    """The spatial layer of a block, on a channels-last (B, H, W, dim) token grid, output in the same layout.

    ``kind``: "ssm2d" (the paper's 2-D SSM, all the other arguments), "s4nd" (d_state, n_ssm), "ema" (d_state:
    Mega's EMA dimension; as code-v1, one ``--ndim`` serves all three) or "none" (identity: the plain backbone /
    Mega-ablate). ``extra``: further keyword arguments for the chosen layer's constructor.
    """
    choice("spatial_mixer", kind, SPATIAL_MIXERS)
    dd = {"device": device, "dtype": dtype, **(extra or {})}
    if kind == "ssm2d":
        return SSM2D(dim, d_state=d_state, n_ssm=n_ssm, directions=directions, complex=complex,
                     complex_param=complex_param, layernorm=layernorm, fused=fused, input_fmt="NHWC", **dd)
    if kind == "s4nd":
        return S4ND(dim, d_state=d_state, n_ssm=n_ssm, input_fmt="NHWC", **dd)
    if kind == "ema":
        return MultiHeadEMA(dim, d_state=d_state, bidirectional=True, input_fmt="NHWC", **dd)
    if extra:
        raise ValueError(f"spatial_mixer='none' takes no extra arguments, got {sorted(extra)}")
    return nn.Identity()


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


class MovingAverageGatedAttention(nn.Module):
    """Mega's moving-average gated attention on a (B, H, W, dim) token grid, pre-norm (paper Sec. 5, "Mega";
    docs/2d-ssm.md, 'Placement in the backbones'):

        x' = Norm(x);  v = silu(W_v x' + b);  mx = dropout(mixer(x'))          # V from the UNFILTERED x'
        u, z, r, h_x = split(W_mx mx + b);  u = σ(u);  z, r = silu(z), silu(r);  q, k = z γ_{q,k} + β_{q,k}
        A = laplace(q kᵀ / L + rel_bias)  (or softmax(q kᵀ / sqrt(z_dim) + rel_bias))
        h = silu(h_x + W_h((A v) ⊙ r));  out = x + u ⊙ (drop_path(dropout(h)) - x)

    Args:
        dim: D. zdim: shared Q/K dimension. hdim: value / gate dimension.
        spatial_mixer: "ema" (Mega), "ssm2d", "s4nd" or "none" (Mega-ablate); ``mixer_kwargs`` go to
            :func:`make_spatial_mixer`.
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
            spatial_mixer: str = "ema",
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
        self.spatial_mixer = spatial_mixer
        self.attn_activation = attn_activation
        self.norm = norm_layer(dim, **dd)
        self.mixer = make_spatial_mixer(spatial_mixer, dim, **(mixer_kwargs or {}), **dd)
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
            spatial_mixer: str = "ema",
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
