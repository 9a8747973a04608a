"""Memory of forward+backward for the long-sequence kernels on the CPU, at several lengths: the bytes autograd
saves for the backward (counted with ``torch.autograd.graph.saved_tensors_hooks``, each storage once) and the
peak of live torch CPU allocations over forward+backward (the allocation events of ``torch.profiler`` with
``profile_memory=True``, summed in time order; inputs allocated before the profile are not counted).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.memory [--quick]

Ops (small channel counts, float32, batch 1): selective_scan (dim 4, N 16, B/C (1, N, L), D, z, delta_bias,
softplus), essm_conv (2 heads x 4 modes x 2 channels), myo_solve (binary tree, complex64, level-shared b,
4 channels; "L" is the node count 2*leaves - 1).
"""
from __future__ import annotations

import argparse
import math
import warnings

import torch

from ssm_plugins.ops import essm_conv, myo_solve, myo_tree, selective_scan

LENGTHS = (1024, 2048, 4096, 8192, 16384)
MYO_LEAVES = (2048, 4096, 8192, 16384, 32768)  # 4,095 .. 65,535 nodes


def _scan_problem(length: int):
    g = torch.Generator().manual_seed(0)
    dim, n_state = 4, 16
    r = lambda *s: torch.randn(*s, generator=g)
    t = dict(u=r(1, dim, length), delta=r(1, dim, length), A=-torch.rand(dim, n_state, generator=g),
             B=r(1, n_state, length), C=r(1, n_state, length), D=r(dim), z=r(1, dim, length), delta_bias=r(dim))
    for v in t.values():
        v.requires_grad_(True)
    return (lambda: selective_scan(**t, delta_softplus=True)), length


def _essm_problem(length: int):
    g = torch.Generator().manual_seed(0)
    heads, modes, per_head = 2, 4, 2
    r = lambda *s: torch.randn(*s, generator=g)
    t = dict(u=r(1, heads * per_head, length), lambda_re=-torch.rand(heads, modes, generator=g) - 1e-3,
             lambda_im=r(heads, modes), log_dt=torch.full((heads, modes), math.log(0.1)),
             B=r(heads, modes, per_head), C=r(heads, per_head, modes), D=r(heads, per_head))
    for v in t.values():
        v.requires_grad_(True)
    return (lambda: essm_conv(**t)), length


def _myo_problem(leaves: int):
    g = torch.Generator().manual_seed(0)
    tree = myo_tree(leaves, 2)
    nodes, channels = tree.parent.numel(), 4
    u = torch.randn(1, nodes, channels, generator=g, dtype=torch.complex64).requires_grad_(True)
    b = (-0.3 * torch.rand(channels, len(tree.level_sizes) - 1, generator=g)).to(torch.complex64).requires_grad_(True)
    return (lambda: myo_solve(u, b, tree)), nodes


PROBLEMS = {"selective_scan": (_scan_problem, LENGTHS), "essm_conv": (_essm_problem, LENGTHS),
            "myo_solve": (_myo_problem, MYO_LEAVES)}


def saved_bytes(forward) -> int:
    """Bytes of the distinct storages autograd saves for the backward during ``forward()``."""
    storages = {}

    def pack(t):
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            storages[(s.data_ptr(), t.device)] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(storages.values())


def peak_bytes(forward) -> int:
    """Peak of live torch CPU allocations over forward + backward (profiler memory events in time order)."""
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        out = forward()
        out.real.sum().backward() if out.is_complex() else out.sum().backward()
        del out
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def measure(op: str, sizes=None):
    """[(L, saved bytes, peak bytes)] for ``op`` at each size (leaves for myo_solve; L reported as nodes)."""
    make, default = PROBLEMS[op]
    rows = []
    for size in sizes or default:
        forward, length = make(size)
        rows.append((length, saved_bytes(forward), peak_bytes(forward)))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the three smallest sizes only")
    args = parser.parse_args(argv)
    print(f"{'op':<15} {'L':>7} {'saved MB':>9} {'peak MB':>8} {'saved MB/1k':>12} {'peak MB/1k':>11}")
    for op, (_, sizes) in PROBLEMS.items():
        for length, saved, peak in measure(op, sizes[:3] if args.quick else sizes):
            mb = 1 << 20
            print(f"{op:<15} {length:>7} {saved / mb:>9.3f} {peak / mb:>8.3f} {saved / mb * 1000 / length:>12.4f} "
                  f"{peak / mb * 1000 / length:>11.4f}")


if __name__ == "__main__":
    main()
