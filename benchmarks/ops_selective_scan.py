"""selective_scan: the compiled kernel vs the sequential PyTorch reference scan, forward and forward+backward.

The baseline is ``ssm_plugins.ops.reference.selective_scan`` (the same function the op falls back to),
differentiated by autograd. Inputs are float32 with D, z, delta_bias and softplus, as in a Mamba block
(A = -exp(A_log) with the S4D-real init, delta around softplus^-1 of 1e-2).

    .venv/bin/python -m benchmarks.ops --only selective_scan [--quick]
"""
from __future__ import annotations

import torch

from benchmarks._common import seconds
from ssm_plugins.ops import reference, selective_scan

# (batch, dim, L, N): a ViM-S-like block on 224² (196 patches + class token), and a long 1/4-scale map.
SHAPES = [(2, 768, 197, 16), (1, 1536, 3136, 16)]
QUICK_SHAPES = [(2, 64, 64, 16), (1, 128, 256, 16)]


def _inputs(batch, dim, length, n_state, requires_grad):
    g = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g)
    A = -torch.arange(1, n_state + 1, dtype=torch.float32).repeat(dim, 1)
    tensors = dict(u=rnd(batch, dim, length), delta=rnd(batch, dim, length) * 0.5 - 4.0, A=A,
                   B=rnd(batch, n_state, length), C=rnd(batch, n_state, length), D=torch.ones(dim),
                   z=rnd(batch, dim, length), delta_bias=rnd(dim) * 0.5)
    return {k: v.requires_grad_(requires_grad) for k, v in tensors.items()}


def _fwd(fn, kw):
    def run():
        with torch.no_grad():
            fn(**kw, delta_softplus=True)
    return run


def _fwd_bwd(fn, kw):
    grad = torch.ones_like(kw["u"])  # made once, outside the timing

    def run():
        for t in kw.values():
            t.grad = None
        fn(**kw, delta_softplus=True).backward(grad)
    return run


def run(quick: bool = False):
    rows = []
    for batch, dim, length, n_state in QUICK_SHAPES if quick else SHAPES:
        case = f"b{batch} d{dim} L{length} N{n_state} fp32"
        # The reference costs seconds per call at the large shape: time it once (plus one warm-up
        # for the small ones).
        big = batch * dim * length * n_state > 20_000_000
        ref_reps = dict(repeat=1, warmup=0) if big else dict(repeat=3, warmup=1)
        for what, make in (("fwd", _fwd), ("fwd+bwd", _fwd_bwd)):
            kw = _inputs(batch, dim, length, n_state, requires_grad=(what == "fwd+bwd"))
            base = seconds(make(reference.selective_scan, kw), **ref_reps)
            ours = seconds(make(selective_scan, kw), repeat=5, warmup=1)
            rows.append(("selective_scan", f"{case} {what}", "reference scan (PyTorch)", base, ours, base / ours))
    return rows
