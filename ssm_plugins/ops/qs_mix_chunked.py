"""Quasi-separable mixing with scalar A in the chunked form of App. D / SSD (MambaMixer, arXiv:2403.19888 v2; our
kernel K2, docs/mambamixer.md 'Kernels K1-K3').

Per chunk of ``chunk`` steps the strict-lower part of Q is a masked dense (chunk x chunk) matrix applied by a
matmul; the blocks below the diagonal have rank N and are carried as an (N x P) state from chunk to chunk:

    within  = tril(C Bᵀ ∘ exp(segsum(log Ā)) ∘ Δ_k, -1) x          (strict; the diagonal kept for qs_shift='hydra')
    state_c = Σ_k exp(Σ_{k<j<=end} log Ā_j) Δ_k B_k x_kᵀ           the chunk's own contribution at its end
    h_in    = Σ_{c'<c} exp(Σ_{c'<i<c} total_i) state_c'          entering state: a (chunks x chunks) matmul,
                                                                   in groups of chunks beyond 64 (linear in L)
    y       = within + exp(Σ_{j<=t} log Ā_j) C_t · h_in

The reverse direction is the same on the flipped sequence; y = lower + upper + γ ⊙ x. A sequence that fits one
chunk (vim2's channel mixer: 192 channels, 197 tokens as features) skips the flips: Q's two triangles come from one
stacked segment sum, the reverse one transposed, and meet x in one matmul (``_one_chunk``). Every matmul contracts
over the chunk or the state (dense, batched), which is the tensor-core form of the op: on a GPU it replaces the
sequential scan of the CUDA kernel for scalar A (``ops.qs_mix`` dispatch, SSM_PLUGINS_QS). Plain PyTorch ops, so
autograd, torch.compile and every device work unchanged. Decays are exponentials of sums of the log-decays
themselves (masked cumulative sums), never differences of a running sum, so a long or fast-decaying sequence loses
no precision. Takes the op's normalised head layout (``ops.qs_mix._normalise``) with A, A_rev of shape (H, 1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._backend import no_autocast
from .reference.selective_scan import finite_rates

CHUNK = 64  # steps a chunk at least may take: the within-chunk matrices cost chunk² a head, the carried states N·P
CARRY = 64  # chunks whose entering states one (chunks x chunks) matmul forms; more go in groups (_entering_states)


def chunk_length(length: int, feat: int = 1) -> int:
    """The chunk length for a sequence of ``length`` and heads of ``feat`` features: at most max(CHUNK, feat) steps
    (a chunk's decay matrix, chunk² a head, then costs no more than its x block, chunk·P), as few chunks as that
    allows, evened out so the padding is smallest (L = 197, P = 64: 4 chunks of 50; L = 192, P = 197: one chunk,
    no states carried)."""
    most = max(CHUNK, feat)
    chunks = max(1, -(-length // most))
    return max(1, -(-length // chunks))


def _segsum(v, strict=False):
    """v (..., n) -> (..., n, n) with [i, k] = Σ_{k<j<=i} v_j for i >= k (i > k when ``strict``), else -inf."""
    steps = torch.arange(v.shape[-1], device=v.device)
    upper = steps[:, None] <= steps  # j <= k: no term of [., k]; and i <= k: the strict output's -inf
    sums = torch.cumsum(v[..., :, None].expand(*v.shape, v.shape[-1]).masked_fill(upper, 0), dim=-2)
    return sums.masked_fill(upper if strict else steps[:, None] < steps, -torch.inf)


def _from_earlier(decays, states):
    """Row c of ``decays`` (..., n, n) shifted to row c + 1 and applied to ``states`` (..., n, F): what the chunks
    before c leave at c's start, when decays[c, c'] is the decay from c' (exclusive) to c (inclusive)."""
    return F.pad(decays, (0, 0, 1, 0))[..., :-1, :] @ states


def _entering_states(states, totals):
    """The state entering each chunk, Σ_{c'<c} exp(Σ_{c'<i<c} total_i) states_c', (..., n, F), from each chunk's own
    contribution at its end, states (..., n, F), and its log-decay, totals (..., n). Up to CARRY chunks: one
    (n x n) matmul. Beyond, the same in groups of chunks, the groups' own states carried by a recursive call, so
    the work stays linear in L (a single matmul would grow as L²: at L = 16k, 256 chunks, it cost as much as the
    chunks themselves)."""
    n = totals.shape[-1]
    if n <= CARRY:
        return _from_earlier(torch.exp(_segsum(totals)), states)  # [c, c'] = Π_{c'<i<c}
    group = -(-n // -(-n // CARRY))  # up to CARRY chunks a group, evened out
    n_groups = -(-n // group)
    pad = n_groups * group - n  # chunks past the end: decay 1, no state; they come last and are cut
    s = F.pad(states, (0, 0, 0, pad)).unflatten(-2, (n_groups, group))  # (..., groups, group, F)
    t = F.pad(totals, (0, pad)).unflatten(-1, (n_groups, group))
    seg = torch.exp(_segsum(t))  # (..., groups, group, group)
    within = _from_earlier(seg, s)  # from the earlier chunks of the same group
    own = seg[..., -1:, :] @ s  # each group's state at its end, (..., groups, 1, F)
    entering = _entering_states(own.squeeze(-2), t.sum(-1))  # (..., groups, F)
    into = torch.exp(torch.cumsum(F.pad(t[..., :-1], (1, 0)), -1))  # Π_{start<=i<c}: the group's entering state
    h_in = within + into[..., None] * entering[..., None, :]
    return h_in.flatten(-3, -2)[..., :n, :]


def _strict_scan(x, log_decay, delta, B, C, chunk, inclusive):
    """One direction, causal, in head-major layouts: x (batch, G, r, L, P) for G groups of r heads; log_decay, delta
    (batch, G, r, L); B, C (batch, G, L, N); all in the accumulation dtype. Returns (batch, G, r, L, P):
    Σ_{k<t} (Σ_{k<=t} when ``inclusive``) C_t·(Π_{k<j<=t} Ā_j) Δ_k B_k x_k."""
    batch, groups, per_group, length, feat = x.shape
    n_state = B.shape[-1]
    chunks = -(-length // chunk)
    pad = chunks * chunk - length
    if pad:  # zero steps past the end: decay 1, no input; their outputs are cut off
        x, B, C = (F.pad(t, (0, 0, 0, pad)) for t in (x, B, C))
        log_decay, delta = (F.pad(t, (0, pad)) for t in (log_decay, delta))
    # chunked views (no copies of contiguous inputs): (batch, G, r, chunk, step, ...), B and C (batch, G, chunk, ...)
    xc = x.reshape(batch, groups, per_group, chunks, chunk, feat)
    ld, dl = (t.reshape(batch, groups, per_group, chunks, chunk) for t in (log_decay, delta))
    Bc, Cc = (t.reshape(batch, groups, 1, chunks, chunk, n_state) for t in (B, C))

    seg = _segsum(ld, strict=not inclusive)  # (batch, G, r, chunk, step t, step k): Σ_{k<j<=t} log Ā_j
    y = ((Cc @ Bc.transpose(-1, -2)) * torch.exp(seg) * dl[..., None, :]) @ xc  # (batch, G, r, chunk, step, P)
    if chunks == 1:  # nothing enters the only chunk
        return y.reshape(batch, groups, per_group, chunk, feat)[..., :length, :]

    # each chunk's state at its end, (batch, G, r, chunk, N, P), then the states entering the chunks. Step weights
    # go on B and C, not on x-sized operands, and x is the right operand as above: autograd saves no x-sized copies
    last_row = seg[..., -1, :] if inclusive else F.pad(seg[..., -1, :-1], (0, 1))  # the strict one lacks [end, end]
    to_end = torch.exp(last_row) * dl
    states = (Bc * to_end[..., None]).transpose(-1, -2) @ xc
    h_in = _entering_states(states.flatten(-2), ld.sum(-1)).unflatten(-1, (n_state, feat))
    y = y + (Cc * torch.exp(torch.cumsum(ld, -1))[..., None]) @ h_in  # decay from the chunk's start, on C
    return y.reshape(batch, groups, per_group, chunks * chunk, feat)[..., :length, :]


def _one_chunk(x, log_decay, delta, B, C, inclusive):
    """Both directions of a sequence that fits one chunk, as Q's two triangles, without flipping anything. x (batch,
    G, r, L, P); log_decay, delta (2, batch, G, r, L) and B, C (2, batch, G, L, N), forward then reverse, in time
    order. Returns the strict part of Q applied to x, (batch, G, r, L, P) (Hydra's shift: see below).

    The reverse triangle is built transposed, [k, t] for k > t, so both are strict-lower matrices of one stacked
    segment sum: Q'[t, k] = C'_t·(Π_{t<=j<k} Ā'_j) Δ'_k B'_k reads the reverse log-decays shifted one step later,
    Σ_{t<j<=k} log Ā'_{j-1}, with Δ'_k B'_k on the left and C'_t on the right."""
    step_b = delta[..., None] * B[:, :, :, None]  # Δ_k B_k per head, (2, batch, G, r, L, N)
    C = C[:, :, :, None].expand_as(step_b)
    left = torch.stack([C[0], step_b[1]])  # rows t (forward) or k (reverse)
    right = torch.stack([step_b[0], C[1]])
    later = torch.stack([log_decay[0], F.pad(log_decay[1, ..., :-1], (1, 0))])
    seg = _segsum(later, strict=not inclusive)
    weights = (left @ right.transpose(-1, -2)) * torch.exp(seg)  # (2, batch, G, r, L, L)
    lower, upper_t = weights.unbind(0)
    if inclusive:  # Hydra: row t reads the inclusive forward scan at t - 1 and the reverse one at t + 1
        lower = F.pad(lower[..., :-1, :], (0, 0, 1, 0))
        upper_t = F.pad(upper_t[..., 1:], (0, 1))
    return (lower + upper_t.transpose(-1, -2)) @ x


def qs_mix_chunked(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias=None, dt_bias_rev=None,
                   dt_softplus=False, qs_shift="exact", chunk=None):
    """y = Q x for scalar A (A, A_rev of shape (H, 1)) in the chunked form; the op's normalised head layout.

    ``chunk``: steps a chunk [``chunk_length(L, P)``]. Computed in float32 (float64 for float64 x), autocast off, and
    returned in x's dtype and strides; gradients by autograd. Its float32 matmuls follow torch's TF32 setting
    (``torch.backends.cuda.matmul.allow_tf32``), as every other matmul of the model does."""
    if A.shape[-1] != 1 or A_rev.shape[-1] != 1:
        raise ValueError(f"qs_mix_chunked needs scalar A per head, A and A_rev of shape (H, 1); got "
                         f"{tuple(A.shape)} and {tuple(A_rev.shape)}")
    length = x.shape[1]
    chunk = chunk_length(length, x.shape[3]) if chunk is None else int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk}")
    hydra = qs_shift == "hydra"
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    batch, length, heads, feat = x.shape
    groups = B.shape[2]
    with no_autocast(x.device.type):
        xs = x.to(acc)
        # Both directions in one pass (half the launches), stacked on a leading axis with the reverse one flipped
        # along L (not for one chunk, _one_chunk); the stack's copy lands in the head-major layouts the chunks'
        # matmuls read without further copies.
        one_chunk = chunk >= length
        head_major = lambda t: t.movedim(1, -2 if t.dim() == 4 else -1)  # noqa: E731  (batch, H or G, L, ...)
        in_order = (lambda t: t) if one_chunk else (lambda t: t.flip(2))  # noqa: E731
        both = lambda fwd, rev: torch.stack([head_major(fwd.to(acc)), in_order(head_major(rev.to(acc)))])  # noqa: E731
        delta = both(dt, dt_rev)  # (2, batch, H, L)
        if dt_bias is not None or dt_bias_rev is not None:
            zero = torch.zeros(heads, dtype=acc, device=x.device)
            biases = [zero if b is None else b.to(acc) for b in (dt_bias, dt_bias_rev)]
            delta = delta + torch.stack(biases)[:, None, :, None]
        if dt_softplus:
            delta = F.softplus(delta)
        rates = finite_rates(torch.stack([A[:, 0], A_rev[:, 0]]), acc)  # a step with Δ = 0: identity, as the kernels
        log_decay = delta * rates[:, None, :, None]
        per_head = lambda t: t.unflatten(2, (groups, heads // groups))  # noqa: E731  (2, batch, G, r, ...), a view
        if one_chunk:
            x_heads = head_major(xs).unflatten(1, (groups, heads // groups))
            mixed = _one_chunk(x_heads, per_head(log_decay), per_head(delta), both(B, B_rev), both(C, C_rev),
                               inclusive=hydra).reshape(batch, heads, length, feat)
        else:
            directions = lambda t: t.flatten(0, 1)  # noqa: E731  (2 * batch, ...): one batch of matmuls for both
            y = _strict_scan(directions(per_head(both(xs, xs))), directions(per_head(log_decay)),
                             directions(per_head(delta)), directions(both(B, B_rev)), directions(both(C, C_rev)),
                             chunk=chunk, inclusive=hydra)
            y = y.reshape(2, batch, heads, length, feat)
            if hydra:  # Hydra's shift: row t reads the inclusive scan at t - 1
                y = F.pad(y[..., :-1, :], (0, 0, 1, 0))
            mixed = y[0] + y[1].flip(2)
        y = mixed.transpose(1, 2) + x * gamma.to(acc)[..., None]  # saves x, not an acc copy
    # in x's dtype and strides, as the kernels' outputs (torch.empty_like(x)), so callers may view it as they would
    return y if y.dtype == x.dtype and y.stride() == x.stride() else torch.empty_like(x).copy_(y)
