"""eSSM core (Liang & Li, "Efficient State Space Model via Fast Tensor Convolution and Block Diagonalization",
arXiv 2402.15290, Sec. 3.3-4.4; docs/essm.md): discretisation, state kernel, FFT convolution, recurrence, dense
operator.

Shapes, per head s of S: u (batch, S*h, L) channels-first; lambda_re, lambda_im, log_dt (S, n);
B (S, n, h); C (S, m, n); D (S, m) with m == h. Output y (batch, S*m, L), before the head mixer.
Everything runs in float32 (float64 for float64 input) and is returned in u's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

DISCRETIZATIONS = ("zoh", "gbt")


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def essm_discretize(lambda_re, lambda_im, log_dt, dt_scale=1.0, discretization="zoh", gbt_alpha=0.5):
    """Per-mode gain g and log discrete eigenvalue z, complex (S, n), so that the kernel is Re(g e^{jz}).

    ZOH (Eq. 4, the default): z = λΔ, g = (e^z - 1)/λ.
    GBT (App. B.2.2, Eq. 29): λ̄ = (1 + (1-α)Δλ)/(1 - αΔλ), z = Log λ̄ (principal branch), g = Δ/(1 - αΔλ).
    Δ = exp(log_dt) · dt_scale (docs/essm.md, 'Δ scaling').
    """
    lam = torch.complex(lambda_re, lambda_im)
    dt = torch.exp(log_dt) * dt_scale
    if discretization == "zoh":
        z = lam * dt
        return (torch.exp(z) - 1) / lam, z
    if discretization == "gbt":
        denom = 1 - gbt_alpha * dt * lam
        return dt / denom, torch.log((1 + (1 - gbt_alpha) * dt * lam) / denom)
    raise ValueError(f"discretization must be one of {DISCRETIZATIONS}, got {discretization!r}")


def essm_state_kernel(g, z, length, n_fft=None, bidirectional=False):
    """k_j = Re(g e^{jz}), j = 0..L-1 (docs/essm.md, 'State kernel'), as (S, n, L); packed into an n_fft buffer
    when n_fft is given.

    Packing (docs/essm.md, 'Bidirectional kernel'): lags 0..L-1 at the front; with ``bidirectional`` the flipped
    kernel k_{L-1}..k_0 at the tail [n_fft-L, n_fft), which a circular convolution reads as weight k_{j-1} on the
    future sample t+j.
    """
    lags = torch.arange(length, dtype=g.real.dtype, device=g.device)
    k = torch.real(g[..., None] * torch.exp(z[..., None] * lags))
    if n_fft is None:
        return k
    packed = F.pad(k, (0, n_fft - length))
    if bidirectional:
        packed = packed + F.pad(torch.flip(k, (-1,)), (n_fft - length, 0))
    return packed


def _split_heads(u, B):
    batch, _, length = u.shape
    heads, _, h = B.shape
    return u.reshape(batch, heads, h, length)


def _project_out(x, u4, C, D, conj_sym):
    """y = γ C x + D ⊙ u per head, concatenated in head order (Eq. 14; docs/essm.md, 'Heads and state size');
    γ = 2 under conj_sym."""
    gamma = 2.0 if conj_sym else 1.0
    y = gamma * torch.einsum("smn,bsnl->bsml", C, x)
    if D is not None:
        y = y + D[None, :, :, None] * u4
    return y.reshape(y.shape[0], -1, y.shape[-1])


def _cast(acc, *tensors):
    return [None if t is None else t.to(acc) for t in tensors]


def essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D=None, *, bidirectional=False, conj_sym=True,
              dt_scale=1.0, discretization="zoh", gbt_alpha=0.5, n_fft=None):
    """The fast tensor convolution (Sec. 4.2, Eq. 9-13): v = B u, x_i = k_i * v_i by rFFT over the N state channels,
    y = γ C x + D u. Linear convolution by zero padding to n_fft >= 2L (default 2L)."""
    acc = _acc_dtype(u.dtype)
    u_acc, lambda_re, lambda_im, log_dt, B, C, D = _cast(acc, u, lambda_re, lambda_im, log_dt, B, C, D)
    length = u.shape[-1]
    n_fft = 2 * length if n_fft is None else n_fft
    g, z = essm_discretize(lambda_re, lambda_im, log_dt, dt_scale, discretization, gbt_alpha)
    K = essm_state_kernel(g, z, length, n_fft, bidirectional)  # (S, n, n_fft)
    u4 = _split_heads(u_acc, B)  # (batch, S, h, L)
    v = torch.einsum("snh,bshl->bsnl", B, u4)  # (batch, S, n, L)
    x = torch.fft.irfft(torch.fft.rfft(v, n=n_fft) * torch.fft.rfft(K, n=n_fft), n=n_fft)[..., :length]
    return _project_out(x, u4, C, D, conj_sym).to(u.dtype)


def essm_recurrent(u, lambda_re, lambda_im, log_dt, B, C, D=None, *, conj_sym=True, dt_scale=1.0,
                   discretization="zoh", gbt_alpha=0.5):
    """Causal recurrent mode (docs/essm.md, 'Recurrent mode'), one step at a time:
    σ_t = e^{z} ⊙ σ_{t-1} + g ⊙ (B u_t),  y_t = γ C Re(σ_t) + D ⊙ u_t,  σ_{-1} = 0."""
    acc = _acc_dtype(u.dtype)
    u_acc, lambda_re, lambda_im, log_dt, B, C, D = _cast(acc, u, lambda_re, lambda_im, log_dt, B, C, D)
    g, z = essm_discretize(lambda_re, lambda_im, log_dt, dt_scale, discretization, gbt_alpha)
    decay = torch.exp(z)  # λ̄, (S, n)
    u4 = _split_heads(u_acc, B)
    batch, heads = u4.shape[:2]
    v = torch.einsum("snh,bshl->bsnl", B, u4)
    sigma = torch.zeros(batch, heads, B.shape[1], dtype=g.dtype, device=u.device)
    states = []
    for v_t in v.unbind(-1):  # unbind: one O(L) backward, not a full-size zero grad per step
        sigma = decay * sigma + g * v_t
        states.append(sigma.real)
    x = torch.stack(states, dim=-1)
    return _project_out(x, u4, C, D, conj_sym).to(u.dtype)


def essm_dense(u, lambda_re, lambda_im, log_dt, B, C, D=None, *, bidirectional=False, conj_sym=True,
               dt_scale=1.0, discretization="zoh", gbt_alpha=0.5):
    """The explicit dense Toeplitz operator per mode (docs/essm.md, 'Bidirectional kernel'), O(L²):
    x_t = Σ_{j=0}^{t} k_j v_{t-j}  +  [bidirectional] Σ_{j=1}^{L-1-t} k_{j-1} v_{t+j}."""
    acc = _acc_dtype(u.dtype)
    u_acc, lambda_re, lambda_im, log_dt, B, C, D = _cast(acc, u, lambda_re, lambda_im, log_dt, B, C, D)
    length = u.shape[-1]
    g, z = essm_discretize(lambda_re, lambda_im, log_dt, dt_scale, discretization, gbt_alpha)
    k = essm_state_kernel(g, z, length)  # (S, n, L)
    t = torch.arange(length, device=u.device)
    lag = t[:, None] - t[None, :]  # row t (output), column t' (input): lag t - t'
    past = (lag >= 0).to(acc) * k[..., lag.clamp(min=0)]  # T[t, t'] = k_{t-t'} for t' <= t
    T = past
    if bidirectional:
        future = (lag < 0).to(acc) * k[..., (-lag - 1).clamp(min=0)]  # T[t, t'] = k_{t'-t-1} for t' > t
        T = past + future
    u4 = _split_heads(u_acc, B)
    v = torch.einsum("snh,bshl->bsnl", B, u4)
    x = torch.einsum("snta,bsna->bsnt", T, v)
    return _project_out(x, u4, C, D, conj_sym).to(u.dtype)
