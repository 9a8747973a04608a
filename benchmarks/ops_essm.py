"""essm_conv (compiled state kernel + FFT convolution) vs the sequential recurrence, a direct O(L²) convolution
and the pure-PyTorch reference FFT, at H = 128, N = 64, S = 4 (spec essm.md §1.5, Prop. 2), forward and
forward+backward.

    .venv/bin/python -m benchmarks.ops --only essm [--quick]
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from benchmarks._common import seconds
from ssm_plugins.ops import essm_conv, reference

WIDTH, MODES, HEADS = 128, 64, 4


def direct_conv(u, lambda_re, lambda_im, log_dt, B, C, D, bidirectional=False):
    """The same layer with the state convolution done directly (depthwise conv1d, O(L²) per mode)."""
    batch, _, length = u.shape
    g, z = reference.essm_discretize(lambda_re, lambda_im, log_dt)
    k = reference.essm_state_kernel(g, z, length).reshape(MODES, 1, length)
    u4 = u.reshape(batch, HEADS, -1, length)
    v = torch.matmul(B, u4).reshape(batch, MODES, length)
    # conv1d correlates: weight over offsets -(L-1)..0 is flip(k); the future offsets 1..L-1 carry k_0..k_{L-2}
    weight = torch.cat([k.flip(-1), k[..., :-1]], -1) if bidirectional else k.flip(-1)
    x = F.conv1d(F.pad(v, (length - 1, length - 1 if bidirectional else 0)), weight, groups=MODES)
    y = torch.matmul(2 * C, x.reshape(batch, HEADS, -1, length)) + D[..., None] * u4
    return y.reshape(batch, -1, length)


def _params(requires_grad):
    gen = torch.Generator().manual_seed(0)
    n, h = MODES // HEADS, WIDTH // HEADS
    params = (-0.5 * torch.ones(HEADS, n), math.pi * torch.randn(HEADS, n, generator=gen),
              math.log(1e-3) + math.log(100) * torch.rand(HEADS, n, generator=gen),
              torch.randn(HEADS, n, h, generator=gen) / math.sqrt(h), torch.randn(HEADS, h, n, generator=gen) / math.sqrt(n),
              torch.ones(HEADS, h))
    return [p.requires_grad_(requires_grad) for p in params]


def _timer(fn, u, params, backward, repeat, **kwargs):
    def step():
        y = fn(u, *params, **kwargs)
        if backward:
            y.sum().backward()
    return seconds(step, repeat=repeat, warmup=1)


def run(quick: bool) -> list[tuple]:
    batch, lengths = (1, [256]) if quick else (4, [1024, 4096])
    rows = []
    for length in lengths:
        u = torch.randn(batch, WIDTH, length)
        for backward in (False, True):
            params = _params(backward)
            case = f"L={length} B={batch} H={WIDTH} N={MODES} S={HEADS} {'fwd+bwd' if backward else 'fwd'}"
            repeat = 3
            ours = _timer(essm_conv, u, params, backward, 5 * repeat)
            baselines = [
                ("sequential recurrence (§1.10)", reference.essm_recurrent, {}),
                ("direct O(L²) conv", direct_conv, {}),
                ("pure-torch FFT reference", reference.essm_conv, {}),
            ]
            for name, fn, kwargs in baselines:
                base = _timer(fn, u, params, backward, repeat, **kwargs)
                rows.append(("essm_conv causal", case, name, base, ours, base / ours))
            ours_bi = _timer(essm_conv, u, params, backward, 5 * repeat, bidirectional=True)
            base = _timer(direct_conv, u, params, backward, repeat, bidirectional=True)
            rows.append(("essm_conv bidirectional", case, "direct O(L²) conv", base, ours_bi, base / ours_bi))
    return rows
