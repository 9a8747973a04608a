"""FLOP formulas of torch's FFT ops (ssm_plugins/ops/_flops.py): FlopCounterMode counts rfft/irfft/fft once
ssm_plugins is imported, with the convention of the ops' own formulas, and nothing is counted twice."""
import math

import torch
from torch.utils.flop_counter import FlopCounterMode

import ssm_plugins  # noqa: F401  (registers the formulas)
from ssm_plugins import ops
from ssm_plugins.ops import ssm2d as ssm2d_mod
from ssm_plugins.ops.essm import fft_size

aten = torch.ops.aten


def _real_fft(transforms, n):
    return int(round(2.5 * transforms * n * math.log2(n)))


def _counts(fn):
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_flop_counts()['Global']


def test_rfft_irfft_pair_is_counted():
    x = torch.randn(4, 3, 50)
    counts = _counts(lambda: torch.fft.irfft(torch.fft.rfft(x, n=128), n=128))  # zero-padded as in essm_conv
    assert counts[aten._fft_r2c] == _real_fft(12, 128) == 26880  # 2.5 n log2 n per real transform
    assert counts[aten._fft_c2r] == _real_fft(12, 128)


def test_multi_dim_and_complex_transforms():
    counts = _counts(lambda: torch.fft.rfft2(torch.randn(2, 6, 10), dim=(-2, -1)))
    assert counts[aten._fft_r2c] == _real_fft(2, 60)  # one transform of 6 x 10 points per batch element
    counts = _counts(lambda: torch.fft.fft(torch.randn(3, 16, dtype=torch.complex64), dim=0))
    assert counts[aten._fft_c2c] == int(round(5 * 16 * 3 * math.log2(3)))  # complex: 5 n log2 n, along dim 0


def test_backward_transforms_are_counted():
    x = torch.randn(2, 16, requires_grad=True)
    counts = _counts(lambda: torch.fft.irfft(torch.fft.rfft(x, n=32), n=32).sum().backward())
    assert counts[aten._fft_r2c] == 2 * _real_fft(2, 32)  # rfft, and irfft's adjoint
    assert counts[aten._fft_c2r] == _real_fft(2, 32)
    assert counts[aten._fft_c2c] == int(round(5 * 2 * 32 * 5))  # rfft's adjoint: a complex transform


def test_essm_forward_counts_its_ffts():
    """essm_scifar_tiny: per layer an rFFT of v (batch x N rows) and of the kernel (N rows), an irFFT of batch x N
    rows, all of length fft_size(L) -- on top of the essm_kernel op and the matmuls."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model('essm_scifar_tiny').eval()
    batch, length = 2, 6 * 5
    with torch.no_grad():
        counts = _counts(lambda: model(torch.randn(batch, 3, 6, 5)))
    n_fft = fft_size(length)
    modes = [block.ssm.d_state for block in model.blocks]
    assert counts[aten._fft_r2c] == sum(_real_fft(batch * n, n_fft) + _real_fft(n, n_fft) for n in modes)
    assert counts[aten._fft_c2r] == sum(_real_fft(batch * n, n_fft) for n in modes)
    assert counts.get(aten.mm, 0) + counts.get(aten.addmm, 0) + counts.get(aten.bmm, 0) > 0


def test_fft_conv2d_op_is_counted_once_and_matches_the_reference(monkeypatch):
    x, kernel = torch.randn(2, 3, 14, 14), torch.randn(3, 14, 14)
    custom_op = _counts(lambda: ops.fft_conv2d(x, kernel))
    assert set(custom_op) == {torch.ops.ssm_plugins.fft_conv2d}  # its own formula; its inner FFTs not again
    monkeypatch.setenv('SSM_PLUGINS_BACKEND', 'reference')
    reference = _counts(lambda: ops.fft_conv2d(x, kernel))
    assert torch.ops.ssm_plugins.fft_conv2d not in reference
    # the same transforms (27 x 27 grid); the op's formula adds the spectral product, 6 flops per frequency
    frequencies = 27 * (27 // 2 + 1)
    assert sum(reference.values()) == ssm2d_mod._fft_conv2d_flops(x.shape, kernel.shape, (0, 0)) - 6 * 6 * frequencies
