"""Quasi-separable (non-causal) mixing y = Q x in linear time (MambaMixer, arXiv:2403.19888 v2, Sec. 2.1 Eq. 6-8,
App. D; kernels K2/K3 and our reading of Q: docs/mambamixer.md, 'QS operator', 'Kernels K1-K3')."""
from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

from . import _backend, _validate, reference
from .qs_mix_chunked import qs_mix_chunked

_OP = "qs_mix_fwd"
_SHIFTS = ("exact", "hydra")
# Features a head needs before 'auto' takes the chunked form: its (chunk x chunk) decay matrices are shared by the
# head's P features, so with one feature (the Mamba layout) they cost chunk/N times the scan's state updates.
_CHUNKED_MIN_FEATURES = 16


def _normalise(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev, qs_shift):
    """Validate user input (ValueError naming the argument); return the raw op's arguments in the head
    layout and whether x came in the Mamba layout (the output is then transposed back)."""
    if qs_shift not in _SHIFTS:
        raise ValueError(f"qs_shift must be one of {_SHIFTS}, got {qs_shift!r}")
    x = _validate.tensor("x", x, (3, 4), "(batch, L, H, P) or, Mamba layout, (batch, dim, L)")
    mamba = x.dim() == 3
    if mamba:
        batch, heads, length = x.shape
        x = x.transpose(1, 2).unsqueeze(-1)  # (batch, L, dim, 1): a view, the kernels take strides
        seq_what, bc_what = "(batch, dim, L)", "(batch, N, L) or (batch, groups, N, L)"
    else:
        batch, length, heads, _ = x.shape
        seq_what, bc_what = "(batch, L, H)", "(batch, L, N) or (batch, L, groups, N)"
    a_what = "(dim,) or (dim, N)" if mamba else "(H,) or (H, N)"

    def per_token(name, t):  # dt, dt_rev -> (batch, L, H)
        t = _validate.tensor(name, t, 3, seq_what)
        want = (batch, heads, length) if mamba else (batch, length, heads)
        if tuple(t.shape) != want:
            raise ValueError(f"{name} must have shape {seq_what} = {want}, got {tuple(t.shape)}")
        return t.transpose(1, 2) if mamba else t

    def selection(name, t):  # B, C, B_rev, C_rev -> (batch, L, groups, N)
        t = _validate.tensor(name, t, (3, 4), bc_what)
        if mamba:
            t4 = t if t.dim() == 4 else t.unsqueeze(1)
            t4 = t4.permute(0, 3, 1, 2)
        else:
            t4 = t if t.dim() == 4 else t.unsqueeze(2)
        if t4.shape[0] != batch or t4.shape[1] != length:
            raise ValueError(f"{name} must have shape {bc_what} with batch={batch}, L={length}, got {tuple(t.shape)}")
        if t4.shape[2] == 0 or heads % t4.shape[2] != 0:
            raise ValueError(f"{name}: groups ({t4.shape[2]}) must divide the number of heads ({heads})")
        return t4

    dt, dt_rev = per_token("dt", dt), per_token("dt_rev", dt_rev)
    B, C, B_rev, C_rev = (selection(n, t) for n, t in (("B", B), ("C", C), ("B_rev", B_rev), ("C_rev", C_rev)))
    n_state = B.shape[3]
    for name, t in (("C", C), ("B_rev", B_rev), ("C_rev", C_rev)):
        if t.shape[2:] != B.shape[2:]:
            raise ValueError(f"{name} must have B's groups and N {tuple(B.shape[2:])}, got {tuple(t.shape[2:])}")

    def state_matrix(name, t):  # A, A_rev -> (H, N), or (H, 1) for a scalar per head (one exp per step)
        t = _validate.tensor(name, t, (1, 2), a_what)
        if t.shape[0] != heads or (t.dim() == 2 and t.shape[1] != n_state):
            raise ValueError(f"{name} must have shape {a_what} with H={heads}, N={n_state}, got {tuple(t.shape)}")
        return t[:, None] if t.dim() == 1 else t

    A, A_rev = state_matrix("A", A), state_matrix("A_rev", A_rev)
    gamma = _validate.tensor("gamma", gamma, (2, 3), f"{seq_what} or without batch")
    if mamba:
        gamma = gamma.transpose(-1, -2)
    if tuple(gamma.shape[-2:]) != (length, heads) or (gamma.dim() == 3 and gamma.shape[0] != batch):
        raise ValueError(f"gamma must have shape {seq_what} or without batch, got {tuple(gamma.shape)}")
    gamma = gamma.expand(batch, length, heads)  # a static (L, H) gamma is read with batch stride 0
    for name, t in (("dt_bias", dt_bias), ("dt_bias_rev", dt_bias_rev)):
        if t is not None:
            _validate.tensor(name, t, 1, "(H,)")
            _validate.size(name, t, 0, heads, "(H,)")
    _validate.same_device(x=x, dt=dt, A=A, B=B, C=C, dt_rev=dt_rev, A_rev=A_rev, B_rev=B_rev, C_rev=C_rev,
                          gamma=gamma, dt_bias=dt_bias, dt_bias_rev=dt_bias_rev)
    acc = _validate.compute_dtype(x.dtype)
    cast = (lambda t, dtype=acc: None if t is None else t.to(dtype))
    # dt, B, C (both directions) in one dtype, e.g. a bf16 projection's outputs under autocast, are passed as they
    # are (the op converts what its kernels do not read); else all in acc's. gamma, A and the biases in acc's.
    selection = (dt, B, C, dt_rev, B_rev, C_rev)
    sel_dtype = dt.dtype if all(t.dtype == dt.dtype for t in selection) else acc
    dt, B, C, dt_rev, B_rev, C_rev = (cast(t, sel_dtype) for t in selection)
    args = (x, dt, cast(A), B, C, dt_rev, cast(A_rev), B_rev, C_rev, *(cast(t) for t in (gamma, dt_bias, dt_bias_rev)))
    return args, mamba


def qs_mix(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, *, dt_bias=None, dt_bias_rev=None,
           dt_softplus=False, qs_shift="exact"):
    """Quasi-separable mixing y = Q x (paper Eq. 8; docs/mambamixer.md 'QS operator'), in O(L) as a strict
    forward scan, a strict reversed scan and the free diagonal:  y = L_s x + U_s x + γ ⊙ x, with

        Q[t, k] = C_t·(Π_{j=k+1..t} Ā_j) B̄_k  (t > k),   γ_t  (t = k),   C'_t·(Π_{j=t..k-1} Ā'_j) B̄'_k  (t < k)

    Ā_j = exp(Δ_j A), B̄_k = Δ_k B_k, Δ = softplus(dt + dt_bias) if ``dt_softplus`` else dt + dt_bias; primed
    (``*_rev``) quantities are the backward direction's own parameters at the same original positions.
    One Q per (batch, head) mixes all P features of the head. Forward + backward S6 (two scans with D = 0,
    the second on the flipped sequence) is exactly the case γ_t = Δ_t C_t·B_t + Δ'_t C'_t·B'_t.

    Two layouts (chosen by x.dim()); every tensor may be strided, e.g. the channel mixer passes
    ``u.transpose(1, 2)`` views to scan along channels with the tokens as features:

    * head layout (K2, QSMixer's scalar A; also diagonal A):
        x (batch, L, H, P); dt, dt_rev (batch, L, H); A, A_rev (H,) scalar per head or (H, N) diagonal;
        B, C, B_rev, C_rev (batch, L, N) or (batch, L, groups, N) with H % groups == 0;
        gamma (batch, L, H) or static (L, H); dt_bias, dt_bias_rev (H,). Returns (batch, L, H, P).
    * Mamba layout (K3, ``selective_scan``'s layout, one head per channel, P = 1):
        x, dt, dt_rev (batch, dim, L); A, A_rev (dim, N) or (dim,); B, C, B_rev, C_rev (batch, N, L) or
        (batch, groups, N, L); gamma (batch, dim, L) or static (dim, L); dt_bias, dt_bias_rev (dim,).
        Returns (batch, dim, L).

    Args:
        qs_shift: 'exact' (default, [D], docs/mambamixer.md 'QS operator'): the strict scan reads C_t·(Ā_t h_{t-1}),
            the Q above (Eq. 8). This equals "inclusive scan minus C_t·B̄_t x_t" but is computed directly (the
            "shift" way), so nothing cancels. 'hydra': Hydra's roll of the inclusive scan, C_{t-1}·h_{t-1}
            (and C'_{t+1}·h'_{t+1} backward), a different but equally quasi-separable Q.
        dt_softplus, dt_bias, dt_bias_rev: Δ = softplus(dt + dt_bias) as in Mamba's fused scan, so layers
            pass the raw projection and the bias; the bias gradients are summed in the op's backward.
    Algorithms: the scan kernels (CPU, CUDA), or for scalar A the chunked form of App. D (``qs_mix_chunked``:
    batched matmuls over chunks of up to max(64, P) steps, autograd by PyTorch), which runs on CUDA when a head has
    at least 16 features (the QSMixer's heads, the channel mixer's tokens) and wherever there is no compiled
    kernel. ``SSM_PLUGINS_QS=scan`` or ``chunked`` overrides that choice; ``SSM_PLUGINS_BACKEND=reference`` runs
    the sequential oracle.
    Dtypes: float32, float64, float16, bfloat16 x; accumulation in float32 (float64 for float64 x); the
    output has x's dtype. dt, B, C and their ``_rev`` in one dtype are taken in it (their gradients come back in
    it; the kernels read x's dtype or the accumulation dtype without a cast); in several dtypes they, like A,
    gamma and the biases, are taken in the accumulation dtype.
    All arguments are differentiable (compiled backward ``qs_mix_bwd``).
    """
    args, mamba = _normalise(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev, qs_shift)
    if _chunked_form(*args):
        y = qs_mix_chunked(*args, dt_softplus=bool(dt_softplus), qs_shift=qs_shift)
    elif _backend.use_kernel(_OP, args[0]):
        y = torch.ops.ssm_plugins.qs_mix_fwd(*args, bool(dt_softplus), qs_shift == "hydra")
    else:
        y = reference.qs_mix(*args, dt_softplus=bool(dt_softplus), qs_shift=qs_shift)
    return y[..., 0].transpose(1, 2) if mamba else y


def _chunked_form(x, dt, A, B, C, dt_rev, A_rev, *_):
    """Whether a call runs the chunked matmul form (qs_mix_chunked) instead of the scan kernels: for scalar A on
    CUDA with at least _CHUNKED_MIN_FEATURES features a head, where its batched matmuls replace the kernels'
    sequential scans (K2's tensor-core form, docs/mambamixer.md), and for scalar A where the device has no
    compiled kernel (the extension missing or built without CUDA), in place of the oracle's Python loop over L;
    unless SSM_PLUGINS_QS says otherwise."""
    if _backend.reference_forced():
        return False
    choice = _backend.qs_algorithm()
    scalar = A.shape[1] == 1 and A_rev.shape[1] == 1
    if choice == "chunked" and not scalar:
        raise ValueError(f"SSM_PLUGINS_QS=chunked needs scalar A per head (A and A_rev of shape (H,)), got "
                         f"A {tuple(A.shape)} and A_rev {tuple(A_rev.shape)} in the head layout")
    if choice != "auto":
        return choice == "chunked"
    device = x.device.type
    wide_on_cuda = device == "cuda" and x.shape[3] >= _CHUNKED_MIN_FEATURES
    return scalar and (wide_on_cuda or not _backend.has_kernel(_OP, device))


# ---- autograd, fake (meta) kernels and FLOP counts for the compiled ops -------------------------------
# Registered only when the ops exist (the extension may be missing).
if hasattr(torch.ops.ssm_plugins, _OP):

    @torch.library.register_fake(f"ssm_plugins::{_OP}")
    def _fwd_fake(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev, dt_softplus,
                  hydra_shift):
        return torch.empty_like(x)

    @torch.library.register_fake("ssm_plugins::qs_mix_bwd")
    def _bwd_fake(grad_y, x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev, dt_softplus,
                  hydra_shift):
        like = lambda t, dtype=None: torch.empty(t.shape, dtype=dtype or t.dtype, device=t.device)  # noqa: E731
        # all contiguous; dx in x's layout (a view of (batch, dim, L) activations takes it without a transposed copy);
        # ddt and ddt_rev in A's dtype whatever dt's (qs_mix.h: bwd_result)
        return (torch.empty_like(x), like(dt, A.dtype), *(like(t) for t in (A, B, C)), like(dt_rev, A.dtype),
                *(like(t) for t in (A_rev, B_rev, C_rev, gamma)))

    def _setup_context(ctx, inputs, output):
        ctx.save_for_backward(*[t for t in inputs[:12] if t is not None])
        ctx.present = [t is not None for t in inputs[:12]]
        ctx.flags = inputs[12:]

    def _backward(ctx, grad_y):
        saved = iter(ctx.saved_tensors)
        inputs = [next(saved) if p else None for p in ctx.present]
        grads = list(torch.ops.ssm_plugins.qs_mix_bwd(grad_y, *inputs, *ctx.flags))
        ddt, ddt_rev = grads[1], grads[5]
        # dt_bias is added to every token's dt: its gradient is the sum of dt's over batch and L (in A's dtype, before
        # ddt takes a bf16 dt's dtype).
        dbias = ddt.sum((0, 1)) if inputs[10] is not None else None
        dbias_rev = ddt_rev.sum((0, 1)) if inputs[11] is not None else None
        grads[1], grads[5] = ddt.to(inputs[1].dtype), ddt_rev.to(inputs[5].dtype)
        return (*grads, dbias, dbias_rev, None, None)

    torch.library.register_autograd(f"ssm_plugins::{_OP}", _backward, setup_context=_setup_context)

    def _scan_flops(x_shape, B_shape, per_element, per_state):
        batch, length, heads, feat = x_shape
        n_state = B_shape[3]
        return 2 * batch * length * heads * n_state * (per_element * feat + per_state)

    @register_flop_formula(getattr(torch.ops.ssm_plugins, _OP))
    def _fwd_flops(x, dt, A, B, C, *args, out_shape=None, **kwargs):
        # Per direction and (batch, t, head, n): Δ·A, exp, Δ·B (3); per feature p: decay, C·z FMA and the
        # state FMA (5). Plus γ x and the two additions per output element.
        batch, length, heads, feat = x
        return _scan_flops(x, B, 5, 3) + 3 * batch * length * heads * feat

    @register_flop_formula(torch.ops.ssm_plugins.qs_mix_bwd)
    def _bwd_flops(grad_y, x, dt, A, B, C, *args, out_shape=None, **kwargs):
        # Per direction: the scan is replayed twice (checkpoints, then per chunk; 3 per state element) and
        # the adjoint step costs 11 per state element (λ·x, λ·h, dx, μ, λ update, dC) and 8 per (t, h, n).
        # Plus dγ and γ·g per output element.
        batch, length, heads, feat = x
        return _scan_flops(x, B, 17, 8) + 4 * batch * length * heads * feat
