"""Selective scan (S6) with mamba_ssm's ``selective_scan_fn`` semantics, backed by ssm_plugins._C."""
from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

from . import _backend, _validate, reference

_OP = "selective_scan_fwd"
_BWD = "selective_scan_bwd"
# The forward op's third output holds the scan's state at the boundary before every STATE_EVERY-th step
# (kStateEvery in csrc/cuda/selective_scan.h; a reverse scan's holds the steps after the boundary): the CUDA
# backward starts its chunks of a long row there.
STATE_EVERY = 1024
# Both compiled ops (a stale build may lack the backward): the kernels run only as a pair.
_COMPILED = hasattr(torch.ops.ssm_plugins, _OP) and hasattr(torch.ops.ssm_plugins, _BWD)


def _normalise(u, delta, A, B, C, D, z, delta_bias, delta_proj=None):
    """Validate user input (ValueError naming the argument) and bring it to the raw op's contract."""
    u = _validate.tensor("u", u, 3, "(batch, dim, L)")
    batch, dim, length = u.shape
    if delta_proj is None:
        delta = _validate.tensor("delta", delta, 3, "(batch, dim, L)")
        if delta.shape != u.shape:
            raise ValueError(f"delta must have u's shape {tuple(u.shape)}, got {tuple(delta.shape)}")
    else:
        delta_proj = _validate.tensor("delta_proj", delta_proj, 2, "(dim, R)")
        _validate.size("delta_proj", delta_proj, 0, dim, "(dim, R)")
        what = "(batch, R, L) or (batch, groups, R, L) with delta_proj"
        delta = _validate.tensor("delta", delta, (3, 4), what)
        delta = delta if delta.dim() == 4 else delta.unsqueeze(1)
        if delta.shape[0] != batch or delta.shape[2] != delta_proj.shape[1] or delta.shape[3] != length:
            raise ValueError(f"delta must have shape {what}, batch={batch}, R={delta_proj.shape[1]}, L={length}, "
                             f"got {tuple(delta.shape)}")
        if delta.shape[1] == 0 or dim % delta.shape[1] != 0:
            raise ValueError(f"delta: groups ({delta.shape[1]}) must divide dim ({dim})")
    A = _validate.tensor("A", A, 2, "(dim, N)")
    _validate.size("A", A, 0, dim, "(dim, N)")
    n_state = A.shape[1]
    what = "(batch, N, L) or (batch, groups, N, L)"
    B = _validate.tensor("B", B, (3, 4), what)
    C = _validate.tensor("C", C, (3, 4), what)
    for name, t in (("B", B), ("C", C)):
        if t.shape[0] != batch or t.shape[-2] != n_state or t.shape[-1] != length:
            raise ValueError(f"{name} must have shape {what} with batch={batch}, N={n_state}, L={length}, "
                             f"got {tuple(t.shape)}")
        if t.dim() == 4 and (t.shape[1] == 0 or dim % t.shape[1] != 0):
            raise ValueError(f"{name}: groups ({t.shape[1]}) must divide dim ({dim})")
    B4 = B if B.dim() == 4 else B.unsqueeze(1)
    C4 = C if C.dim() == 4 else C.unsqueeze(1)
    if B4.shape[1] != C4.shape[1]:
        raise ValueError(f"B and C must have the same number of groups, got {B4.shape[1]} and {C4.shape[1]}")
    for name, t in (("D", D), ("delta_bias", delta_bias)):
        if t is not None:
            _validate.tensor(name, t, 1, "(dim,)")
            _validate.size(name, t, 0, dim, "(dim,)")
    if z is not None:
        z = _validate.tensor("z", z, 3, "(batch, dim, L)")
        if z.shape != u.shape:
            raise ValueError(f"z must have u's shape {tuple(u.shape)}, got {tuple(z.shape)}")
    _validate.same_device(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias, delta_proj=delta_proj)
    acc = _validate.compute_dtype(u.dtype)
    cast = (lambda t: None if t is None else t.to(acc))
    # B and C as mamba_ssm takes them: in u's dtype (a bf16 projection's output, read as is) or else in acc's
    bc = u.dtype if B4.dtype == C4.dtype == u.dtype else acc
    return (u, delta.to(u.dtype), A.to(acc), B4.to(bc), C4.to(bc), cast(D),
            None if z is None else z.to(u.dtype), cast(delta_bias)), cast(delta_proj)


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                   return_last_state=False, delta_proj=None, reverse=False):
    """The S6 scan (MambaMixer paper, arXiv:2403.19888 v2, Eq. 2, App. A.1-A.2), same contract as
    ``mamba_ssm.selective_scan_fn``.

    Args:
        u, delta, z: (batch, dim, L). A: (dim, N), real. B, C: (batch, N, L) or (batch, groups, N, L); both in u's
            dtype are read as they are (mamba_ssm's contract), else in the accumulation dtype.
        D, delta_bias: (dim,). delta_softplus: apply softplus to delta + delta_bias.
        delta_proj: (dim, R), or None. Given, delta is low rank, (batch, R, L) or (batch, groups, R, L), and channel
            d's delta is ``delta_proj[d] @ delta[:, group of d]`` (Mamba's dt_proj): the kernels compute it per row,
            so the (batch, dim, L) delta is never stored in the forward (the backward forms it once).
        reverse: scan from t = L - 1 down to 0 (the last state is then h_0): the scan of the time-flipped inputs,
            flipped back, without the flips (a bidirectional layer's backward direction).
    Returns:
        out (batch, dim, L) in u's dtype, and the last state (batch, dim, N) in the accumulation dtype
        (float32; float64 for float64 input) when ``return_last_state``.
    """
    args, delta_proj = _normalise(u, delta, A, B, C, D, z, delta_bias, delta_proj)
    if _backend.use_kernel(_OP, args[0]) and _COMPILED:
        out, last_state, _ = torch.ops.ssm_plugins.selective_scan_fwd(*args, bool(delta_softplus), delta_proj,
                                                                      bool(reverse))
    else:
        out, last_state = reference.selective_scan(*args, delta_softplus=delta_softplus, return_last_state=True,
                                                   delta_proj=delta_proj, reverse=reverse)
    return (out, last_state) if return_last_state else out


# ---- autograd, fake (meta) kernels and FLOP counts for the compiled ops ----------------------------
def saved_states(length):
    """How many states the forward op saves per row: one at the boundary before each step STATE_EVERY * s < length,
    s >= 1."""
    return max(length - 1, 0) // STATE_EVERY


# Registered only when the ops exist (the extension may be missing). The backward is the fused
# selective_scan_bwd kernel: it recomputes the forward states per row, so the inputs are saved and, of the
# outputs, the states at every STATE_EVERY-th step (a few per row).
if _COMPILED:

    @torch.library.register_fake(f"ssm_plugins::{_OP}")
    def _fwd_fake(u, delta, A, B, C, D, z, delta_bias, delta_softplus, delta_proj=None, reverse=False):
        # out has u's layout (the CPU kernel reads and writes through strides, the CUDA glue copies into it)
        batch, dim, length = u.shape
        return (torch.empty_like(u), u.new_empty((batch, dim, A.shape[1]), dtype=A.dtype),
                u.new_empty((batch, dim, saved_states(length), A.shape[1]), dtype=A.dtype))

    @torch.library.register_fake(f"ssm_plugins::{_BWD}")
    def _bwd_fake(u, delta, A, B, C, D, z, delta_bias, delta_softplus, grad_out, grad_last_state, reverse=False,
                  chunk_states=None):
        like = (lambda t: None if t is None else t.new_empty(t.shape))  # contiguous, as the kernel writes them
        return (like(u), like(u), like(A), like(B), like(C), like(D), None if z is None else like(u), like(delta_bias))

    def _setup_context(ctx, inputs, output):
        tensors = [*inputs[:8], inputs[9] if len(inputs) > 9 else None]  # the 8 scan inputs and delta_proj
        ctx.save_for_backward(*[t for t in tensors if t is not None], output[2])
        ctx.present = [t is not None for t in tensors]
        ctx.delta_softplus = inputs[8]
        ctx.reverse = bool(inputs[10]) if len(inputs) > 10 else False
        ctx.mark_non_differentiable(output[2])
        ctx.set_materialize_grads(False)  # an unused last_state needs no zero gradient

    def _backward(ctx, grad_out, grad_last_state, grad_chunk_states):  # the saved states take no gradient
        saved = iter(ctx.saved_tensors)
        u, delta, A, B, C, D, z, delta_bias, delta_proj = [next(saved) if p else None for p in ctx.present]
        chunk_states = next(saved)
        if grad_out is None:  # only last_state was used
            grad_out = torch.zeros_like(u)
        low = delta
        if delta_proj is not None:  # the backward kernel takes the full delta
            low = low.to(A.dtype)  # once, for delta and for grad delta_proj
            delta = reference.low_rank_delta(low, delta_proj, A.dtype).to(u.dtype)
        grads = list(torch.ops.ssm_plugins.selective_scan_bwd(u, delta, A, B, C, D, z, delta_bias, ctx.delta_softplus,
                                                              grad_out, grad_last_state, ctx.reverse,
                                                              chunk_states))
        grad_proj = None
        if delta_proj is not None:  # chain rule through delta = delta_proj @ low, per group
            batch, groups, rank, length = low.shape
            grad_delta = grads[1].to(A.dtype).view(batch, groups, -1, length)
            proj = delta_proj.view(groups, -1, rank)
            grads[1] = torch.matmul(proj.mT, grad_delta).to(u.dtype)  # low-rank delta has u's dtype
            grad_proj = torch.matmul(grad_delta, low.mT).sum(0).view(delta_proj.shape)
        return (*grads, None, grad_proj, None)

    torch.library.register_autograd(f"ssm_plugins::{_OP}", _backward, setup_context=_setup_context)

    @register_flop_formula(getattr(torch.ops.ssm_plugins, _OP))
    def _fwd_flops(u, delta, A, B, C, D, z, delta_bias, delta_softplus, delta_proj=None, reverse=False,
                   out_shape=None, **kwargs):
        # mamba_ssm's count: 9 flops per (batch, dim, L, N) step, plus the D skip and the z gate (and a low-rank
        # delta's 2 R per (batch, dim, L), the dt_proj matmul it replaces).
        batch, dim, length = u
        flops = 9 * batch * dim * length * A[1]
        flops += batch * dim * length * ((D is not None) + (z is not None))
        if delta_proj is not None:
            flops += 2 * batch * dim * length * delta_proj[1]
        return flops

    @register_flop_formula(getattr(torch.ops.ssm_plugins, _BWD))
    def _bwd_flops(u, delta, A, B, C, D, z, delta_bias, delta_softplus, grad_out, grad_last_state, reverse=False,
                   chunk_states=None, out_shape=None, **kwargs):
        # Per (batch, dim, L, N) step: the forward recomputed with grad C (9, as counted for the forward)
        # and the reverse recurrence (13: grad h, grad A, grad dt, grad u, grad B, carry); per
        # (batch, dim, L): 2 for the D skip and 4 for the z gate.
        batch, dim, length = u
        flops = 22 * batch * dim * length * A[1]
        flops += batch * dim * length * (2 * (D is not None) + 4 * (z is not None))
        return flops
