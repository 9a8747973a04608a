"""MambaMixer / QSMixer building blocks (Behrouz et al. 2024, "MambaMixer", arXiv:2403.19888 v2), paper Sec. 2;
our choices where the paper is silent: docs/mambamixer.md (tags [D], [X], [P1] explained there).

    SelectiveTokenMixer    Sec. 2.1, Eq. 3-5: x̄ = SiLU(DWConv(W_in u)), gate = W_g[DWConv_k(u) ‖ …],
                           y = W_out(mix(x̄) ⊙ SiLU(gate)) with mix = causal S6 ('s6'), forward+backward S6
                           ('s6_bi'), scalar-A QS ('qs'), or an input-independent S4D ('s4') / HiPPO ('hippo') SSM
                           (Table 3's token mixers, layers/lti.py).
    SelectiveChannelMixer  Sec. 2.1, Eq. 8, 10: QS along the channel axis (channels are the sequence, tokens the
                           features), gated per token by SiLU(u W_2ᵀ).
    ForwardBackwardChannelMixer  the naive alternative (Table 4 "w/ f+b"): two Mamba-style S6 blocks along the
                           channels, one per direction, summed.
    MambaMixerBlock        Sec. 2.1: pre-norm residual token mixer then channel mixer, DropPath on both branches.
    QSMixerBlock           Sec. 2.2, Eq. 9-10: the same with the QS token mixer (scalar A per head).
    TimeVariateMixerBlock  App. H.3 (TSM2 / TSQS): the same two mixers on patched time series (batch, M, P, dim), the
                           token mixer along the patches of each variate, the channel mixer along the variates.
    MixerStack             a stack of those blocks, with v1's weighted averaging of earlier features as an option
                           (arXiv 2403.19888 v1, Sec. 3.2, ``dense_wavg``; off = the plain residual stack).

All layers take and return (batch, L, dim). The scans are ``ssm_plugins.ops.selective_scan`` and
``ssm_plugins.ops.qs_mix``. Parameter initialisation follows Mamba (App. G; docs/mambamixer.md, 'S6 and Mamba
defaults'): Δ bias = softplus⁻¹ of a log-uniform draw in [1e-3, 1e-1] (floor 1e-4), dt up-projection
uniform(±dt_rank^-1/2), A_log = log(1..N) (diagonal A) or log U[1, 16] (scalar A), D = 1, no bias on projections,
bias on the convolutions.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from .. import ops
from ._common import (check_tokens, choice, drop_path, is_positive_int, make_mixer_norm, positive_int, probability,
                      shape_or_type)
# The Switch of Scans and the multi-resolution conv branch live in their own modules; their names stay importable
# from here, where they were defined until 2026-12-02.
from .lti import LTI_KINDS, LTITokenSSM
from .multires_conv import ConvTokenInteraction, MultiResolutionConvGate, SpatialPriorModule  # noqa: F401
from .switch_of_scans import (SCAN_NAMES, SCAN_SETS, SwitchOfScans, gather_tokens, resolve_scans,  # noqa: F401
                              scan_orders)

__all__ = ["SelectiveTokenMixer", "SelectiveChannelMixer", "ForwardBackwardChannelMixer", "MambaMixerBlock",
           "QSMixerBlock", "TimeVariateMixerBlock", "MixerStack", "resample_token_axis"]

_TOKEN_MIXERS = ("s6", "s6_bi", "qs") + LTI_KINDS
_SELECTION_INPUTS = ("block_input", "conv_output")
_CHANNEL_PARAMS = ("scalar", "diag")
_QS_SHIFTS = ("exact", "hydra")


def _dt_bias(size, dt_min=1e-3, dt_max=1e-1, dt_floor=1e-4):
    """Mamba's Δ bias: softplus⁻¹ of Δ ~ log-uniform[dt_min, dt_max], clamped below at dt_floor (Mamba's init)."""
    dt = torch.exp(torch.rand(size) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = dt.clamp(min=dt_floor)
    return dt + torch.log(-torch.expm1(-dt))  # inverse of softplus


def _a_log_diag(channels, d_state):
    """S4D-real init A = -(1..N) for every channel, stored as log."""
    return torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(channels, 1)


def _a_log_scalar(heads):
    """Mamba-2 init: A = -a with a ~ U[1, 16] per head, stored as log."""
    return torch.log(torch.empty(heads).uniform_(1.0, 16.0))


class _DWConv1d(nn.Module):
    """Depthwise conv over the sequence of a (batch, L, C) tensor; causal (left) or 'same' padding."""

    def __init__(self, channels, kernel_size, causal):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=True)
        k = kernel_size - 1
        self.pad = (k, 0) if causal else (k // 2, k - k // 2)

    def forward(self, x):
        return F.conv1d(F.pad(x.transpose(1, 2), self.pad), self.conv.weight, self.conv.bias,
                        groups=self.conv.groups).transpose(1, 2)


class _S6Direction(nn.Module):
    """One direction's S6 selection parameters (Eq. 4): x_proj -> (dt_low, B, C), dt_proj, dt_bias, A_log."""

    def __init__(self, sel_dim, inner, d_state, dt_rank):
        super().__init__()
        self.dt_rank, self.d_state = dt_rank, d_state
        self.x_proj = nn.Linear(sel_dim, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, inner, bias=False)
        nn.init.uniform_(self.dt_proj.weight, -dt_rank ** -0.5, dt_rank ** -0.5)
        self.dt_bias = nn.Parameter(_dt_bias(inner))
        self.A_log = nn.Parameter(_a_log_diag(inner, d_state))

    def selection(self, sel):
        """sel (batch, L, sel_dim) -> dt (batch, inner, L), B, C (batch, N, L) in selective_scan's layout."""
        dt_low, B, C = self.x_proj(sel).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        return self.dt_proj(dt_low).transpose(1, 2), B.transpose(1, 2), C.transpose(1, 2)


class _QSDirection(nn.Module):
    """One direction's scalar-A selection parameters (Sec. 2.2; docs/mambamixer.md, 'Scalar-A parameterisation'):
    per-head dt, shared B and C (ngroups = 1)."""

    def __init__(self, sel_dim, heads, d_state):
        super().__init__()
        self.heads, self.d_state = heads, d_state
        self.x_proj = nn.Linear(sel_dim, heads + 2 * d_state, bias=False)
        self.dt_bias = nn.Parameter(_dt_bias(heads))
        self.A_log = nn.Parameter(_a_log_scalar(heads))

    def selection(self, sel):
        """sel (..., L, sel_dim) -> dt (..., L, H), B, C (..., L, N)."""
        return self.x_proj(sel).split([self.heads, self.d_state, self.d_state], dim=-1)


class SelectiveTokenMixer(nn.Module):
    """Selective Token Mixer (paper Sec. 2.1, Eq. 3-5): mixes the L tokens of a normalised (batch, L, dim) input.

        x̄ = SiLU(DWConv1d_{d_conv}(W_in u))                         (batch, L, E), E = expand·dim
        g = W_g [DWConv1d_{k_1}(u) ‖ … ‖ DWConv1d_{k_T}(u)]          (batch, L, E)
        y = W_out( mix(x̄; Δ, A, B, C) ⊙ SiLU(g) )                   (batch, L, dim)

    Args:
        dim: model width D.
        d_state: N [X Mamba: 16]. expand: E / D [2]. d_conv: main-branch conv kernel [4].
        dt_rank: rank of the Δ projection, "auto" = ⌈D/16⌉ (token_mixer 's6'/'s6_bi').
        gate_kernels: depthwise kernels of the multi-resolution gate [D: (3, 5, 7), docs/mambamixer.md
            'Selective Token Mixer']; (1,) makes the gate a linear map (Remark 1, Mamba's gate).
        token_mixer: 's6' (causal S6, D skip), 's6_bi' (forward + backward S6 with per-direction
            Δ/B/C/A and shared in/conv/gate/out projections, D skip), 'qs' (scalar-A QS, Sec. 2.2), or the
            linear time-invariant 's4' (S4D-Lin) / 'hippo' (fixed HiPPO-LegS A, B) of Table 3, D skip, causal or
            bidirectional (``LTITokenSSM``; no selection) [D: 's6'].
        selection_input: Δ/B/C from 'block_input' u (App. F.4) or Mamba's 'conv_output' x̄ [D: 'block_input'].
        causal: left padding of all convolutions (causal data); False = 'same' padding and, for 's4' /
            'hippo', a second kernel on the reversed sequence [D: True for 's6', 's4', 'hippo', False for
            's6_bi'/'qs' when None].
        headdim: P, features per head of the 'qs' mixer [D: 64]; E must be divisible by it.
        qs_shift: strict part of QS, 'exact' (Eq. 8) or 'hydra' [D: 'exact'].

    Parameters named ``A_log``, ``D``, ``dt_bias`` and ``gamma_bias`` are listed in ``no_weight_decay_names``
    (as suffixes; the per-direction modules are ``fwd`` and ``bwd``).
    """

    @property
    def no_weight_decay_names(self):
        names = ("D", "gamma_bias", "fwd.A_log", "fwd.dt_bias", "bwd.A_log", "bwd.dt_bias")
        lti = tuple(f"lti.{n}" for n in self.lti.no_weight_decay_names) if hasattr(self, "lti") else ()
        return tuple(n for n in names if _has_param(self, n)) + lti

    def __init__(self, dim: int, d_state: int = 16, expand: int = 2, d_conv: int = 4, dt_rank="auto",
                 gate_kernels: Sequence[int] = (3, 5, 7), token_mixer: str = "s6",
                 selection_input: str = "block_input", causal=None, headdim: int = 64, qs_shift: str = "exact"):
        super().__init__()
        for name, value in (("dim", dim), ("d_state", d_state), ("expand", expand), ("d_conv", d_conv),
                            ("headdim", headdim)):
            positive_int(name, value)
        choice("token_mixer", token_mixer, _TOKEN_MIXERS)
        choice("selection_input", selection_input, _SELECTION_INPUTS)
        choice("qs_shift", qs_shift, _QS_SHIFTS)
        gate_kernels = tuple(gate_kernels)
        if not gate_kernels or not all(is_positive_int(k) for k in gate_kernels):
            raise ValueError(f"gate_kernels must be a non-empty sequence of positive ints, got {gate_kernels!r}")
        if dt_rank == "auto":
            dt_rank = math.ceil(dim / 16)
        positive_int("dt_rank", dt_rank)
        inner = expand * dim
        if token_mixer == "qs" and inner % headdim != 0:
            raise ValueError(f"headdim ({headdim}) must divide the inner width expand*dim = {inner} for token_mixer='qs'")
        if causal is None:
            causal = token_mixer in ("s6",) + LTI_KINDS
        if causal and token_mixer in ("s6_bi", "qs"):
            raise ValueError(f"causal=True needs token_mixer 's6', 's4' or 'hippo', got token_mixer={token_mixer!r} "
                             "(non-causal)")
        self.dim, self.inner, self.d_state = dim, inner, d_state
        self.token_mixer, self.selection_input, self.causal = token_mixer, selection_input, bool(causal)
        self.qs_shift, self.headdim = qs_shift, headdim

        self.in_proj = nn.Linear(dim, inner, bias=False)
        self._build_branches(d_conv, gate_kernels)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        sel_dim = dim if selection_input == "block_input" else inner
        if token_mixer == "qs":
            heads = inner // headdim
            self.fwd = _QSDirection(sel_dim, heads, d_state)
            self.bwd = _QSDirection(sel_dim, heads, d_state)
            # Free diagonal γ_{t,h} = d_h + w_hᵀ x̄_t (Hydra-like; docs/mambamixer.md 'QS operator'), d = 1, w = 0.
            self.gamma_bias = nn.Parameter(torch.ones(heads))
            self.gamma_proj = nn.Linear(inner, heads, bias=False)
            nn.init.zeros_(self.gamma_proj.weight)
        elif token_mixer in LTI_KINDS:
            self.lti = LTITokenSSM(inner, d_state, kind=token_mixer, bidirectional=not self.causal)
            self.D = nn.Parameter(torch.ones(inner))
        else:
            self.fwd = _S6Direction(sel_dim, inner, d_state, dt_rank)
            self.bwd = _S6Direction(sel_dim, inner, d_state, dt_rank) if token_mixer == "s6_bi" else None
            self.D = nn.Parameter(torch.ones(inner))

    def _build_branches(self, d_conv: int, gate_kernels: Sequence[int]):
        """The main branch's convolution and the gate's (``forward`` reads them); a subclass for other token
        layouts builds its own (ViM2's 2-D grid)."""
        self.conv = _DWConv1d(self.inner, d_conv, self.causal)
        self.gate_convs = nn.ModuleList(_DWConv1d(self.dim, k, self.causal) for k in gate_kernels)
        self.gate_proj = nn.Linear(len(gate_kernels) * self.dim, self.inner, bias=False)

    def extra_repr(self):
        return (f"dim={self.dim}, inner={self.inner}, d_state={self.d_state}, token_mixer={self.token_mixer!r}, "
                f"selection_input={self.selection_input!r}, causal={self.causal}")

    def mix(self, xbar, sel):
        """The sequence mixer on x̄ (batch, L, E) with selection input sel (batch, L, ·); returns (batch, L, E)."""
        if self.token_mixer == "qs":
            batch, length, _ = xbar.shape
            dt, B, C = self.fwd.selection(sel)
            dt_r, B_r, C_r = self.bwd.selection(sel)
            gamma = self.gamma_bias + self.gamma_proj(xbar)
            y = ops.qs_mix(xbar.reshape(batch, length, -1, self.headdim), dt, -torch.exp(self.fwd.A_log), B, C,
                           dt_r, -torch.exp(self.bwd.A_log), B_r, C_r, gamma, dt_bias=self.fwd.dt_bias,
                           dt_bias_rev=self.bwd.dt_bias, dt_softplus=True, qs_shift=self.qs_shift)
            return y.reshape(batch, length, -1)
        if self.token_mixer in LTI_KINDS:
            return self.lti(xbar) + xbar * self.D
        u = xbar.transpose(1, 2)
        dt, B, C = self.fwd.selection(sel)
        y = ops.selective_scan(u, dt, -torch.exp(self.fwd.A_log), B, C, self.D, delta_bias=self.fwd.dt_bias,
                               delta_softplus=True)
        if self.bwd is not None:
            dt_r, B_r, C_r = self.bwd.selection(sel)  # the scan of the flipped sequence, flipped back: no copies
            y = y + ops.selective_scan(u, dt_r, -torch.exp(self.bwd.A_log), B_r, C_r, delta_bias=self.bwd.dt_bias,
                                       delta_softplus=True, reverse=True)
        return y.transpose(1, 2)

    def forward(self, u):
        """u: normalised block input (batch, L, dim) -> (batch, L, dim)."""
        check_tokens("u", u, self.dim)
        xbar = F.silu(self.conv(self.in_proj(u)))
        gate = self.gate_proj(torch.cat([conv(u) for conv in self.gate_convs], dim=-1))
        sel = u if self.selection_input == "block_input" else xbar
        return self.out_proj(self.mix(xbar, sel) * F.silu(gate))


def resample_token_axis(weight, token_grid, num_prefix_tokens, grid_size):
    """A (out, num_prefix_tokens + h0*w0) token-axis weight for a (h, w) grid (docs/mambamixer.md, 'Channel mixer
    at other token counts'): prefix columns kept, the h0*w0 columns resized as maps and scaled by h0*w0/(h*w);
    unchanged at (h0, w0). An axis that shrinks is box-averaged (each new column the mean of the columns it covers,
    so the rescaled weight keeps w·z for a z constant over them); one that grows is interpolated bilinearly. Read
    at 2 x 2 by bilinear sampling alone, a 14 x 14 map kept 4 of its 196 columns, multiplied by 49: an untrained
    channel mixer then returned 60-560 times its input."""
    h0, w0 = token_grid
    h, w = grid_size
    if (h, w) == (h0, w0):
        return weight
    prefix, maps = weight[:, :num_prefix_tokens], weight[:, num_prefix_tokens:].reshape(1, -1, h0, w0)
    if h < h0 or w < w0:
        maps = F.adaptive_avg_pool2d(maps, (min(h, h0), min(w, w0)))
    if h > h0 or w > w0:
        maps = F.interpolate(maps, size=(h, w), mode="bilinear", align_corners=False)
    maps = maps.reshape(weight.shape[0], -1) * (h0 * w0 / (h * w))
    return torch.cat([prefix, maps], dim=1)


def _check_token_grid(token_grid, num_prefix_tokens, num_tokens):
    if token_grid is None:
        return None
    token_grid = tuple(int(v) for v in token_grid)
    if len(token_grid) != 2 or num_prefix_tokens + token_grid[0] * token_grid[1] != num_tokens:
        raise ValueError(f"token_grid {token_grid} must be (h0, w0) with num_prefix_tokens + h0*w0 = "
                         f"num_tokens = {num_tokens}")
    return token_grid


class SelectiveChannelMixer(nn.Module):
    """Selective Channel Mixer (paper Sec. 2.1, Eq. 10): non-causal QS along the channel axis of a normalised
    (batch, L, dim) input.

    The sequence is the D channels and each channel position c carries the L-vector z_c = u[:, :, c] of its
    tokens, so the selection weights act on the token axis (size ``num_tokens``):

        B_c = W_B z_c, C_c = W_C z_c ∈ R^N,  Δ_c = softplus(w_Δ·z_c + b_Δ)    (one set per direction)
        Y = Q Z (Q ∈ R^{D×D} per sample, strictly lower/upper parts from the two scans, free diagonal γ ∈ R^D)
        y = Yᵀ ⊙ SiLU(u W_2ᵀ)

    Args:
        dim: number of channels D (the scanned sequence length).
        num_tokens: L0, the token count the selection weights are built for; inputs must have it.
        d_state: N [16].
        channel_qs_param: 'scalar' (scalar A, one head over all L features; docs/mambamixer.md, 'Scalar-A
            parameterisation') or 'diag' (per-token Δ with low rank ⌈L0/16⌉ and diagonal A of shape (L0, N),
            Eq. 8's S6 form) [D: 'scalar'].
        qs_shift: 'exact' or 'hydra' [D: 'exact'].
        token_grid, num_prefix_tokens: (h0, w0) of the tokens after ``num_prefix_tokens`` prefix (class)
            tokens. When given, ``forward(u, grid_size=(h, w))`` accepts other grids: the token-axis weights are
            resampled (docs/mambamixer.md, 'Channel mixer at other token counts'): prefix columns kept, the h0*w0
            columns reshaped to maps, resized bilinearly and scaled by h0*w0/(h*w); identical at the training grid.
        selection_features: None, or F dividing num_tokens: Δ, B, C are read from each channel's token vector
            averaged down to F features (reshaped (num_tokens / F, F), mean over the first axis) instead of
            from all num_tokens; fewer free weights where the token axis is long (TSM2's variate mixer) [None].

    ``no_weight_decay_names``: the per-direction A_log and dt_bias, and γ.
    """

    no_weight_decay_names = ("gamma", "fwd.A_log", "fwd.dt_bias", "bwd.A_log", "bwd.dt_bias")

    def __init__(self, dim: int, num_tokens: int, d_state: int = 16, channel_qs_param: str = "scalar",
                 qs_shift: str = "exact", token_grid=None, num_prefix_tokens: int = 0, selection_features=None):
        super().__init__()
        token_grid = _check_token_grid(token_grid, num_prefix_tokens, num_tokens)
        if selection_features is not None and (channel_qs_param != "scalar" or token_grid is not None
                                               or num_tokens % selection_features):
            raise ValueError(f"selection_features ({selection_features}) must divide num_tokens ({num_tokens}) "
                             "and needs channel_qs_param='scalar' without token_grid")
        self.selection_features = selection_features
        if token_grid is not None:
            if channel_qs_param != "scalar":
                raise ValueError("token_grid (weight resampling) needs channel_qs_param='scalar'")
        self.token_grid, self.num_prefix_tokens = token_grid, int(num_prefix_tokens)
        for name, value in (("dim", dim), ("num_tokens", num_tokens), ("d_state", d_state)):
            positive_int(name, value)
        choice("channel_qs_param", channel_qs_param, _CHANNEL_PARAMS)
        choice("qs_shift", qs_shift, _QS_SHIFTS)
        self.dim, self.num_tokens, self.d_state = dim, num_tokens, d_state
        self.channel_qs_param, self.qs_shift = channel_qs_param, qs_shift
        if channel_qs_param == "scalar":
            sel_dim = selection_features or num_tokens
            self.fwd = _QSDirection(sel_dim, 1, d_state)
            self.bwd = _QSDirection(sel_dim, 1, d_state)
        else:
            rank = math.ceil(num_tokens / 16)
            self.fwd = _S6Direction(num_tokens, num_tokens, d_state, rank)
            self.bwd = _S6Direction(num_tokens, num_tokens, d_state, rank)
        self.gamma = nn.Parameter(torch.ones(dim))  # static free diagonal (docs/mambamixer.md 'QS operator'), init 1
        self.gate_proj = nn.Linear(dim, dim, bias=False)  # W_2 of Eq. 10, per token (docs: 'Selective Channel Mixer')

    def extra_repr(self):
        return (f"dim={self.dim}, num_tokens={self.num_tokens}, d_state={self.d_state}, "
                f"channel_qs_param={self.channel_qs_param!r}")

    def _resampled(self, weight, grid_size):
        """Token-axis weight (out, num_tokens) for a (h, w) token grid (the 'resample' rule, docs/mambamixer.md)."""
        return resample_token_axis(weight, self.token_grid, self.num_prefix_tokens, grid_size)

    def forward(self, u, grid_size=None):
        """u: normalised input (batch, L, dim) -> (batch, L, dim); L = num_tokens, or num_prefix_tokens + h*w
        with ``grid_size=(h, w)`` when the layer was built with a ``token_grid``."""
        if grid_size is not None and self.token_grid is None:
            raise ValueError("grid_size needs a layer built with token_grid")
        if grid_size is None:
            check_tokens("u", u, self.dim, self.num_tokens, " = num_tokens (the selection weights act on the token axis)")
        else:
            check_tokens("u", u, self.dim, self.num_prefix_tokens + grid_size[0] * grid_size[1],
                         f" = num_prefix_tokens + h*w of grid_size {tuple(grid_size)}")
        z = u.transpose(1, 2)  # (batch, D, L): the sequence is the channels, the features the tokens
        if self.channel_qs_param == "scalar":
            weights = [self.fwd.x_proj.weight, self.bwd.x_proj.weight]
            if grid_size is not None:
                weights = [self._resampled(w, grid_size) for w in weights]
            # both directions' selections (batch, D, 2 + 4N) in one batched matmul that reads z through BLAS's
            # transpose flag (F.linear on z would first copy it)
            weight = torch.cat(weights)
            zs = z if self.selection_features is None else z.unflatten(-1, (-1, self.selection_features)).mean(2)
            sel = torch.bmm(zs, weight.t().expand(u.shape[0], -1, -1))
            dt, B, C, dt_r, B_r, C_r = sel.split([1, self.d_state, self.d_state] * 2, dim=-1)
            y = ops.qs_mix(z.unsqueeze(2), dt, -torch.exp(self.fwd.A_log), B, C, dt_r, -torch.exp(self.bwd.A_log),
                           B_r, C_r, self.gamma[:, None], dt_bias=self.fwd.dt_bias, dt_bias_rev=self.bwd.dt_bias,
                           dt_softplus=True, qs_shift=self.qs_shift)  # (batch, D, 1, L)
            y = y[:, :, 0].transpose(1, 2)
        else:
            # Mamba layout: features (dim) = tokens, sequence = channels; u itself is (batch, L, D).
            dt, B, C = self.fwd.selection(z)  # dt (batch, L, D), B/C (batch, N, D)
            dt_r, B_r, C_r = self.bwd.selection(z)
            y = ops.qs_mix(u, dt, -torch.exp(self.fwd.A_log), B, C, dt_r, -torch.exp(self.bwd.A_log), B_r, C_r,
                           self.gamma.expand(self.num_tokens, self.dim), dt_bias=self.fwd.dt_bias,
                           dt_bias_rev=self.bwd.dt_bias, dt_softplus=True, qs_shift=self.qs_shift)
        return y * F.silu(self.gate_proj(u))


class _ChannelS6Direction(_QSDirection):
    """One direction of the naive f+b channel mixer: a Mamba-style block along the channel axis of (batch, L, dim).

        v = SiLU(CausalConv_k(W_in u))        W_in (dim x dim) per token; one k-tap kernel along the channels,
                                              shared by all tokens [D] (a kernel per token would tie the layer to
                                              the training token count)
        y = S6(v; Δ, a, B, C, D) along the channels (scalar A and one head over the L token features, the
            selection from u as in the QS mixer: the same x_proj, dt_bias, A_log)
        out = y ⊙ SiLU(u W_2ᵀ)
    """

    def __init__(self, dim, num_tokens, d_state, d_conv):
        super().__init__(num_tokens, 1, d_state)
        self.in_proj = nn.Linear(dim, dim, bias=False)
        self.conv = nn.Conv1d(1, 1, d_conv, bias=True)
        self.D = nn.Parameter(torch.ones(1))
        self.gate_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, u, x_proj_weight):
        batch, length, dim = u.shape
        v = self.in_proj(u).reshape(batch * length, 1, dim)
        v = F.silu(F.conv1d(F.pad(v, (self.conv.kernel_size[0] - 1, 0)), self.conv.weight, self.conv.bias))
        dt, B, C = F.linear(u.transpose(1, 2), x_proj_weight).split([1, self.d_state, self.d_state], dim=-1)
        # selective_scan's layout: features = the L tokens, sequence = the dim channels
        y = ops.selective_scan(v.reshape(batch, length, dim), dt.transpose(1, 2).expand(batch, length, dim),
                               (-torch.exp(self.A_log)).expand(length, self.d_state), B.transpose(1, 2),
                               C.transpose(1, 2), self.D.expand(length), delta_bias=self.dt_bias.expand(length),
                               delta_softplus=True)
        return y * F.silu(self.gate_proj(u))


class ForwardBackwardChannelMixer(nn.Module):
    """The naive non-causal selective channel mixer of Table 4's "w/ f+b" rows (paper Sec. 2.1, App. F.9): two separate
    Mamba-style blocks along the channel axis, one on the channels in order and one on them reversed, summed.

    Each direction has its own input projection, convolution, S6 selection (Δ, B, C from the block input, scalar A,
    D skip) and gate (``_ChannelS6Direction``); the QS mixer (SelectiveChannelMixer) shares one gate and needs no
    projection or convolution, which is the parameter saving the paper claims for it. Same interface as
    SelectiveChannelMixer: (batch, L, dim) -> (batch, L, dim), with ``token_grid``/``num_prefix_tokens`` for
    other grids (the token-axis x_proj weights are resampled the same way).

    Args: dim; num_tokens: L0; d_state: N [16]; d_conv: taps of the causal conv along the channels [D: 4, Mamba];
    token_grid, num_prefix_tokens: as SelectiveChannelMixer.
    """

    no_weight_decay_names = ("fwd.A_log", "fwd.dt_bias", "fwd.D", "bwd.A_log", "bwd.dt_bias", "bwd.D")

    def __init__(self, dim: int, num_tokens: int, d_state: int = 16, d_conv: int = 4, token_grid=None,
                 num_prefix_tokens: int = 0):
        super().__init__()
        for name, value in (("dim", dim), ("num_tokens", num_tokens), ("d_state", d_state), ("d_conv", d_conv)):
            positive_int(name, value)
        self.token_grid = _check_token_grid(token_grid, num_prefix_tokens, num_tokens)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.dim, self.num_tokens, self.d_state = dim, num_tokens, d_state
        self.fwd = _ChannelS6Direction(dim, num_tokens, d_state, d_conv)
        self.bwd = _ChannelS6Direction(dim, num_tokens, d_state, d_conv)

    def extra_repr(self):
        return f"dim={self.dim}, num_tokens={self.num_tokens}, d_state={self.d_state}"

    def forward(self, u, grid_size=None):
        """u: normalised input (batch, L, dim) -> (batch, L, dim); ``grid_size`` as SelectiveChannelMixer."""
        if grid_size is not None and self.token_grid is None:
            raise ValueError("grid_size needs a layer built with token_grid")
        if grid_size is None:
            check_tokens("u", u, self.dim, self.num_tokens,
                         " = num_tokens (the selection weights act on the token axis)")
            weights = self.fwd.x_proj.weight, self.bwd.x_proj.weight
        else:
            check_tokens("u", u, self.dim, self.num_prefix_tokens + grid_size[0] * grid_size[1],
                         f" = num_prefix_tokens + h*w of grid_size {tuple(grid_size)}")
            weights = [resample_token_axis(d.x_proj.weight, self.token_grid, self.num_prefix_tokens, grid_size)
                       for d in (self.fwd, self.bwd)]
        return self.fwd(u, weights[0]) + self.bwd(u.flip(-1), weights[1]).flip(-1)


class MambaMixerBlock(nn.Module):
    """MambaMixer block (paper Sec. 2.1; norms: docs/mambamixer.md 'Block layout'), (batch, L, dim) -> (batch, L, dim):

        x = x + DropPath(SelectiveTokenMixer(Norm(x)));  x = x + DropPath(SelectiveChannelMixer(Norm(x)))

    Args:
        dim, num_tokens: width and token count (the channel mixer needs the token count).
        drop_path: stochastic depth on both branches [D: 0].
        norm: 'layernorm' (eps 1e-6) or 'rmsnorm' [D: 'layernorm'].
        channel_mixer: False drops the channel mixer (the ``*_noqs`` ablation) [True].
        token_grid: (h0, w0) with h0*w0 = num_tokens: ``forward(x, grid_size=(h, w))`` then accepts other token
            counts by resampling the channel mixer's token-axis weights (SelectiveChannelMixer); (1, L0) gives the
            1-D linear resampling of variable-length sequences (the inter-chunk path of speech, docs/mambamixer.md
            'Speech separation') [None].
        token_mixer: see SelectiveTokenMixer [D: 's6'].
        channel_qs_param, qs_shift, d_state, and **token_kwargs (expand, d_conv, dt_rank, gate_kernels,
        selection_input, causal, headdim) are passed to the mixers.
        token_grid, num_prefix_tokens: as SelectiveChannelMixer; with a token_grid, ``forward(x, grid_size)``
            accepts other grids (the channel mixer's token-axis weights are resampled).
    """

    def __init__(self, dim: int, num_tokens: int, drop_path: float = 0.0, norm: str = "layernorm",
                 token_mixer: str = "s6", channel_mixer: bool = True, channel_qs_param: str = "scalar",
                 d_state: int = 16, qs_shift: str = "exact", token_grid=None, num_prefix_tokens: int = 0,
                 **token_kwargs):
        super().__init__()
        probability("drop_path", drop_path)
        self.dim, self.drop_path_prob = dim, float(drop_path)
        self.norm1 = make_mixer_norm(norm, dim)
        self.token_mixer = SelectiveTokenMixer(dim, d_state=d_state, token_mixer=token_mixer, qs_shift=qs_shift,
                                               **token_kwargs)
        if channel_mixer:
            self.norm2 = make_mixer_norm(norm, dim)
            self.channel_mixer = SelectiveChannelMixer(dim, num_tokens, d_state=d_state,
                                                       channel_qs_param=channel_qs_param, qs_shift=qs_shift,
                                                       token_grid=token_grid, num_prefix_tokens=num_prefix_tokens)
        else:
            self.norm2 = self.channel_mixer = None

    @property
    def no_weight_decay_names(self):
        names = [f"token_mixer.{n}" for n in self.token_mixer.no_weight_decay_names]
        if self.channel_mixer is not None:
            names += [f"channel_mixer.{n}" for n in self.channel_mixer.no_weight_decay_names]
        return tuple(n for n in names if _has_param(self, n))

    def extra_repr(self):
        return f"drop_path={self.drop_path_prob}"

    def token_branch(self, x, grid_size=None):
        """x + DropPath(SelectiveTokenMixer(Norm(x))): the residual output y_Tok of v1's weighted averaging."""
        check_tokens("x", x, self.dim)
        return x + drop_path(self.token_mixer(self.norm1(x)), self.drop_path_prob, self.training)

    def channel_branch(self, x, grid_size=None):
        """x + DropPath(SelectiveChannelMixer(Norm(x))) (x itself without a channel mixer): y_Ch of v1's averaging."""
        if self.channel_mixer is None:
            return x
        return x + drop_path(self.channel_mixer(self.norm2(x), grid_size), self.drop_path_prob, self.training)

    def forward(self, x, grid_size=None):
        """x (batch, L, dim); grid_size (h, w) of the tokens for a block built with ``token_grid``."""
        return self.channel_branch(self.token_branch(x, grid_size), grid_size)


class QSMixerBlock(MambaMixerBlock):
    """QSMixer block (paper Sec. 2.2, Eq. 9-10): MambaMixerBlock with the scalar-A QS token mixer (non-causal,
    'same' padding) and the scalar-A QS channel mixer. Same arguments as MambaMixerBlock except ``token_mixer``."""

    def __init__(self, dim: int, num_tokens: int, drop_path: float = 0.0, norm: str = "layernorm", **kwargs):
        if "token_mixer" in kwargs:
            raise ValueError("QSMixerBlock always uses token_mixer='qs'; use MambaMixerBlock for other mixers")
        super().__init__(dim, num_tokens, drop_path=drop_path, norm=norm, token_mixer="qs", **kwargs)


class TimeVariateMixerBlock(nn.Module):
    """MambaMixer / QSMixer block for patched multivariate time series (TSM2 / TSQS, paper App. H.3;
    arXiv 2403.19888 v1, Sec. 5), on x (batch, M variates, P patches, dim):

        time mixer     x = x + DropPath(SelectiveTokenMixer(Norm(x)))  along the P patches of each variate
                       (one mixer shared by the variates; causal S6 for TSM2 [P1 "unidirectional"], QS for TSQS)
        variate mixer  x = x + DropPath(SelectiveChannelMixer(Norm(x)))  along the M variates: the sequence is the
                       variates and each variate carries its whole embedded history (P·dim features), so Δ, B, C
                       select variates from their own history and W_2 (M x M) gates per (patch, feature) [P2 App. F.2,
                       "selection of relevant channels"; non-causal = bidirectional, P1: v1 Sec. 5]

    The norms are LayerNorm over ``dim`` (eps 1e-6) [D: the paper says only "with layer normalization"].

    Args:
        n_vars: M. num_patches: P. dim: width of a patch embedding.
        drop_path: stochastic depth on both branches [0]. norm: 'layernorm' | 'rmsnorm'.
        token_mixer: 's6' (causal, TSM2), 's6_bi' or 'qs' (TSQS) [D: 's6'].
        variate_mixer: False drops the variate mixer (channel-independent ablation) [True].
        variate_selection: 'history' (Δ, B, C from each variate's whole embedded history, P·dim features) or
            'pooled' (from its history averaged over the patches, dim features) [D: 'history'].
        d_state, qs_shift, channel_qs_param, and **token_kwargs (expand, d_conv, dt_rank, gate_kernels,
        selection_input, causal, headdim) as MambaMixerBlock.
    ``token_branch`` / ``channel_branch`` give the two residual outputs (MixerStack's dense connections).
    """

    def __init__(self, n_vars: int, num_patches: int, dim: int, drop_path: float = 0.0, norm: str = "layernorm",
                 token_mixer: str = "s6", variate_mixer: bool = True, d_state: int = 16,
                 qs_shift: str = "exact", channel_qs_param: str = "scalar",
                 variate_selection: str = "history", **token_kwargs):
        super().__init__()
        for name, value in (("n_vars", n_vars), ("num_patches", num_patches), ("dim", dim)):
            positive_int(name, value)
        probability("drop_path", drop_path)
        self.n_vars, self.num_patches, self.dim = n_vars, num_patches, dim
        self.drop_path_prob = float(drop_path)
        self.norm1 = make_mixer_norm(norm, dim)
        self.token_mixer = SelectiveTokenMixer(dim, d_state=d_state, token_mixer=token_mixer, qs_shift=qs_shift,
                                               **token_kwargs)
        if variate_mixer:
            self.norm2 = make_mixer_norm(norm, dim)
            choice("variate_selection", variate_selection, ("history", "pooled"))
            self.channel_mixer = SelectiveChannelMixer(
                n_vars, num_patches * dim, d_state=d_state, channel_qs_param=channel_qs_param, qs_shift=qs_shift,
                selection_features=dim if variate_selection == "pooled" else None)
        else:
            self.norm2 = self.channel_mixer = None

    no_weight_decay_names = MambaMixerBlock.no_weight_decay_names

    def extra_repr(self):
        return f"n_vars={self.n_vars}, num_patches={self.num_patches}, drop_path={self.drop_path_prob}"

    def _check(self, x):
        expected = (self.n_vars, self.num_patches, self.dim)
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != expected:
            shape = shape_or_type(x)
            raise ValueError(f"x must have shape (batch, n_vars={self.n_vars}, num_patches={self.num_patches}, "
                             f"dim={self.dim}), got {shape}")

    def token_branch(self, x):
        self._check(x)
        batch = x.shape[0]
        y = self.token_mixer(self.norm1(x).reshape(batch * self.n_vars, self.num_patches, self.dim))
        return x + drop_path(y.reshape(x.shape), self.drop_path_prob, self.training)

    def channel_branch(self, x):
        if self.channel_mixer is None:
            return x
        self._check(x)
        batch = x.shape[0]
        z = self.norm2(x).reshape(batch, self.n_vars, -1).transpose(1, 2)  # (batch, P*dim, M): variates = channels
        y = self.channel_mixer(z).transpose(1, 2).reshape(x.shape)
        return x + drop_path(y, self.drop_path_prob, self.training)

    def forward(self, x):
        return self.channel_branch(self.token_branch(x))


class MixerStack(nn.Module):
    """A stack of mixer blocks (MambaMixerBlock, QSMixerBlock, TimeVariateMixerBlock: anything with
    ``token_branch`` and ``channel_branch``), optionally with v1's weighted averaging of earlier features
    (arXiv 2403.19888 v1, Sec. 3.2, DenseFormer-style; init and details: docs/mambamixer.md, 'Weighted averaging
    (v1)'), ``forward(x, *args)`` -> the last block's output.

    ``dense_wavg=False``: the plain residual stack, y = block_L(... block_1(x)); no parameters of its own.
    ``dense_wavg=True``: with y_Tok^(0) = y_Ch^(0) = x and y^(ℓ) the residual outputs of layer ℓ's two branches,

        x_Tok^(ℓ) = Σ_{i<ℓ} α_{ℓ,i} y_Tok^(i) + Σ_{i<ℓ} β_{ℓ,i} y_Ch^(i)        (input of layer ℓ's token mixer)
        x_Ch^(ℓ)  = Σ_{i≤ℓ} θ_{ℓ,i} y_Tok^(i) + Σ_{i<ℓ} γ_{ℓ,i} y_Ch^(i)        (input of its channel mixer)

    with learnable scalars, L(2L+3) in all for L blocks: ``dense_tok[ℓ-1]`` = [α_{ℓ,0..ℓ-1}, β_{ℓ,0..ℓ-1}] and
    ``dense_ch[ℓ-1]`` = [θ_{ℓ,0..ℓ}, γ_{ℓ,0..ℓ-1}], initialised to the identity (β_{ℓ,ℓ-1} = θ_{ℓ,ℓ} = 1, the rest 0),
    so at init the stack equals the plain one. They are kept out of weight decay (``no_weight_decay_names``).
    """

    def __init__(self, blocks: Sequence[nn.Module], dense_wavg: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        for i, block in enumerate(self.blocks):
            if not (hasattr(block, "token_branch") and hasattr(block, "channel_branch")):
                raise ValueError(f"blocks[{i}] ({type(block).__name__}) has no token_branch/channel_branch")
        self.dense_wavg = bool(dense_wavg)
        self.grad_checkpointing = False
        if self.dense_wavg:
            depth = len(self.blocks)
            self.dense_tok = nn.ParameterList(nn.Parameter(torch.zeros(2 * ell)) for ell in range(1, depth + 1))
            self.dense_ch = nn.ParameterList(nn.Parameter(torch.zeros(2 * ell + 1)) for ell in range(1, depth + 1))
            with torch.no_grad():
                for ell in range(1, depth + 1):
                    self.dense_tok[ell - 1][2 * ell - 1] = 1.0  # β_{ℓ,ℓ-1}
                    self.dense_ch[ell - 1][ell] = 1.0  # θ_{ℓ,ℓ}

    def extra_repr(self):
        return f"dense_wavg={self.dense_wavg}"

    def __len__(self):
        return len(self.blocks)

    @property
    def no_weight_decay_names(self):
        names = [f"blocks.{i}.{n}" for i, b in enumerate(self.blocks) for n in getattr(b, "no_weight_decay_names", ())]
        if self.dense_wavg:
            names += [f"dense_tok.{i}" for i in range(len(self.blocks))]
            names += [f"dense_ch.{i}" for i in range(len(self.blocks))]
        return tuple(names)

    def _run(self, fn, x, *args):
        if self.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting():
            return torch.utils.checkpoint.checkpoint(fn, x, *args, use_reentrant=False)
        return fn(x, *args)

    @staticmethod
    def _weighted(weights, ys):
        out = weights[0].to(ys[0].dtype) * ys[0]
        for w, y in zip(weights[1:], ys[1:]):
            out = out + w.to(y.dtype) * y
        return out

    def forward(self, x, *args):
        if not self.dense_wavg:
            for block in self.blocks:
                x = self._run(block.channel_branch, self._run(block.token_branch, x, *args), *args)
            return x
        tok, ch = [x], [x]
        for ell, block in enumerate(self.blocks, start=1):
            x_tok = self._weighted(self.dense_tok[ell - 1], tok + ch)
            tok.append(self._run(block.token_branch, x_tok, *args))
            x_ch = self._weighted(self.dense_ch[ell - 1], tok + ch)
            ch.append(self._run(block.channel_branch, x_ch, *args))
        return ch[-1]


def _has_param(module, name):
    try:
        module.get_parameter(name)
        return True
    except AttributeError:
        return False
