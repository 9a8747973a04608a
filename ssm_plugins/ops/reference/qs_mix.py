"""Quasi-separable (non-causal) mixing y = Q x, two ways (MambaMixer, arXiv:2403.19888 v2, Sec. 2.1 Eq. 8, App. D;
Q as written in docs/mambamixer.md, 'QS operator'); the third, the chunked algorithm of App. D, is an
implementation of the op itself (ssm_plugins/ops/qs_mix_chunked.py).

All functions take the op's normalised layout (see ``ssm_plugins.ops.qs_mix``):
    x (batch, L, H, P); dt, dt_rev, gamma (batch, L, H); A, A_rev (H, N) (diagonal A per head) or (H, 1)
    (scalar A per head); B, C, B_rev, C_rev (batch, L, G, N) with H % G == 0; dt_bias, dt_bias_rev (H,).
Everything is computed in float32 (float64 for float64 x) and returned in x's dtype.

    qs_mix          sequential strict scans, the oracle: L_s x + U_s x + γ ⊙ x            O(L)
    qs_matrix       the dense Q (docs 'QS operator'), entry by entry                        O(L²)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .selective_scan import finite_rates


def prepare_inputs(x, dt, A, B, C, dt_bias, dt_softplus):
    """Accumulation-dtype copies with per-head B, C: (batch, L, H, N); Δ after bias and softplus."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    heads = x.shape[2]
    delta = dt.to(acc)
    if dt_bias is not None:
        delta = delta + dt_bias.to(acc)
    if dt_softplus:
        delta = F.softplus(delta)
    per_group = heads // B.shape[2]
    Bh = B.to(acc).repeat_interleave(per_group, dim=2)
    Ch = C.to(acc).repeat_interleave(per_group, dim=2)
    return x.to(acc), delta, finite_rates(A, acc), Bh, Ch


def _strict_scan(x, delta, A, B, C, hydra_shift):
    """Causal scan leaving out the current token (the strict part S_strict), per head h and feature p:

        h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t x_tᵀ
        exact: y_t = C_tᵀ (exp(Δ_t A) ⊙ h_{t-1})        hydra: y_t = C_{t-1}ᵀ h_{t-1}  (roll of the inclusive scan)
    """
    batch, length, heads, feat = x.shape
    h = x.new_zeros(batch, heads, A.shape[1], feat)
    ys = []
    for t in range(length):
        decay = torch.exp(delta[:, t, :, None] * A)[..., None]  # (batch, H, N, 1)
        if hydra_shift:
            ys.append(torch.einsum("bhn,bhnp->bhp", C[:, t - 1], h) if t > 0 else x.new_zeros(batch, heads, feat))
        else:
            ys.append(torch.einsum("bhn,bhnp->bhp", C[:, t], decay * h))
        h = decay * h + (delta[:, t, :, None] * B[:, t])[..., None] * x[:, t, :, None, :]
    return torch.stack(ys, dim=1) if ys else x.new_zeros(x.shape)


def qs_mix(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias=None, dt_bias_rev=None,
           dt_softplus=False, qs_shift="exact"):
    """y = S_strict(x) + flip(S'_strict(flip x)) + γ ⊙ x  (App. D, Q = L + D + U with L, U strict)."""
    hydra = qs_shift == "hydra"
    xs, delta, A, B, C = prepare_inputs(x, dt, A, B, C, dt_bias, dt_softplus)
    _, delta_rev, A_rev, B_rev, C_rev = prepare_inputs(x, dt_rev, A_rev, B_rev, C_rev, dt_bias_rev, dt_softplus)
    flip = lambda t: t.flip(1)  # noqa: E731  (reverses the sequence axis)
    lower = _strict_scan(xs, delta, A, B, C, hydra)
    upper = flip(_strict_scan(flip(xs), flip(delta_rev), A_rev, flip(B_rev), flip(C_rev), hydra))
    y = lower + upper + gamma.to(xs.dtype)[..., None] * xs
    return y.to(x.dtype)


def qs_matrix(dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias=None, dt_bias_rev=None,
              dt_softplus=False, qs_shift="exact"):
    """The dense (batch, H, L, L) matrix Q (Eq. 8, in original positions) built entry by entry;
    y[b, :, h, p] = Q[b, h] @ x[b, :, h, p].

        t > k:  C_tᵀ (Π_{j=k+1..t} Ā_j) B̄_k          t = k: γ_t          t < k:  C'_tᵀ (Π_{j=t..k-1} Ā'_j) B̄'_k
    with Ā_j = exp(Δ_j A), B̄_k = Δ_k B_k. qs_shift='hydra' instead uses C_{t-1}ᵀ(Π_{j=k+1..t-1} Ā_j) B̄_k below
    and C'_{t+1}ᵀ(Π_{j=t+1..k-1} Ā'_j) B̄'_k above the diagonal.
    """
    x_like = dt.new_zeros(*dt.shape, 1)
    _, delta, A, B, C = prepare_inputs(x_like, dt, A, B, C, dt_bias, dt_softplus)
    _, delta_rev, A_rev, B_rev, C_rev = prepare_inputs(x_like, dt_rev, A_rev, B_rev, C_rev, dt_bias_rev, dt_softplus)
    batch, length, heads = dt.shape
    hydra = qs_shift == "hydra"
    Q = delta.new_zeros(batch, heads, length, length)
    log_decay = delta[..., None] * A  # (batch, L, H, N): log Ā_j
    log_decay_rev = delta_rev[..., None] * A_rev
    for t in range(length):
        Q[:, :, t, t] = gamma.to(Q.dtype)[:, t]
        for k in range(length):
            if t > k:
                reader, first, last = (t - 1, k + 1, t - 1) if hydra else (t, k + 1, t)
                decay = torch.exp(log_decay[:, first:last + 1].sum(1))  # (batch, H, N)
                Q[:, :, t, k] = (C[:, reader] * decay * delta[:, k, :, None] * B[:, k]).sum(-1)
            elif t < k:
                reader, first, last = (t + 1, t + 1, k - 1) if hydra else (t, t, k - 1)
                decay = torch.exp(log_decay_rev[:, first:last + 1].sum(1))
                Q[:, :, t, k] = (C_rev[:, reader] * decay * delta_rev[:, k, :, None] * B_rev[:, k]).sum(-1)
    return Q
