"""2-D SSM kernel and zero-padded FFT convolution ("2-D SSM: A General Spatial Layer for Visual Transformers",
arXiv:2306.06635, Sec. 3.1-3.3, App. B; choices beyond the paper: docs/2d-ssm.md).

The kernel is the impulse response of the normalised Roesser recurrence (docs/2d-ssm.md, 'Grid convention' and
'Normalisation and edge relaxation')

    x^h[0,0] = B1,  x^v[0,0] = B2
    x^h[i,j] = sh(i,j) (A1 x^h[i,j-1] + A2 x^v[i,j-1])      (j >= 1, else 0)
    x^v[i,j] = sv(i,j) (A3 x^h[i-1,j] + A4 x^v[i-1,j])      (i >= 1, else 0)
    K[i,j]   = e(i,j) / sqrt(N) · Re Σ_n (C1 x^h[i,j] + C2 x^v[i,j])

run here as an anti-diagonal wavefront: every cell of the diagonal d = i + j depends only on diagonal
d - 1, so each of the H + W - 1 steps is one vectorised update (docs/2d-ssm.md, 'Kernel computation').
"""
from __future__ import annotations

import math

import torch


def halving_masks(height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """sh, sv as (H, W) float64 tensors: 1/2 where both incoming states are non-zero, else 1 (docs/2d-ssm.md,
    'Normalisation and edge relaxation')."""
    i = torch.arange(height)[:, None]
    j = torch.arange(width)[None, :]
    sh = ((i == 0) & (j == 1)) | ((i >= 1) & (j >= 2))
    sv = ((j == 0) & (i == 1)) | ((j >= 1) & (i >= 2))
    half_or_one = lambda mask: 1.0 - 0.5 * mask.double()
    return half_or_one(sh), half_or_one(sv)


def edge_factors(height: int, width: int) -> torch.Tensor:
    """e ('Normalisation and edge relaxation'): 2 on the first row and column except (0, 0), 1 elsewhere."""
    i = torch.arange(height)[:, None]
    j = torch.arange(width)[None, :]
    return 1.0 + ((i == 0) ^ (j == 0)).double()


def ssm2d_kernel(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Normalised impulse response K (S, height, width) from constrained parameters.

    A: (4, S, N) = A1..A4, B: (2, S, N) = B1, B2, C: (2, S, N) = C1, C2; real or complex (complex: the
    real part of K is returned). K has A's real dtype.
    """
    A1, A2, A3, A4 = (a[..., None] for a in A)  # (S, N, 1): broadcast over the diagonal slots
    B1, B2 = (b[..., None] for b in B)
    C1, C2 = (c[..., None] for c in C)
    n_state = A.shape[-1]
    real = A.real.dtype
    sh, sv = (m.to(device=A.device, dtype=real) for m in halving_masks(height, width))
    rows = torch.arange(height, device=A.device)
    first_slot = (rows == 0).to(real)

    def shift_down(x):  # slot i takes slot i - 1 of the previous diagonal: the cell above
        return torch.cat([torch.zeros_like(x[..., :1]), x[..., :-1]], dim=-1)

    # Slot i of diagonal d holds cell (i, d - i); slots outside the grid stay zero.
    xh, xv = B1 * first_slot, B2 * first_slot
    outputs = [(C1 * xh + C2 * xv).sum(1).real]
    for d in range(1, height + width - 1):
        cols = d - rows
        inside = (cols >= 0) & (cols < width)
        at = (rows, cols.clamp(0, width - 1))
        update_h = sh[at] * (inside & (cols >= 1))
        update_v = sv[at] * (inside & (rows >= 1))
        xh, xv = (update_h * (A1 * xh + A2 * xv),
                  update_v * (A3 * shift_down(xh) + A4 * shift_down(xv)))
        outputs.append((C1 * xh + C2 * xv).sum(1).real)
    by_diagonal = torch.stack(outputs, dim=-1)  # (S, H, H + W - 1): [s, i, d]
    diagonal_of_cell = (rows[:, None] + torch.arange(width, device=A.device)[None, :]).expand(A.shape[1], -1, -1)
    K = by_diagonal.gather(-1, diagonal_of_cell)
    return K * edge_factors(height, width).to(device=A.device, dtype=real) / math.sqrt(n_state)


def fft_conv2d(x: torch.Tensor, kernel: torch.Tensor, origin: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """y[..., i, j] = Σ_{a,b} kernel[..., a, b] · x[..., i + o1 - a, j + o2 - b], x zero outside its grid.

    With origin (0, 0) this is the layer's causal convolution (paper App. B, Eq. 22-23): rfft2 of both operands
    zero-padded to the full linear-convolution size (H + kh - 1, W + kw - 1), so nothing wraps around;
    product, irfft2, crop. Accumulates in float32 (float64 if either input is float64); returns x's dtype.
    """
    height, width = x.shape[-2:]
    kh, kw = kernel.shape[-2:]
    acc = torch.float64 if torch.float64 in (x.dtype, kernel.dtype) else torch.float32
    size = (height + kh - 1, width + kw - 1)
    spectrum = torch.fft.rfft2(x.to(acc), s=size) * torch.fft.rfft2(kernel.to(acc), s=size)
    full = torch.fft.irfft2(spectrum, s=size)
    o1, o2 = origin
    return full[..., o1:o1 + height, o2:o2 + width].to(x.dtype)
