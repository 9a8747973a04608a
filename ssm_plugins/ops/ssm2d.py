"""2-D SSM kernel ("2-D SSM: A General Spatial Layer for Visual Transformers", arXiv:2306.06635, Sec. 3.1-3.3,
App. D-E; choices beyond the paper: docs/2d-ssm.md) and zero-padded FFT convolution, backed by ssm_plugins._C."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from . import _backend, _validate, reference

_KERNEL_OP = "ssm2d_kernel_fwd"
_CONV_OP = "fft_conv2d"
PARAMETERISATIONS = ("real", "complex", "complex_polar", None)
_COMPLEX_DTYPES = (torch.complex64, torch.complex128)
# Direction d convolves the input flipped along these dims (docs/2d-ssm.md, 'Directions and channel sharing'); the
# flips are their own inverses.
DIRECTION_FLIPS = {4: ((), (-2,), (-1,), (-2, -1)), 2: ((), (-2, -1))}


# ---- 2-D SSM kernel ------------------------------------------------------------------------------------

def _check_param(name, value, count, parameterisation):
    paired = parameterisation in ("complex", "complex_polar")
    what = f"({count}, S, N, 2)" if paired else f"({count}, S, N)"
    if parameterisation is None:
        if not isinstance(value, torch.Tensor) or value.dim() != 3:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{name} must be a real or complex tensor of shape {what}, got {got}")
        if value.dtype not in _validate.FLOAT_DTYPES + _COMPLEX_DTYPES:
            raise ValueError(f"{name} must be a floating or complex tensor, got {value.dtype}")
    else:
        _validate.tensor(name, value, 4 if paired else 3, what)
        if paired:
            _validate.size(name, value, 3, 2, what)
    _validate.size(name, value, 0, count, what)
    return what


def _constrain(A, B, C, parameterisation):
    """Stored parameters -> A1..A4, B1, B2, C1, C2 as used by the recurrence (paper Sec. 3.2, App. E.1;
    docs/2d-ssm.md, 'Parameterisation')."""
    if parameterisation is None:
        return A, B, C
    if parameterisation == "real":
        return torch.sigmoid(A), torch.sigmoid(B), C

    def polar(radius, angle_logit):
        angle = 2 * math.pi * torch.sigmoid(angle_logit)
        return torch.complex(radius * torch.cos(angle), radius * torch.sin(angle))

    A = polar(torch.sigmoid(A[..., 0]), A[..., 1])
    if parameterisation == "complex":  # official code: Cartesian B and C
        return A, torch.complex(torch.sigmoid(B[..., 0]), torch.sigmoid(B[..., 1])), torch.complex(C[..., 0], C[..., 1])
    return A, polar(torch.sigmoid(B[..., 0]), B[..., 1]), polar(C[..., 0], C[..., 1])  # paper text: polar


def fuse_directions(kernels: torch.Tensor) -> torch.Tensor:
    """Per-direction kernels (dirs, n_ssm, H, W) -> one non-causal kernel Kfull (n_ssm, 2H-1, 2W-1) (docs/2d-ssm.md,
    'Fused kernel').

    Kfull[a, b] (stored at [a + H - 1, b + W - 1]) sums K_d over the directions whose flips map it there, so
    ``fft_conv2d(x, Kfull, origin=(H-1, W-1))`` equals the sum over d of F_d(K_d (*) F_d(x)).
    """
    kernels = _validate.tensor("kernels", kernels, 4, "(directions, n_ssm, H, W)")
    dirs, _, height, width = (_validate.traced_int(n) for n in kernels.shape)
    if dirs not in DIRECTION_FLIPS:
        raise ValueError(f"kernels must have shape (directions, n_ssm, H, W) with directions 2 or 4, "
                         f"got {tuple(kernels.shape)}")
    fused = 0
    for kernel, flips in zip(kernels, DIRECTION_FLIPS[dirs]):
        top = 0 if -2 in flips else height - 1
        left = 0 if -1 in flips else width - 1
        placed = kernel.flip(flips) if flips else kernel
        fused = fused + F.pad(placed, (left, width - 1 - left, top, height - 1 - top))
    return fused


def ssm2d_kernel(A, B, C, height, width, *, directions=4, parameterisation="real", fused=False):
    """Kernels of the 2-D SSM layer: normalised impulse responses of the Roesser system (paper Sec. 3.1-3.2;
    docs/2d-ssm.md, 'Normalisation and edge relaxation', 'Directions and channel sharing').

    There are S = directions * n_ssm independent parameter sets; set s = d * n_ssm + m serves direction d
    and channel group m (channel c uses group c mod n_ssm). Shapes by ``parameterisation``:

    * ``"real"`` (default): stored logits A (4, S, N) and B (2, S, N), C (2, S, N);
      A = sigmoid(A), B = sigmoid(B), C as is.
    * ``"complex"`` (official code): A (4, S, N, 2) = (radius logit, angle logit),
      A = sigmoid(r) * exp(2πi sigmoid(θ)); B (2, S, N, 2) = sigmoid(re) + i sigmoid(im); C (2, S, N, 2) = re + i im.
    * ``"complex_polar"`` (paper text): A as ``"complex"``; B = sigmoid(r) exp(2πi sigmoid(θ)) and
      C = r exp(2πi sigmoid(θ)) from (r, θ) pairs (2, S, N, 2).
    * ``None``: A (4, S, N), B (2, S, N), C (2, S, N) are the constrained values themselves, real or complex
      tensors (the inputs of the NumPy reference, docs/2d-ssm.md, 'Reference implementation').

    K[i, j] = e(i, j) / sqrt(N) · Re Σ_n (C1 x^h[i,j] + C2 x^v[i,j]), with the official halving masks and
    edge factors e (2 on the first row and column except (0, 0)). ``height`` ≠ ``width`` is allowed; the
    kernel is prefix-consistent (a larger grid only appends cells).

    Args:
        directions: 4 (flip sets: none, rows, cols, both) or 2 (none, both).
        fused: return the directions merged into one non-causal kernel (see :func:`fuse_directions`).
    Returns:
        (directions, n_ssm, height, width), or (n_ssm, 2*height-1, 2*width-1) when ``fused``; float32
        (float64 for float64/complex128 parameters). Half-precision parameters are computed in float32.
    """
    if parameterisation not in PARAMETERISATIONS:
        raise ValueError(f"parameterisation must be one of {PARAMETERISATIONS}, got {parameterisation!r}")
    if directions not in DIRECTION_FLIPS:
        raise ValueError(f"directions must be 2 or 4, got {directions!r}")
    height, width = _validate.traced_int(height), _validate.traced_int(width)
    for name, value in (("height", height), ("width", width)):
        if isinstance(value, bool) or not hasattr(value, "__index__") or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    height, width = int(height), int(width)
    what = _check_param("A", A, 4, parameterisation)
    n_sets, n_state = A.shape[1], A.shape[2]
    if n_sets == 0 or n_state == 0 or n_sets % directions != 0:
        raise ValueError(f"A must have shape {what} with S a positive multiple of directions ({directions}) "
                         f"and N >= 1, got {tuple(A.shape)}")
    for name, value in (("B", B), ("C", C)):
        expected = _check_param(name, value, 2, parameterisation)
        if value.shape[1:3] != A.shape[1:3]:
            raise ValueError(f"{name} must have shape {expected} with S={n_sets}, N={n_state}, got {tuple(value.shape)}")
    _validate.same_device(A=A, B=B, C=C)

    wide = any(t.dtype in (torch.float64, torch.complex128) for t in (A, B, C))
    acc = torch.float64 if wide else torch.float32
    if parameterisation is None:
        as_complex = any(t.dtype in _COMPLEX_DTYPES for t in (A, B, C))
        target = (torch.complex128 if wide else torch.complex64) if as_complex else acc
        A, B, C = (t.to(target) for t in (A, B, C))
    else:
        A, B, C = _constrain(A.to(acc), B.to(acc), C.to(acc), parameterisation)

    if _backend.use_kernel(_KERNEL_OP, A):
        raw = [torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in (A, B, C)]
        kernels = torch.ops.ssm_plugins.ssm2d_kernel_fwd(*raw, height, width)
    else:
        kernels = reference.ssm2d_kernel(A, B, C, height, width)
    kernels = kernels.reshape(directions, n_sets // directions, height, width)
    return fuse_directions(kernels) if fused else kernels


def _kernel_flops(n_sets: int, n_state: int, height: int, width: int, is_complex: bool) -> int:
    """Two state updates (2 multiply-adds + a scale each) and the output C·x per cell and state coordinate:
    12 real flops; a complex multiply-add counts as 4 real ones."""
    return (48 if is_complex else 12) * n_sets * n_state * height * width


if hasattr(torch.ops.ssm_plugins, _KERNEL_OP):

    @torch.library.register_fake(f"ssm_plugins::{_KERNEL_OP}")
    def _kernel_fake(A, B, C, height, width):
        return A.new_empty((A.shape[1], height, width))

    @torch.library.register_fake("ssm_plugins::ssm2d_kernel_bwd")
    def _kernel_bwd_fake(grad_K, A, B, C, height, width):
        return A.new_empty(A.shape), B.new_empty(B.shape), C.new_empty(C.shape)  # contiguous, as the kernel's

    def _kernel_setup_context(ctx, inputs, output):
        A, B, C, height, width = inputs
        ctx.save_for_backward(A, B, C)
        ctx.grid = (height, width)

    def _kernel_backward(ctx, grad_K):
        A, B, C = ctx.saved_tensors
        dA, dB, dC = torch.ops.ssm_plugins.ssm2d_kernel_bwd(grad_K.contiguous(), A, B, C, *ctx.grid)
        return dA, dB, dC, None, None

    torch.library.register_autograd(f"ssm_plugins::{_KERNEL_OP}", _kernel_backward,
                                    setup_context=_kernel_setup_context)

    @register_flop_formula(torch.ops.ssm_plugins.ssm2d_kernel_fwd)
    def _kernel_fwd_flops(A, B, C, height, width, out_shape=None, **kwargs):
        return _kernel_flops(A[1], A[2], height, width, len(A) == 4)

    @register_flop_formula(torch.ops.ssm_plugins.ssm2d_kernel_bwd)
    def _kernel_bwd_flops(grad_K, A, B, C, height, width, out_shape=None, **kwargs):
        # Recompute the states, then the adjoint (two updates) and six gradient multiply-adds per cell.
        return 3 * _kernel_flops(A[1], A[2], height, width, len(A) == 4)


# ---- zero-padded FFT convolution ------------------------------------------------------------------------

def _fast_length(n: int) -> int:
    """Smallest m >= n with no prime factor above 7 (fast for pocketfft and cuFFT)."""
    while True:
        m = n
        for p in (2, 3, 5, 7):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def _fft_shape(x_shape, kernel_shape, origin) -> tuple[int, int]:
    """Per-axis FFT length with no wrap-around into the cropped window [o, o + L) of the full linear
    convolution (support [0, L + k - 2]): n >= L + k - 1 - o and n >= L + o, and both operands fit."""
    return tuple(_fast_length(max(length + k - 1 - o, length + o, k))
                 for length, k, o in zip(x_shape[-2:], kernel_shape[-2:], origin))


def _acc_dtype(x, kernel):
    return torch.float64 if torch.float64 in (x.dtype, kernel.dtype) else torch.float32


@torch.library.custom_op(f"ssm_plugins::{_CONV_OP}", mutates_args=(), device_types=("cpu", "cuda"))
def _fft_conv2d_op(x: torch.Tensor, kernel: torch.Tensor, origin_h: int, origin_w: int) -> torch.Tensor:
    height, width = x.shape[-2:]
    size = _fft_shape(x.shape, kernel.shape, (origin_h, origin_w))
    acc = _acc_dtype(x, kernel)
    spectrum = torch.fft.rfft2(x.to(acc), s=size) * torch.fft.rfft2(kernel.to(acc), s=size)
    full = torch.fft.irfft2(spectrum, s=size)
    return full[..., origin_h:origin_h + height, origin_w:origin_w + width].to(x.dtype).contiguous()


@torch.library.custom_op(f"ssm_plugins::{_CONV_OP}_bwd", mutates_args=(), device_types=("cpu", "cuda"))
def _fft_conv2d_bwd_op(grad: torch.Tensor, x: torch.Tensor, kernel: torch.Tensor, origin_h: int,
                       origin_w: int) -> tuple[torch.Tensor, torch.Tensor]:
    # The forward is crop(circular_conv(pad(x), pad(kernel))) on the FFT grid, so its exact adjoint is a
    # circular correlation with the zero-padded gradient: multiply by the conjugate spectrum.
    height, width = x.shape[-2:]
    n1, n2 = size = _fft_shape(x.shape, kernel.shape, (origin_h, origin_w))
    acc = _acc_dtype(x, kernel)
    placed = F.pad(grad.to(acc), (origin_w, n2 - origin_w - width, origin_h, n1 - origin_h - height))
    grad_spectrum = torch.fft.rfft2(placed)

    def correlate(other, out_shape):
        product = grad_spectrum * torch.fft.rfft2(other.to(acc), s=size).conj()
        product = product.sum_to_size(*out_shape[:-2], *product.shape[-2:])  # undo broadcasting
        return torch.fft.irfft2(product, s=size)[..., :out_shape[-2], :out_shape[-1]]

    grad_x = correlate(kernel, x.shape).to(x.dtype).contiguous()
    grad_kernel = correlate(x, kernel.shape).to(kernel.dtype).contiguous()
    return grad_x, grad_kernel


@_fft_conv2d_op.register_fake
def _fft_conv2d_fake(x, kernel, origin_h, origin_w):
    batch = torch.broadcast_shapes(x.shape[:-2], kernel.shape[:-2])
    return x.new_empty((*batch, *x.shape[-2:]))


@_fft_conv2d_bwd_op.register_fake
def _fft_conv2d_bwd_fake(grad, x, kernel, origin_h, origin_w):
    return x.new_empty(x.shape), kernel.new_empty(kernel.shape)  # the op returns .contiguous() gradients


def _conv_setup_context(ctx, inputs, output):
    x, kernel, origin_h, origin_w = inputs
    ctx.save_for_backward(x, kernel)
    ctx.origin = (origin_h, origin_w)


def _conv_backward(ctx, grad):
    x, kernel = ctx.saved_tensors
    grad_x, grad_kernel = _fft_conv2d_bwd_op(grad.contiguous(), x, kernel, *ctx.origin)
    return grad_x, grad_kernel, None, None


_fft_conv2d_op.register_autograd(_conv_backward, setup_context=_conv_setup_context)


def _rfft2_flops(batch: int, size: tuple[int, int]) -> int:
    """A real 2-D FFT of n = n1*n2 points: half of the 5 n log2 n of a complex FFT."""
    n = size[0] * size[1]
    return int(round(2.5 * batch * n * math.log2(n))) if n > 1 else 0


def _fft_conv2d_flops(x_shape, kernel_shape, origin) -> int:
    """rfft2 of both operands, a complex product (6 flops) per frequency of the output batch, irfft2."""
    size = _fft_shape(x_shape, kernel_shape, origin)
    out_batch = math.prod(torch.broadcast_shapes(tuple(x_shape[:-2]), tuple(kernel_shape[:-2])))
    frequencies = size[0] * (size[1] // 2 + 1)
    return (_rfft2_flops(math.prod(x_shape[:-2]), size) + _rfft2_flops(math.prod(kernel_shape[:-2]), size)
            + 6 * out_batch * frequencies + _rfft2_flops(out_batch, size))


def _fft_conv2d_bwd_flops(x_shape, kernel_shape, origin) -> int:
    """rfft2 of the gradient and both operands, two conjugate products, irfft2 of both gradients."""
    size = _fft_shape(x_shape, kernel_shape, origin)
    out_batch = math.prod(torch.broadcast_shapes(tuple(x_shape[:-2]), tuple(kernel_shape[:-2])))
    x_batch, kernel_batch = math.prod(x_shape[:-2]), math.prod(kernel_shape[:-2])
    frequencies = size[0] * (size[1] // 2 + 1)
    return (_rfft2_flops(out_batch, size) + 2 * _rfft2_flops(x_batch, size) + 2 * _rfft2_flops(kernel_batch, size)
            + 12 * out_batch * frequencies)


@register_flop_formula(torch.ops.ssm_plugins.fft_conv2d)
def _conv_fwd_flops(x, kernel, origin_h, origin_w, out_shape=None, **kwargs):
    return _fft_conv2d_flops(x, kernel, (origin_h, origin_w))


@register_flop_formula(torch.ops.ssm_plugins.fft_conv2d_bwd)
def _conv_bwd_flops(grad, x, kernel, origin_h, origin_w, out_shape=None, **kwargs):
    return _fft_conv2d_bwd_flops(x, kernel, (origin_h, origin_w))


def fft_conv2d(x, kernel, origin=(0, 0)):
    """Linear (zero-padded, non-circular) 2-D convolution of the last two dims, via the FFT.

        y[..., i, j] = Σ_{a,b} kernel[..., a, b] · x[..., i + o1 - a, j + o2 - b]    (x = 0 outside its grid)

    The output has x's grid (H, W). ``origin`` = (o1, o2) is the kernel tap aligned with each output cell:
    (0, 0) gives the causal-from-top-left convolution of the 2-D SSM (paper App. B, a kernel of x's size);
    ((kh-1)//2, (kw-1)//2) a "same" convolution; (H-1, W-1) applies the fused kernel of
    :func:`fuse_directions`. The kernel may be larger than x.

    Implemented with torch.fft (rfft2/irfft2 on grids zero-padded so nothing wraps around; cuFFT on GPU)
    as a custom op with an FFT backward and a FLOP formula (its transforms and the spectral product).
    Accumulates in float32 (float64 if either input is float64), so half-precision inputs work at any size.

    Args:
        x: (..., H, W). kernel: (..., kh, kw); its leading dims broadcast against x's, e.g. x (batch,
            channels, H, W) with a per-channel kernel (channels, kh, kw).
        origin: (o1, o2) with 0 <= o1 < kh and 0 <= o2 < kw.
    Returns:
        (broadcast leading dims, H, W) in x's dtype.
    """
    x = _validate.tensor("x", x, tuple(range(2, 9)), "(..., H, W)")
    kernel = _validate.tensor("kernel", kernel, tuple(range(2, 9)), "(..., kh, kw)")
    if min(x.shape[-2:]) < 1 or min(kernel.shape[-2:]) < 1:
        raise ValueError(f"x and kernel must have non-empty grids, got x {tuple(x.shape)}, kernel {tuple(kernel.shape)}")
    try:
        torch.broadcast_shapes(x.shape[:-2], kernel.shape[:-2])
    except RuntimeError:
        raise ValueError(f"kernel's leading dims {tuple(kernel.shape[:-2])} must broadcast against x's "
                         f"{tuple(x.shape[:-2])}") from None
    if isinstance(origin, (tuple, list)):
        origin = tuple(_validate.traced_int(o) for o in origin)
    if (not isinstance(origin, (tuple, list)) or len(origin) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in origin)
            or not (0 <= origin[0] < kernel.shape[-2] and 0 <= origin[1] < kernel.shape[-1])):
        raise ValueError(f"origin must be two ints (o1, o2) with 0 <= o1 < kh={kernel.shape[-2]} and "
                         f"0 <= o2 < kw={kernel.shape[-1]}, got {origin!r}")
    _validate.same_device(x=x, kernel=kernel)
    # torch.fft is compiled on every device, so the custom op (exact FFT backward, FLOP count) always runs
    if not _backend.reference_forced():
        return _fft_conv2d_op(x, kernel, *origin)
    return reference.fft_conv2d(x, kernel, tuple(origin))
