"""FLOP formulas for torch's FFT ops, which ``torch.utils.flop_counter.FlopCounterMode`` does not count.

eSSM convolves by rFFT (``essm_conv``), and the pure-PyTorch references of the 2-D SSM convolution use
``torch.fft`` too; without these formulas their FLOPs silently read 0. Imported by ``ssm_plugins.ops``, so any
FlopCounterMode counts them once ssm_plugins is imported.

Convention, the same as the ops' own formulas (e.g. ``ssm2d._rfft2_flops``): real flops, a multiply-add
counting 2 as FlopCounterMode counts matmuls. A complex FFT of n points costs 5 n log2 n (the radix-2
Cooley-Tukey count), a real-input or real-output FFT half of it, 2.5 n log2 n; a transform over several dims of
sizes n1..nk counts n = n1 ... nk points; every other (batch) element of the tensor is one more transform.
Normalisation (a scale per element) is not counted, like other elementwise work.
"""
from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import flop_registry, register_flop_formula

aten = torch.ops.aten

COMPLEX_FFT_FLOPS_PER_POINT_LOG2 = 5.0  # 5 n log2 n for a complex transform of n points
REAL_FFT_FLOPS_PER_POINT_LOG2 = 2.5  # real input (r2c) or real output (c2r): half


def fft_flops(shape, dim, real: bool) -> int:
    """FLOPs of the transforms over ``dim`` of a tensor of ``shape`` (the real side's shape for r2c / c2r)."""
    points = math.prod(shape[d % len(shape)] for d in dim) if shape else 1
    if points <= 1:
        return 0
    transforms = math.prod(shape) // points
    per_point = REAL_FFT_FLOPS_PER_POINT_LOG2 if real else COMPLEX_FFT_FLOPS_PER_POINT_LOG2
    return int(round(per_point * transforms * points * math.log2(points)))


def _r2c_flops(self_shape, dim, normalization, onesided, out_shape=None, **kwargs):
    return fft_flops(self_shape, dim, real=True)


def _c2r_flops(self_shape, dim, normalization, last_dim_size, out_shape=None, **kwargs):
    return fft_flops(out_shape, dim, real=True)  # the real output has the transform lengths


def _c2c_flops(self_shape, dim, normalization, forward, out_shape=None, **kwargs):
    return fft_flops(self_shape, dim, real=False)


# Registered only where torch has no formula of its own (a duplicate registration raises).
for _op, _formula in ((aten._fft_r2c, _r2c_flops), (aten._fft_c2r, _c2r_flops), (aten._fft_c2c, _c2c_flops)):
    if _op not in flop_registry:
        register_flop_formula(_op)(_formula)
