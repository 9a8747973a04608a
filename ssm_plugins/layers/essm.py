"""eSSM layer and residual block (Liang & Li, "Efficient State Space Model via Fast Tensor Convolution and Block
Diagonalization", arXiv 2402.15290): parameters and initialisation (Sec. 4.5, App. B.3-B.4), the layer (Sec. 4.3-4.6,
App. E.1, Listing 1) and the block (Sec. 4.6, Fig. 3); what the paper leaves open is in docs/essm.md.

One layer, per head s of S (channels split into contiguous groups of h = H/S, state split n = N/S):

    y_s = γ C_s (k_s * (B_s u_s)) + D_s ⊙ u_s          k_{s,i,j} = Re(g_{s,i} e^{j λ_{s,i} Δ_{s,i}})  (ZOH)

computed by ``ssm_plugins.ops.essm_conv`` (fast tensor convolution over the N state channels, fp32), then (order
of docs/essm.md, 'Layer forward pass')

    y = pre_act(y);  y = W_mix drop(y) + b   (only when S > 1);  a = drop(GELU(y));  y = a ⊙ σ(W_gate a + b)

(``glu="half_glu1"``, the paper's default; ``half_glu2``, ``full_glu``, ``gelu`` and ``leakyrelu`` are selectable).

The block (docs/essm.md, 'Block and model'):
    z = norm(x) if prenorm;  z = Dropout1d(eSSM(z));  x = x + z;  x = norm(x) if not prenorm.

Markers in the docstrings (docs/essm.md): [D] an option's default (the paper's value, or ours where the paper is
silent), [X] an extension beyond the paper.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ops
from ..ops._backend import no_autocast
from ..ops.reference.essm import DISCRETIZATIONS, essm_discretize
from ._common import choice, drop_path, eigh_fixed_phase, positive_int, probability, shape_or_type

__all__ = ["SSMLayerBase", "ESSM", "ESSMBlock", "BatchNormNLC", "make_norm", "hippo_legs_normal",
           "hippo_diagonal_init", "essm_layer_param_count", "trunc_normal_init", "log_uniform_log_dt"]

GLUS = ("half_glu1", "half_glu2", "full_glu", "gelu", "leakyrelu")
PRE_ACTIVATIONS = (None, "identity", "leakyrelu", "gelu")
INITS = ("paper", "official")
C_INITS = ("trunc_normal", "hippo")
NORMS = ("batch", "layer")
LEAKY_SLOPE = 0.05  # leakyrelu(0.05): our choice (docs/essm.md, 'ListOps presets')

# parameter names of the SSM core: LR_SSM group (C often on LR_other, paper App. E.2), never weight-decayed
SSM_PARAM_NAMES = ("Lambda_re", "Lambda_im", "log_dt", "B", "C", "D")


# ---- HiPPO initialisation (paper App. B.4; docs/essm.md, 'Initialisation') ------------------------------------


def hippo_legs_normal(size: int) -> torch.Tensor:
    """Normal part A^N = A + p pᵀ of HiPPO-LegS (size x size, float64): -1/2 on the diagonal, skew off it.

    A^N_{jk} = -sqrt((j+1/2)(k+1/2)) for j > k and +sqrt(...) for j < k (the paper's Eq. 17/35 prints - on both
    branches, a typo; docs/essm.md, 'Initialisation').
    """
    q = torch.sqrt(torch.arange(size, dtype=torch.float64) + 0.5)
    outer = q[:, None] * q[None, :]
    return torch.tril(-outer, -1) + torch.triu(outer, 1) - 0.5 * torch.eye(size, dtype=torch.float64)


def hippo_diagonal_init(n: int, conj_sym: bool = True, init: str = "paper") -> Tuple[torch.Tensor, torch.Tensor]:
    """Initial eigenvalues Λ (n,) complex128 and the matching eigenvectors V_keep (P, n), P = 2n under conj_sym.

    ``init="paper"`` (docs/essm.md, 'Initialisation'): Hermitian eigendecomposition of -i(A^N + I/2) (each
    eigenvector's phase fixed, ``eigh_fixed_phase``: the same V on every machine), λ = -1/2 + iω; with conj_sym the n eigenvalues with ω > 0 (one per conjugate pair, ascending ω), else all
    P = n of them.
    ``init="official"`` (the released code): general ``torch.linalg.eig`` of -i A^N, then λ = -1/2 + i·eig
    (so Re λ = -1), the first n in LAPACK order, then -|·| on real and imaginary parts. LAPACK's order is
    implementation-dependent and may keep both members of a pair; this reproduces the code, not a better init.
    """
    if n < 1:
        raise ValueError(f"n (modes per head) must be >= 1, got {n}")
    choice("init", init, INITS)
    size = 2 * n if conj_sym else n
    normal = hippo_legs_normal(size)
    if init == "paper":
        skew = normal + 0.5 * torch.eye(size, dtype=torch.float64)
        omega, V = eigh_fixed_phase(-1j * skew.to(torch.complex128))  # ascending real ω, unitary V
        keep = slice(size - n, size)  # conj_sym: the n largest ω (> 0); otherwise all of them
        lam = torch.complex(torch.full((n,), -0.5, dtype=torch.float64), omega[keep])
        return lam, V[:, keep]
    eig, V = torch.linalg.eig(-1j * normal.to(torch.complex128))
    lam = -0.5 + 1j * eig[:n]
    lam = torch.complex(-lam.real.abs(), -lam.imag.abs())
    return lam, V[:, :n]


def trunc_normal_init(*shape: int) -> torch.Tensor:
    """N(0, 1) truncated to [-2, 2], float64 on the CPU (drawn from the global generator)."""
    return nn.init.trunc_normal_(torch.empty(*shape, dtype=torch.float64), 0.0, 1.0, -2.0, 2.0)


def log_uniform_log_dt(*shape: int, dt_min: float, dt_max: float) -> torch.Tensor:
    """log Δ drawn log-uniform on [dt_min, dt_max] (App. B.3), float64 on the CPU (the global generator)."""
    return torch.rand(*shape, dtype=torch.float64) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)


def essm_layer_param_count(d_model: int, d_state: int, n_heads: int, glu: str = "half_glu1",
                           norm: bool = True) -> int:
    """docs/essm.md, 'Parameter counts': 2N (Λ) + N (log Δ) + NH/S (B) + MN/S (C) + M (D) + [S>1](M²+M)
    + k_glu(M²+M) [+ 2H norm]."""
    H = M = d_model
    N, S = d_state, n_heads
    k_glu = {"half_glu1": 1, "half_glu2": 1, "full_glu": 2}.get(glu, 0)
    return (3 * N + N * H // S + M * N // S + M + (S > 1) * (M * M + M) + k_glu * (M * M + M)
            + (2 * H if norm else 0))


# ---- the layer -------------------------------------------------------------------------------------------


class SSMLayerBase(nn.Module):
    """What every SSM layer of the eSSM paper shares around its core (App. E.1): the input checks and padding mask
    of the forward, the mixing after the core (pre-activation, head mixer, gate / GLU, dropout) and the run-time
    Δ scale. A subclass builds its parameters, calls ``_init_mixing`` and defines ``ssm`` (B, H, L) -> (B, H, L).

    Attributes a subclass sets: ``d_model``, ``dt_scale``, ``glu``, ``pre_act``, ``channels_last``.
    """

    def _init_mixing(self, n_heads: int, dropout: float, dd: dict) -> None:
        """The layers after the core (App. E.1): head mixer (S > 1), gate (and ``out``) for ``self.glu``, dropout."""
        width = self.d_model
        self.head_mixer = nn.Linear(width, width, **dd) if n_heads > 1 else None
        self.gate = nn.Linear(width, width, **dd) if self.glu in ("half_glu1", "half_glu2", "full_glu") else None
        self.out = nn.Linear(width, width, **dd) if self.glu == "full_glu" else None
        self.drop = nn.Dropout(dropout)

    def _reset_mixing(self) -> None:
        for linear in (self.head_mixer, self.gate, self.out):
            if linear is not None:
                linear.reset_parameters()

    def _dt_scale(self, dt_scale: Optional[float]) -> float:
        scale = self.dt_scale if dt_scale is None else dt_scale
        if isinstance(scale, torch.Tensor) or not scale > 0:
            raise ValueError(f"dt_scale must be a positive number, got {scale!r}")
        return float(scale)

    def ssm(self, u: torch.Tensor, dt_scale: Optional[float] = None) -> torch.Tensor:
        """The core before any mixing: (B, H, L) channels-first -> (B, H, L)."""
        raise NotImplementedError(f"{type(self).__name__} must define ssm()")

    def mix(self, y: torch.Tensor) -> torch.Tensor:
        """Pre-activation, head mixer (S > 1), activation / gate, on (..., H) channels-last (App. E.1)."""
        if self.pre_act == "leakyrelu":
            y = F.leaky_relu(y, LEAKY_SLOPE)
        elif self.pre_act == "gelu":
            y = F.gelu(y)
        if self.head_mixer is not None:
            y = self.head_mixer(self.drop(y))
        if self.glu == "leakyrelu":
            return self.drop(F.leaky_relu(y, LEAKY_SLOPE))
        a = self.drop(F.gelu(y))
        if self.glu == "half_glu1":
            return a * torch.sigmoid(self.gate(a))
        if self.glu == "half_glu2":
            return y * torch.sigmoid(self.gate(a))
        if self.glu == "full_glu":
            return self.out(a) * torch.sigmoid(self.gate(a))
        return a  # "gelu"

    def forward(self, x: torch.Tensor, dt_scale: Optional[float] = None,
                padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: (B, L, H) if ``channels_last`` else (B, H, L); same layout out.

        dt_scale: overrides the module's ``dt_scale`` for this call. padding_mask [X]: (B, L) bool, True at
        padded steps, which are zeroed before the core (``ssm``) so they do not leak into valid outputs
        (docs/essm.md, 'Padding mask').
        """
        channel_dim = 2 if self.channels_last else 1
        if (not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[channel_dim] != self.d_model
                or x.shape[3 - channel_dim] < 1):
            what = "(B, L, H)" if self.channels_last else "(B, H, L)"
            got = shape_or_type(x)
            raise ValueError(f"x must have shape {what} with H={self.d_model} and L >= 1, got {got}")
        u = x.transpose(1, 2) if self.channels_last else x
        if padding_mask is not None:
            if padding_mask.shape != (u.shape[0], u.shape[2]):
                raise ValueError(f"padding_mask must have shape (B, L) = {(u.shape[0], u.shape[2])}, "
                                 f"got {tuple(padding_mask.shape)}")
            u = u.masked_fill(padding_mask[:, None, :].to(torch.bool), 0.0)
        y = self.mix(self.ssm(u, dt_scale).transpose(1, 2))
        return y if self.channels_last else y.transpose(1, 2)


class ESSM(SSMLayerBase):
    """Multi-head eSSM layer (paper Sec. 4.3-4.6), (B, L, H) -> (B, L, H) (or channels-first (B, H, L) -> (B, H, L)).

    Args:
        d_model: H = M, the width (the paper always has M = H).
        d_state: N, total number of stored complex modes over all heads [D: H]; n = N/S per head. Under
            ``conj_sym`` each stands for a pair (λ, λ*), the real state size is 2N (docs/essm.md, 'Heads and
            state size').
        n_heads: S, diagonal blocks over contiguous channel groups; S must divide H and N [D: 1].
        bidirectional: add the time-flipped kernel on the future samples, no extra parameters (Sec. 4.4) [D: True].
        conj_sym: output scale γ = 2, HiPPO at size 2n per head ('Heads and state size') [D: True].
        dt_min, dt_max: log-uniform range of the initial Δ, one per mode [D: 1e-3, 1e-1] (App. B.3).
        dt_scale: multiplies Δ at run time (zero-shot resampling, Path-X; 'Δ scaling') [D: 1]. Also a forward kwarg.
        real_clip: ε in Re λ = min(θ_re, -ε) [D: 1e-4, the official value; the paper text says 1e-3].
        discretization: "zoh" [D] or "gbt" with ``gbt_alpha`` (Eq. 4, App. B.2).
        C_init: "trunc_normal" [D] or "hippo" (ListOps, App. E.2.1).
        init: "paper" [D] or "official" for Λ and the HiPPO eigenvectors ('Initialisation').
        glu: the activation after the head mixer (App. E.1): "half_glu1" [D], "half_glu2", "full_glu", or
            "gelu" / "leakyrelu" without a gate.
        pre_act: None/"identity" [D], "leakyrelu" or "gelu", before the head mixer ('ListOps presets').
        dropout: elementwise dropout before the head mixer (S > 1) and after the GELU ('Layer forward pass')
            [D: 0].
        channels_last: inputs and outputs are (B, L, H) when True [D], (B, H, L) when False.

    Parameters: ``Lambda_re``, ``Lambda_im`` (S, n) (raw θ; Re λ is clipped in the forward), ``log_dt`` (S, n),
    ``B`` (S, n, h), ``C`` (S, m, n), ``D`` (S, m); ``head_mixer`` Linear(H, H) when S > 1; ``gate`` Linear(H, H)
    (and ``out`` Linear(H, H) for full_glu). ``no_weight_decay_names`` lists the SSM core parameters
    (docs/essm.md, 'Optimiser and schedules').

    Extensions [X]: ``step`` / ``init_state`` (causal streaming, 'Recurrent mode'), ``padding_mask`` in the forward
    (zeroes padded steps before the convolution, 'Padding mask'), ``dt_scale`` as a forward kwarg.
    """

    no_weight_decay_names = SSM_PARAM_NAMES

    def __init__(
            self,
            d_model: int,
            d_state: Optional[int] = None,
            n_heads: int = 1,
            bidirectional: bool = True,
            conj_sym: bool = True,
            dt_min: float = 1e-3,
            dt_max: float = 1e-1,
            dt_scale: float = 1.0,
            real_clip: float = 1e-4,
            discretization: str = "zoh",
            gbt_alpha: float = 0.5,
            C_init: str = "trunc_normal",
            init: str = "paper",
            glu: str = "half_glu1",
            pre_act: Optional[str] = None,
            dropout: float = 0.0,
            channels_last: bool = True,
            device=None,
            dtype=None,
    ):
        super().__init__()
        d_state = d_model if d_state is None else d_state
        for name, value in (("d_model", d_model), ("d_state", d_state), ("n_heads", n_heads)):
            positive_int(name, value)
        if d_model % n_heads or d_state % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model} and d_state={d_state} "
                             "(h = H/S channels and n = N/S modes per head)")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        if not dt_scale > 0:
            raise ValueError(f"dt_scale must be > 0, got {dt_scale}")
        if not real_clip > 0:
            raise ValueError(f"real_clip must be > 0, got {real_clip}")
        choice("discretization", discretization, DISCRETIZATIONS)
        choice("C_init", C_init, C_INITS)
        choice("init", init, INITS)
        choice("glu", glu, GLUS)
        choice("pre_act", pre_act, PRE_ACTIVATIONS)
        probability("dropout", dropout)
        dd = {"device": device, "dtype": dtype}
        self.d_model = d_model
        self.d_state = d_state
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads  # h = m
        self.head_state = d_state // n_heads  # n
        self.bidirectional = bool(bidirectional)
        self.conj_sym = bool(conj_sym)
        self.dt_min, self.dt_max = float(dt_min), float(dt_max)
        self.dt_scale = float(dt_scale)
        self.real_clip = float(real_clip)
        self.discretization = discretization
        self.gbt_alpha = float(gbt_alpha)
        self.C_init = C_init
        self.init = init
        self.glu = glu
        self.pre_act = None if pre_act == "identity" else pre_act
        self.channels_last = bool(channels_last)

        S, n, h = n_heads, self.head_state, self.head_dim
        self.Lambda_re = nn.Parameter(torch.empty(S, n, **dd))
        self.Lambda_im = nn.Parameter(torch.empty(S, n, **dd))
        self.log_dt = nn.Parameter(torch.empty(S, n, **dd))
        self.B = nn.Parameter(torch.empty(S, n, h, **dd))
        self.C = nn.Parameter(torch.empty(S, h, n, **dd))
        self.D = nn.Parameter(torch.empty(S, h, **dd))
        self._init_mixing(n_heads, dropout, dd)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """docs/essm.md, 'Initialisation': HiPPO Λ (the same in every head), HiPPO-projected B (one draw shared
        by the heads), C trunc-normal per head (or HiPPO-projected), D = 1, log Δ log-uniform per head and mode;
        Linear layers keep PyTorch's default init (the official code does not change it)."""
        S, n, h = self.n_heads, self.head_state, self.head_dim
        lam, V = hippo_diagonal_init(n, self.conj_sym, self.init)  # (n,), (P, n)
        size = V.shape[0]
        B0 = torch.complex(trunc_normal_init(size, h), trunc_normal_init(size, h))
        B = (V.conj().T @ B0).real  # (n, h)
        if self.C_init == "hippo":
            C0 = torch.complex(trunc_normal_init(S, h, size), trunc_normal_init(S, h, size))
            C = (C0 @ V).real  # (S, m, n)
        else:
            C = trunc_normal_init(S, h, n)
        log_dt = log_uniform_log_dt(S, n, dt_min=self.dt_min, dt_max=self.dt_max)
        for param, value in ((self.Lambda_re, lam.real.expand(S, n)), (self.Lambda_im, lam.imag.expand(S, n)),
                             (self.log_dt, log_dt), (self.B, B.expand(S, n, h)), (self.C, C)):
            param.copy_(value.to(param.dtype))
        self.D.fill_(1.0)
        self._reset_mixing()

    def extra_repr(self) -> str:
        return (f"{self.d_model}, d_state={self.d_state}, n_heads={self.n_heads}, "
                f"bidirectional={self.bidirectional}, conj_sym={self.conj_sym}, glu={self.glu!r}"
                + (f", pre_act={self.pre_act!r}" if self.pre_act else "")
                + (f", discretization={self.discretization!r}" if self.discretization != "zoh" else "")
                + (f", dt_scale={self.dt_scale}" if self.dt_scale != 1.0 else "")
                + f", channels_last={self.channels_last}")

    # ---- the SSM core --------------------------------------------------------------------------------------

    @property
    def lambda_re(self) -> torch.Tensor:
        """Re λ = min(θ_re, -ε) (the clipping f_+ of paper Sec. 4.5; zero gradient while θ_re > -ε)."""
        return self.Lambda_re.clamp(max=-self.real_clip)

    def ssm(self, u: torch.Tensor, dt_scale: Optional[float] = None) -> torch.Tensor:
        """The core before any mixing: (B, H, L) channels-first -> (B, H, L), heads concatenated (Eq. 13-14)."""
        return ops.essm_conv(u, self.lambda_re, self.Lambda_im, self.log_dt, self.B, self.C, self.D,
                             bidirectional=self.bidirectional, conj_sym=self.conj_sym,
                             dt_scale=self._dt_scale(dt_scale), discretization=self.discretization,
                             gbt_alpha=self.gbt_alpha)

    # ---- causal streaming [X] (docs/essm.md, 'Recurrent mode') --------------------------------------------

    def init_state(self, batch: int, device=None) -> torch.Tensor:
        """Zero complex state σ (batch, S, n) for :meth:`step` (complex64, complex128 for float64 params)."""
        dtype = torch.complex128 if self.B.dtype == torch.float64 else torch.complex64
        return torch.zeros(batch, self.n_heads, self.head_state, dtype=dtype, device=device or self.B.device)

    def step(self, x: torch.Tensor, state: torch.Tensor,
             dt_scale: Optional[float] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """One causal time step (docs/essm.md, 'Recurrent mode'): x (B, H) -> (y (B, H), new state). Only for
        ``bidirectional=False``.

        σ_t = e^{λΔ} ⊙ σ_{t-1} + g ⊙ (B u_t),  y_t = γ C Re(σ_t) + D ⊙ u_t, then the same mixing as the forward.
        """
        if self.bidirectional:
            raise ValueError("step() needs a causal layer (bidirectional=False): a bidirectional layer has no "
                             "recurrent mode")
        if x.dim() != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"x must have shape (B, H) with H={self.d_model}, got {tuple(x.shape)}")
        acc = torch.float64 if self.B.dtype == torch.float64 else torch.float32
        with no_autocast(x.device.type):
            g, z = essm_discretize(self.lambda_re.to(acc), self.Lambda_im.to(acc), self.log_dt.to(acc),
                                   self._dt_scale(dt_scale), self.discretization, self.gbt_alpha)
            u = x.to(acc).reshape(x.shape[0], self.n_heads, self.head_dim)
            v = torch.einsum("snh,bsh->bsn", self.B.to(acc), u)
            state = torch.exp(z) * state + g * v
            gamma = 2.0 if self.conj_sym else 1.0
            y = gamma * torch.einsum("smn,bsn->bsm", self.C.to(acc), state.real) + self.D.to(acc) * u
        return self.mix(y.reshape(x.shape[0], self.d_model).to(x.dtype)), state


# ---- the residual block ------------------------------------------------------------------------------------


class BatchNormNLC(nn.BatchNorm1d):
    """BatchNorm1d over the last (channel) dimension of a channels-last (B, ..., C) tensor: statistics over the
    batch and every other position (time, or the pixels of an (B, H, W, C) map). Same state_dict as BatchNorm1d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # as (positions, C) rows, BatchNorm1d's 2-D form: no transposed views, whose eval-mode backward layout
        # AOTAutograd's fake tensors mispredict (torch.compile failed with "view size is not compatible")
        return super().forward(x.reshape(-1, x.shape[-1])).reshape(x.shape)


def make_norm(kind: str, dim: int, device=None, dtype=None) -> nn.Module:
    """The block norm over channels of channels-last input: "batch" (:class:`BatchNormNLC`) or "layer"."""
    choice("norm", kind, NORMS)
    cls = BatchNormNLC if kind == "batch" else nn.LayerNorm
    return cls(dim, device=device, dtype=dtype)


class ESSMBlock(nn.Module):
    """Residual eSSM block (paper Sec. 4.6; docs/essm.md, 'Block and model'), (B, L, H) -> (B, L, H)
    (channels-first with ``channels_last=False``).

        z = norm(x) if prenorm else x;  z = Dropout1d(eSSM(z));  x = x + drop_path(z);  x = norm(x) if not prenorm

    Args:
        dim: H.
        norm: "batch" (BatchNorm1d over the channels, statistics over batch and time) [D] or "layer".
        prenorm: normalise the branch input (True) or the residual sum (False) [D: False, the paper's "BN after
            eSSM"; Table 10 sets it per task].
        dropout: the model dropout: elementwise inside the layer (twice) and channel-tied ``Dropout1d`` on the
            layer output ('Layer forward pass') [D: 0].
        drop_path: stochastic depth on the branch [X] [D: 0, not in the paper].
        **ssm_kwargs: the :class:`ESSM` options (d_state, n_heads, bidirectional, conj_sym, glu, ...).
    """

    def __init__(
            self,
            dim: int,
            norm: str = "batch",
            prenorm: bool = False,
            dropout: float = 0.0,
            drop_path: float = 0.0,
            channels_last: bool = True,
            device=None,
            dtype=None,
            **ssm_kwargs,
    ):
        super().__init__()
        probability("drop_path", drop_path)
        dd = {"device": device, "dtype": dtype}
        self.dim = dim
        self.prenorm = bool(prenorm)
        self.channels_last = bool(channels_last)
        self.drop_path_prob = float(drop_path)
        self.norm = make_norm(norm, dim, **dd)
        self.ssm = ESSM(dim, dropout=dropout, channels_last=True, **dd, **ssm_kwargs)
        self.drop = nn.Dropout1d(dropout)

    def extra_repr(self) -> str:
        return f"prenorm={self.prenorm}, drop_path={self.drop_path_prob}, channels_last={self.channels_last}"

    def forward(self, x: torch.Tensor, dt_scale: Optional[float] = None,
                padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not self.channels_last:
            x = x.transpose(1, 2)
        z = self.norm(x) if self.prenorm else x
        z = self.ssm(z, dt_scale=dt_scale, padding_mask=padding_mask)
        z = self.drop(z.transpose(1, 2)).transpose(1, 2)  # drops whole channels across time
        x = x + drop_path(z, self.drop_path_prob, self.training)
        if not self.prenorm:
            x = self.norm(x)
        return x if self.channels_last else x.transpose(1, 2)
