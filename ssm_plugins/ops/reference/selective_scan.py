"""S6 selective scan, sequential in L (MambaMixer, arXiv:2403.19888 v2, Eq. 2; mamba_ssm ``selective_scan_ref``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def finite_rates(A, acc):
    """A in ``acc``, clamped to its finite range (NaN stays NaN), as every kernel does: a step with Δ = 0 is then the
    identity, exp(0 · A) = 1, where A = ±inf gave 0 · inf = NaN."""
    limit = torch.finfo(acc).max
    return A.to(acc).clamp(-limit, limit)


def low_rank_delta(delta, delta_proj, acc):
    """Δ (batch, dim, L) in ``acc`` of a low-rank delta (batch, groups, R, L) or (batch, R, L) and delta_proj (dim, R):
    channel d's Δ is delta_proj[d] · delta[:, group of d] (Mamba's dt_proj, per group of dim / groups channels)."""
    delta = delta if delta.dim() == 4 else delta[:, None]
    batch, groups, rank, length = delta.shape
    proj = delta_proj.to(acc).view(groups, -1, rank)
    # a broadcast matmul (b, g, c, l): one bmm, its output contiguous (an einsum adds ~7 views and a copy)
    return torch.matmul(proj, delta.to(acc)).view(batch, -1, length)


def scan_inputs(u, delta, B, C, delta_bias, delta_softplus, delta_proj):
    """The scan's inputs in the accumulation dtype ``acc``: (acc, x = u, Δ (batch, dim, L) with its bias and softplus,
    B, C as (batch, groups, N, L)); shared with the export's scan (``ssm_plugins.export``)."""
    acc = torch.float64 if u.dtype == torch.float64 else torch.float32
    x = u.to(acc)
    dt = delta.to(acc) if delta_proj is None else low_rank_delta(delta, delta_proj, acc)
    if delta_bias is not None:
        dt = dt + delta_bias.to(acc)[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    Bm = B.to(acc) if B.dim() == 4 else B.to(acc)[:, None]
    Cm = C.to(acc) if C.dim() == 4 else C.to(acc)[:, None]
    return acc, x, dt, Bm, Cm


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                   return_last_state=False, delta_proj=None, reverse=False):
    """h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t;  y_t = C_t·h_t + D u_t;  out = y · silu(z).

    u, delta, z: (batch, dim, L); A: (dim, N); B, C: (batch, N, L) or (batch, groups, N, L);
    D, delta_bias: (dim,). With delta_proj (dim, R), delta is low rank, (batch, groups, R, L) (low_rank_delta).
    Accumulates in float32 (float64 for float64 input); returns u's dtype,
    and with ``return_last_state`` also h_L, (batch, dim, N) in the accumulation dtype.
    ``reverse``: the scan from t = L - 1 down to 0 (last state h_0), i.e. that of the time-flipped inputs, flipped.

    Differentiable by autograd in time and memory linear in L (the steps are taken with ``unbind``,
    whose backward is one ``stack``, not L scatters into full-size zeros).
    """
    if reverse:
        flip = (lambda t: None if t is None else t.flip(-1))
        out = selective_scan(flip(u), flip(delta), A, flip(B), flip(C), D, flip(z), delta_bias, delta_softplus,
                             return_last_state, delta_proj)
        return (out[0].flip(-1), out[1]) if return_last_state else out.flip(-1)
    acc, x, dt, Bm, Cm = scan_inputs(u, delta, B, C, delta_bias, delta_softplus, delta_proj)
    batch, dim, length = u.shape
    groups, n_state = Bm.shape[1], A.shape[1]
    # The channels of a group share its B_t and C_t: work on (batch, groups, dim // groups, ...).
    dA = torch.exp(dt[..., None] * finite_rates(A, acc)[:, None, :])  # (batch, dim, L, N)
    dA = dA.view(batch, groups, dim // groups, length, n_state)
    dBx = (dt * x).view(batch, groups, dim // groups, length, 1) * Bm.transpose(-1, -2)[:, :, None]
    Ct = Cm[:, :, None]  # (batch, groups, 1, N, L)
    h = x.new_zeros(batch, groups, dim // groups, n_state)
    ys = []
    for dA_t, dBx_t, C_t in zip(dA.unbind(3), dBx.unbind(3), Ct.unbind(4)):
        h = dA_t * h + dBx_t
        ys.append((h * C_t).sum(-1))
    y = torch.stack(ys, dim=-1).view(batch, dim, length) if ys else x.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + D.to(acc)[:, None] * x
    if z is not None:
        y = y * F.silu(z.to(acc))
    out = y.to(u.dtype)
    return (out, h.reshape(batch, dim, n_state)) if return_last_state else out
