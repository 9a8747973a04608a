"""QS mixing (one qs_mix call) vs naive forward + backward S6 (two selective scans, the second flipped).

The MambaMixer paper (arXiv:2403.19888 v2, abstract, App. I.4, Fig. 5) claims the QS form is ≈1.8x faster than
the scan-based f+b S6 (our benchmark design: docs/mambamixer.md, 'QS speed benchmark'). Both sides mix the same
(batch, dim, L) activations with N = 16 and one parameter set per direction (kernel names of its 'Kernels K1-K3'):
    K3  qs_mix in the Mamba layout: diagonal A per channel (the S6-style QS)
    K2  qs_mix in the head layout: QSMixer's scalar A per head, P = 64 features per head
Baselines: ``reference.selective_scan`` twice (PyTorch autograd for the backward) and, when the extension
has it, the compiled ``selective_scan`` twice.

    PYTHONPATH=. .venv/bin/python -m benchmarks.ops --only qs_mix
    .venv/bin/python -m benchmarks.ops_qs_mix [--threads 1 --clock cpu --repeat 9] [--write-readme]

The second form writes its own section of benchmarks/README.md; ``--clock cpu`` takes the least process CPU
time over the repeats, steadier than wall time on a shared machine (meaningful with one thread).
"""
from __future__ import annotations

import torch

import argparse

from benchmarks._common import add_write_readme, cpu_seconds, readme_section, seconds, table
from ssm_plugins.ops import _backend, qs_mix, reference, selective_scan

N_STATE = 16
HEAD_DIM = 64
CASES = [(2, 768, 197), (1, 1536, 3136)]  # (batch, dim, L): ViT-B/16 tokens at 224², and a 56x56 grid
QUICK_CASES = [(1, 128, 64)]


def _inputs(batch, dim, length, requires_grad):
    gen = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    t = dict(
        u=r(batch, dim, length),
        delta=r(batch, dim, length) - 2.0,
        delta_rev=r(batch, dim, length) - 2.0,
        A=-torch.arange(1, N_STATE + 1.0).repeat(dim, 1),
        A_rev=-torch.arange(1, N_STATE + 1.0).repeat(dim, 1),
        a=-torch.rand(dim // HEAD_DIM, generator=gen) - 0.5,
        a_rev=-torch.rand(dim // HEAD_DIM, generator=gen) - 0.5,
        B=r(batch, N_STATE, length), C=r(batch, N_STATE, length),
        B_rev=r(batch, N_STATE, length), C_rev=r(batch, N_STATE, length),
        D=torch.ones(dim), bias=r(dim) * 0.1, bias_rev=r(dim) * 0.1,
        gamma=r(batch, dim, length),
        head_dt=r(batch, length, dim // HEAD_DIM) - 2.0, head_dt_rev=r(batch, length, dim // HEAD_DIM) - 2.0,
        head_bias=r(dim // HEAD_DIM) * 0.1, head_bias_rev=r(dim // HEAD_DIM) * 0.1,
        head_gamma=r(batch, length, dim // HEAD_DIM),
    )
    return {k: v.requires_grad_(requires_grad) for k, v in t.items()}


def _fb_s6(scan, t):
    # the backward direction as selective_scan's reverse scan (no flipped copies), as ViM2's token mixer runs it
    fwd = scan(t["u"], t["delta"], t["A"], t["B"], t["C"], D=t["D"], delta_bias=t["bias"], delta_softplus=True)
    bwd = scan(t["u"], t["delta_rev"], t["A_rev"], t["B_rev"], t["C_rev"], D=t["D"], delta_bias=t["bias_rev"],
               delta_softplus=True, reverse=True)
    return fwd + bwd


def _qs_diag(t):
    return qs_mix(t["u"], t["delta"], t["A"], t["B"], t["C"], t["delta_rev"], t["A_rev"], t["B_rev"], t["C_rev"],
                  t["gamma"], dt_bias=t["bias"], dt_bias_rev=t["bias_rev"], dt_softplus=True)


def _qs_scalar(t):
    batch, dim, length = t["u"].shape
    x = t["u"].transpose(1, 2).unflatten(2, (dim // HEAD_DIM, HEAD_DIM))  # (batch, L, H, P) view
    bc = lambda v: v.transpose(1, 2)  # noqa: E731  (batch, L, N) view
    return qs_mix(x, t["head_dt"], t["a"], bc(t["B"]), bc(t["C"]), t["head_dt_rev"], t["a_rev"], bc(t["B_rev"]),
                  bc(t["C_rev"]), t["head_gamma"], dt_bias=t["head_bias"], dt_bias_rev=t["head_bias_rev"],
                  dt_softplus=True)


CLOCK = {"name": "wall", "repeat": 3}  # set by main(): "wall" (median) or "cpu" (least process CPU time)


def _timed(fn, t, backward):
    """Median wall time (or least CPU time) of the repeats after a warm-up run; a warm-up slower than 2 s is
    the measurement (the slow Python-loop baselines at L = 3136 would otherwise take minutes)."""
    def call():
        for v in t.values():  # as a training step's zero_grad(set_to_none=True): no accumulation into old grads
            v.grad = None
        y = fn(t)
        if backward:
            y.backward(torch.ones_like(y))
    first = seconds(call, repeat=1, warmup=0)
    if first > 2.0:
        return first
    if CLOCK["name"] == "cpu":
        return cpu_seconds(call, CLOCK["repeat"], warmup=0)
    return seconds(call, repeat=CLOCK["repeat"], warmup=0)


def run(quick: bool) -> list[tuple]:
    rows = []
    compiled_scan = _backend.has_kernel("selective_scan_fwd", "cpu")
    compiled_scan_bwd = hasattr(torch.ops.ssm_plugins, "selective_scan_bwd") and _backend.has_kernel(
        "selective_scan_bwd", "cpu")  # a compiled backward (else the reference's autograd runs)
    for batch, dim, length in (QUICK_CASES if quick else CASES):
        case = f"B{batch} D{dim} L{length} N{N_STATE}"
        for backward in (False, True):
            mode = "fwd+bwd" if backward else "fwd"
            t = _inputs(batch, dim, length, requires_grad=backward)
            # Autograd through the reference scan's per-step slices costs O(L^2) memory traffic (each
            # slice's backward writes a full-size zero gradient): > 10 min per call at L = 3136, so the
            # PyTorch-autograd baselines are only timed for short sequences.
            autograd_baselines_ok = not backward or length <= 1024
            with torch.set_grad_enabled(backward):
                ours = {"K3 diag": _timed(_qs_diag, t, backward),
                        f"K2 scalar P{HEAD_DIM}": _timed(_qs_scalar, t, backward)}
                baselines = {}
                if autograd_baselines_ok:
                    baselines["2x reference.selective_scan"] = _timed(
                        lambda v: _fb_s6(reference.selective_scan, v), t, backward)
                if compiled_scan and (compiled_scan_bwd or autograd_baselines_ok):
                    baselines["2x compiled selective_scan"] = _timed(
                        lambda v: _fb_s6(selective_scan, v), t, backward)
            for base_name, base_s in baselines.items():
                for ours_name, ours_s in ours.items():
                    rows.append((f"qs_mix {ours_name}", f"{case} {mode}", base_name, base_s, ours_s,
                                 base_s / ours_s))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    CLOCK.update(name=args.clock, repeat=args.repeat)
    rows = run(quick=args.quick)
    with readme_section("benchmarks.ops_qs_mix", args.write_readme, argv):
        clock = "least process CPU time" if args.clock == "cpu" else "median wall time"
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {clock} of {args.repeat} runs")
        print(table(["op", "case", "baseline", "baseline s", "ours s", "speed-up"], rows))


if __name__ == "__main__":
    main()
