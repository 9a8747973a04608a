"""eSSM fast tensor convolution (Liang & Li, "Efficient State Space Model via Fast Tensor Convolution and Block
Diagonalization", arXiv 2402.15290, Sec. 4.2-4.4); the state kernel is built by ssm_plugins._C.

Pipeline per head s (block diagonalisation, Sec. 4.3): v = B_s u_s (batched GEMM), x_i = k_i * v_i for each of the
n state modes by rFFT convolution (torch.fft, linear by zero padding to n_fft >= 2L), y_s = γ C_s x + D_s ⊙ u_s.
The compiled op ``essm_kernel`` writes k_{s,i,j} = Re(g_{s,i} e^{j z_{s,i}}) straight into the FFT buffer,
with the bidirectional flip at its tail (docs/essm.md, 'Bidirectional kernel'); its backward is the compiled
``essm_kernel_bwd``. The GEMMs and FFTs are torch's own (autograd for free), run in float32 (float64 for float64
input) with autocast off (docs/essm.md, 'State kernel').
"""
from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import register_flop_formula

from . import _backend, _validate, reference
from .reference.essm import DISCRETIZATIONS, essm_discretize

_OP = "essm_kernel"

# FLOPs per (mode, lag) of the kernel ops: forward j·Re z, j·Im z, exp, cos, sin, g_re·c − g_im·s;
# backward recomputes e^{jz} and accumulates the four parameter gradients.
KERNEL_FWD_FLOPS = 8
KERNEL_BWD_FLOPS = 22


def fft_size(length: int) -> int:
    """The smallest 2^a 3^b 5^c >= 2L: a linear (not circular) convolution at a size pocketfft/cuFFT do fast."""
    size = 2 * length
    while True:
        rest = size
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return size
        size += 1


def _normalise(u, lambda_re, lambda_im, log_dt, B, C, D, dt_scale, discretization, gbt_alpha, n_fft):
    """Validate user input (ValueError naming the argument); return (u, params in the accumulation dtype, n_fft)."""
    u = _validate.tensor("u", u, 3, "(batch, H, L)")
    batch, width, length = (_validate.traced_int(n) for n in u.shape)
    if length < 1:
        raise ValueError(f"u must have shape (batch, H, L) with L >= 1, got {tuple(u.shape)}")
    B = _validate.tensor("B", B, 3, "(S, n, h)")
    heads, modes, per_head = (_validate.traced_int(n) for n in B.shape)
    if heads == 0 or modes == 0 or heads * per_head != width:
        raise ValueError(f"B must have shape (S, n, h) with S, n >= 1 and S*h = H = {width} (u's channels), "
                         f"got {tuple(B.shape)}")
    for name, t in (("lambda_re", lambda_re), ("lambda_im", lambda_im), ("log_dt", log_dt)):
        _validate.tensor(name, t, 2, "(S, n)")
        if tuple(t.shape) != (heads, modes):
            raise ValueError(f"{name} must have shape (S, n) = {(heads, modes)} (from B), got {tuple(t.shape)}")
    C = _validate.tensor("C", C, 3, "(S, m, n)")
    if C.shape[0] != heads or C.shape[2] != modes or C.shape[1] == 0:
        raise ValueError(f"C must have shape (S, m, n) with S={heads}, n={modes} (from B), got {tuple(C.shape)}")
    if D is not None:
        _validate.tensor("D", D, 2, "(S, m)")
        if tuple(D.shape) != (heads, C.shape[1]) or C.shape[1] != per_head:
            raise ValueError(f"D must have shape (S, m) = {(heads, C.shape[1])} and the skip D ⊙ u needs m == h "
                             f"({C.shape[1]} vs {per_head}), got {tuple(D.shape)}")
    if discretization not in DISCRETIZATIONS:
        raise ValueError(f"discretization must be one of {DISCRETIZATIONS}, got {discretization!r}")
    if not 0.0 <= gbt_alpha <= 1.0:
        raise ValueError(f"gbt_alpha must be in [0, 1], got {gbt_alpha}")
    if isinstance(dt_scale, torch.Tensor) or not dt_scale > 0:
        raise ValueError(f"dt_scale must be a positive number, got {dt_scale!r}")
    if n_fft is None:
        n_fft = fft_size(length)
    elif not isinstance(n_fft, int) or n_fft < 2 * length:
        raise ValueError(f"n_fft must be an int >= 2L = {2 * length}, got {n_fft!r}")
    _validate.same_device(u=u, lambda_re=lambda_re, lambda_im=lambda_im, log_dt=log_dt, B=B, C=C, D=D)
    acc = _validate.compute_dtype(u.dtype)
    params = [None if t is None else t.to(acc) for t in (lambda_re, lambda_im, log_dt, B, C, D)]
    return u, params, n_fft


def _state_kernel(g, z, length, n_fft, bidirectional, device_of):
    """k_j = Re(g e^{jz}) packed in an (…, n_fft) buffer (docs/essm.md, 'State kernel', 'Bidirectional kernel'):
    compiled kernel, or the reference."""
    if _backend.use_kernel(_OP, device_of):
        return torch.ops.ssm_plugins.essm_kernel(g.real, g.imag, z.real, z.imag, length, n_fft, bidirectional)
    return reference.essm_state_kernel(g, z, length, n_fft, bidirectional)


def essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D=None, *, bidirectional=False, conj_sym=True,
              dt_scale=1.0, discretization="zoh", gbt_alpha=0.5, n_fft=None):
    """The eSSM core (the layer up to the head mixer, docs/essm.md, 'Layer forward pass'): fast tensor convolution
    with S heads (paper Eq. 9-13).

    Layout is channels-first, as in the paper's Listing 1: channel c of u belongs to head c // h.

    Args:
        u: (batch, H, L) input, H = S*h. float32/float64, or float16/bfloat16 (computed in float32).
        lambda_re, lambda_im: (S, n) continuous eigenvalues λ = lambda_re + i·lambda_im, already constrained
            (the layer applies the clip Re λ = min(θ, -ε) of Sec. 4.5; Re λ < 0 keeps the kernel decaying).
        log_dt: (S, n) log step, one Δ per mode: Δ = exp(log_dt) · dt_scale.
        B: (S, n, h) real input projection; its shape fixes the number of heads S.
        C: (S, m, n) real output projection. D: (S, m) diagonal skip (needs m == h), or None.
        bidirectional: add the flipped kernel on future samples, shifted by one lag ('Bidirectional kernel'): x_t gets
            Σ_{j=1}^{L-1-t} k_{j-1} v_{t+j}. No extra parameters. Default False: causal, equal to the recurrence.
        conj_sym: each stored mode stands for the pair (λ, λ*): output scale γ = 2 (else 1) ('Heads and state size').
        dt_scale: multiplies Δ (zero-shot resampling, 'Δ scaling').
        discretization: "zoh" (default, all of the paper's experiments) or "gbt" with ``gbt_alpha``
            (0 forward Euler, 0.5 bilinear, 1 backward Euler) (App. B.2.2, Eq. 29).
        n_fft: FFT size, >= 2L; default the smallest 2^a 3^b 5^c >= 2L. Any valid size gives the same result.
    Returns:
        y: (batch, M, L) with M = S*m, heads concatenated in order, in u's dtype.
    """
    u, (lambda_re, lambda_im, log_dt, B, C, D), n_fft = _normalise(
        u, lambda_re, lambda_im, log_dt, B, C, D, dt_scale, discretization, gbt_alpha, n_fft)
    batch, _, length = u.shape
    heads, _, per_head = B.shape
    with _backend.no_autocast(u.device.type):
        g, z = essm_discretize(lambda_re, lambda_im, log_dt, dt_scale, discretization, gbt_alpha)
        K = _state_kernel(g, z, length, n_fft, bidirectional, u)  # (S, n, n_fft)
        u4 = u.to(B.dtype).reshape(batch, heads, per_head, length)
        v = torch.matmul(B, u4)  # (batch, S, n, L): the state-space projection, one GEMM per head
        x = torch.fft.irfft(torch.fft.rfft(v, n=n_fft) * torch.fft.rfft(K), n=n_fft)[..., :length]
        y = torch.matmul(C * (2.0 if conj_sym else 1.0), x)  # (batch, S, m, L)
        if D is not None:
            y = y + D[..., None] * u4
    return y.reshape(batch, -1, length).to(u.dtype)


# ---- autograd, fake (meta) kernels and FLOP counts for the compiled ops -----------------------------
# Registered only when the ops exist (the extension may be missing).
if hasattr(torch.ops.ssm_plugins, _OP):

    @torch.library.register_fake(f"ssm_plugins::{_OP}")
    def _kernel_fake(g_re, g_im, z_re, z_im, L, n_fft, bidirectional):
        return g_re.new_empty((*g_re.shape, n_fft))

    @torch.library.register_fake("ssm_plugins::essm_kernel_bwd")
    def _kernel_bwd_fake(grad_K, g_re, g_im, z_re, z_im, L, bidirectional):
        return tuple(g_re.new_empty(g_re.shape) for _ in range(4))  # contiguous, as the kernel writes them

    def _setup_context(ctx, inputs, output):
        g_re, g_im, z_re, z_im, length, _, bidirectional = inputs
        ctx.save_for_backward(g_re, g_im, z_re, z_im)
        ctx.length, ctx.bidirectional = length, bidirectional

    def _backward(ctx, grad_K):
        grads = torch.ops.ssm_plugins.essm_kernel_bwd(grad_K, *ctx.saved_tensors, ctx.length, ctx.bidirectional)
        return (*grads, None, None, None)

    torch.library.register_autograd(f"ssm_plugins::{_OP}", _backward, setup_context=_setup_context)

    @register_flop_formula(torch.ops.ssm_plugins.essm_kernel)
    def _kernel_flops(g_re, g_im, z_re, z_im, L, n_fft, bidirectional, out_shape=None, **kwargs):
        return KERNEL_FWD_FLOPS * math.prod(g_re) * L

    @register_flop_formula(torch.ops.ssm_plugins.essm_kernel_bwd)
    def _kernel_bwd_flops(grad_K, g_re, g_im, z_re, z_im, L, bidirectional, out_shape=None, **kwargs):
        return KERNEL_BWD_FLOPS * math.prod(g_re) * L
