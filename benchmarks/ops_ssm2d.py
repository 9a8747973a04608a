"""2-D SSM: kernel generation and kernel + FFT convolution, compiled vs the pure-PyTorch oracle.

Setting of the issue: N = 16, 4 directions, 384 channels in 8 kernel groups (n_ssm = 8, the default of the
2-D SSM paper, arXiv:2306.06635, App. F; so S = 32 kernel sets), batch 8, grids 14x14 (DeiT) and 56x56 (Swin-T
stage 1). The layer rows apply the directions as one fused non-causal kernel (docs/2d-ssm.md, 'Fused kernel') in
both columns (the oracle's FFT pads to the full linear size, ours to a no-wrap-around 7-smooth size); a separate
row compares the fused convolution with the official four per-direction convolutions, both compiled.

    .venv/bin/python -m benchmarks.ops --only ssm2d
"""
from __future__ import annotations

import contextlib
import os

import torch

from benchmarks._common import seconds
from ssm_plugins import ops


@contextlib.contextmanager
def _reference_backend():
    previous = os.environ.get("SSM_PLUGINS_BACKEND")
    os.environ["SSM_PLUGINS_BACKEND"] = "reference"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SSM_PLUGINS_BACKEND"]
        else:
            os.environ["SSM_PLUGINS_BACKEND"] = previous


def _params(S, N):
    """Real parameterisation, initialised as code-v1 (docs/2d-ssm.md, 'Initialisation')."""
    return [(torch.randn(*shape) * std).requires_grad_()
            for shape, std in (((4, S, N), 0.2), ((2, S, N), 0.2), ((2, S, N), 1.0))]


def _layer(params, x, n_ssm):
    height, width = x.shape[-2:]
    fused = ops.ssm2d_kernel(*params, height, width, directions=4, fused=True)
    channel_kernels = fused[torch.arange(x.shape[1]) % n_ssm]
    return ops.fft_conv2d(x, channel_kernels, origin=(height - 1, width - 1))


def _layer_per_direction(params, x, n_ssm):
    """The official formulation: four causal convolutions of flipped inputs (docs/2d-ssm.md, 'Directions and channel
    sharing')."""
    height, width = x.shape[-2:]
    kernels = ops.ssm2d_kernel(*params, height, width, directions=4)
    channels = torch.arange(x.shape[1]) % n_ssm
    out = 0
    for kernel, flips in zip(kernels, ops.ssm2d.DIRECTION_FLIPS[4]):
        flip = (lambda t: t.flip(flips)) if flips else (lambda t: t)
        out = out + flip(ops.fft_conv2d(flip(x), kernel[channels]))
    return out


def _timed(fn, backward, repeat):
    def step():
        out = fn()
        if backward:
            out.sum().backward()
    return seconds(step, repeat=repeat)


def run(quick: bool) -> list[tuple]:
    torch.manual_seed(0)
    N, n_ssm, dirs = 16, 8, 4
    batch, channels = (2, 96) if quick else (8, 384)
    grids = [(14, 14)] if quick else [(14, 14), (56, 56)]
    repeat = 3 if quick else 5
    rows = []
    for height, width in grids:
        grid = f"{height}x{width}"
        params = _params(dirs * n_ssm, N)
        x = torch.randn(batch, channels, height, width, requires_grad=True)
        kernel = lambda: ops.ssm2d_kernel(*params, height, width, directions=dirs)
        layer = lambda: _layer(params, x, n_ssm)
        for name, fn in ((f"kernel S={dirs * n_ssm} N={N} {grid}", kernel),
                         (f"kernel+fft conv B={batch} C={channels} {grid}", layer)):
            for backward in (False, True):
                with _reference_backend():
                    baseline = _timed(fn, backward, repeat)
                ours = _timed(fn, backward, repeat)
                rows.append(("ssm2d", f"{name} {'fwd+bwd' if backward else 'fwd'}", "oracle", baseline, ours,
                             baseline / ours))
        per_direction = _timed(lambda: _layer_per_direction(params, x, n_ssm), True, repeat)
        fused = _timed(layer, True, repeat)
        rows.append(("ssm2d", f"kernel+fft conv B={batch} C={channels} {grid} fwd+bwd", "4 per-direction convs",
                     per_direction, fused, per_direction / fused))
    return rows
