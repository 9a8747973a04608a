"""essm_conv (compiled state kernel + FFT convolution) vs the sequential recurrence, a direct O(L²) convolution
and the pure-PyTorch reference FFT, at H = 128, N = 64, S = 4 (eSSM, arXiv 2402.15290: Sec. 4.2, Prop. 2), forward
and forward+backward.

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
    """The same core with the state convolution done directly: depthwise conv1d over the N state channels,
    O(L²) per mode (the explicit Toeplitz matrices of reference.essm_dense would need N·L² memory)."""
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


def _step(fn, u, params, backward, **kwargs):
    if not backward:
        def run():
            with torch.no_grad():
                fn(u, *params, **kwargs)
        return run
    grad = torch.ones(u.shape[0], WIDTH, u.shape[-1])  # made once, outside the timing

    def run():
        for p in params:
            p.grad = None
        fn(u, *params, **kwargs).backward(grad)
    return run


def run(quick: bool) -> list[tuple]:
    batch, lengths = (1, [256]) if quick else (4, [1024, 4096])
    rows = []
    for length in lengths:
        u = torch.randn(batch, WIDTH, length, generator=torch.Generator().manual_seed(1))
        for backward in (False, True):
            params = _params(backward)
            case = f"b{batch} H{WIDTH} N{MODES} S{HEADS} L{length} fp32 {'fwd+bwd' if backward else 'fwd'}"
            # The recurrence and the direct conv cost tens of seconds per fwd+bwd call at L=4096: time once.
            slow = dict(repeat=1, warmup=0) if backward and length >= 4096 else dict(repeat=3, warmup=1)
            for mode, kwargs in (("causal", {}), ("bidirectional", dict(bidirectional=True))):
                ours = seconds(_step(essm_conv, u, params, backward, **kwargs), repeat=15, warmup=2)
                baselines = [("direct O(L²) conv", direct_conv, slow)]
                if mode == "causal":
                    baselines = [("sequential recurrence", reference.essm_recurrent, slow), *baselines]
                baselines.append(("pure-torch FFT reference", reference.essm_conv, dict(repeat=15, warmup=2)))
                for name, fn, reps in baselines:
                    base = seconds(_step(fn, u, params, backward, **kwargs), **reps)
                    rows.append((f"essm_conv {mode}", case, name, base, ours, base / ours))
    return rows
