"""S6 selective scan, sequential in L (spec mambamixer.md §1.1; mamba_ssm ``selective_scan_ref``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                   return_last_state=False):
    """h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t;  y_t = C_t·h_t + D u_t;  out = y · silu(z).

    u, delta, z: (batch, dim, L); A: (dim, N); B, C: (batch, N, L) or (batch, groups, N, L);
    D, delta_bias: (dim,). Accumulates in float32 (float64 for float64 input); returns u's dtype.
    """
    acc = torch.float64 if u.dtype == torch.float64 else torch.float32
    batch, dim, length = u.shape
    x = u.to(acc)
    dt = delta.to(acc)
    if delta_bias is not None:
        dt = dt + delta_bias.to(acc)[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    Bm = B.to(acc) if B.dim() == 4 else B.to(acc)[:, None]  # (batch, groups, N, L)
    Cm = C.to(acc) if C.dim() == 4 else C.to(acc)[:, None]
    Bm = Bm.repeat_interleave(dim // Bm.shape[1], dim=1)  # (batch, dim, N, L)
    Cm = Cm.repeat_interleave(dim // Cm.shape[1], dim=1)
    dA = torch.exp(dt[..., None] * A.to(acc)[:, None, :])  # (batch, dim, L, N)
    dBx = (dt * x)[..., None] * Bm.transpose(-1, -2)  # (batch, dim, L, N)
    h = x.new_zeros(batch, dim, A.shape[1])
    ys = []
    for t in range(length):
        h = dA[:, :, t] * h + dBx[:, :, t]
        ys.append((h * Cm[..., t]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else x.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + D.to(acc)[:, None] * x
    if z is not None:
        y = y * F.silu(z.to(acc))
    out = y.to(u.dtype)
    return (out, h) if return_last_state else out
