"""Myosotis tree solve: linear scaling in L, and the compiled kernel vs a dense solve and vs the PyTorch
level-loop (pyramid) reference. Binary ceil tree with persistent virtual nodes, level-shared complex64
weights in the stable regime (docs/myosotis.md, 'Edge weights'), the default instance of the Myosotis paper
(arXiv 2509.20503, Sec. 3.5).

    .venv/bin/python -m benchmarks.ops --only myo [--quick]
"""
from __future__ import annotations

import os

import torch

from benchmarks._common import seconds
from ssm_plugins.ops import myo_solve, myo_tree

ARITY = 2


def _problem(num_leaves: int, batch: int, channels: int, requires_grad: bool = False):
    tree = myo_tree(num_leaves, ARITY)
    u = torch.randn(batch, tree.parent.numel(), channels, dtype=torch.complex64)
    rho = torch.rand(channels, len(tree.level_sizes) - 1) * torch.exp(2j * torch.pi * torch.rand(channels, 1))
    b = (-rho / (ARITY + 1)).to(torch.complex64)
    return tree, u.requires_grad_(requires_grad), b.requires_grad_(requires_grad)


def _cold_sets(u: torch.Tensor) -> int:
    """Input sets to rotate through so that each call reads inputs evicted from the CPU caches."""
    return max(2, -(-(128 << 20) // (u.numel() * u.element_size())))


def _fwd(num_leaves, batch, channels, cold=False):
    _, u, b = _problem(num_leaves, batch, channels)
    inputs = [u] + [torch.randn_like(u) for _ in range(_cold_sets(u) - 1 if cold else 0)]
    calls = iter(range(1 << 62))
    return lambda: myo_solve(inputs[next(calls) % len(inputs)], b, ARITY)


def _fwd_bwd(num_leaves, batch, channels, cold=False):
    _, u, b = _problem(num_leaves, batch, channels, requires_grad=True)
    sets = _cold_sets(u) if cold else 1
    inputs = [(u, torch.randn_like(u))] + [(torch.randn_like(u).requires_grad_(), torch.randn_like(u))
                                           for _ in range(sets - 1)]
    calls = iter(range(1 << 62))

    def run():
        u_in, grad_x = inputs[next(calls) % len(inputs)]
        return torch.autograd.grad(myo_solve(u_in, b, ARITY), (u_in, b), grad_x)

    return run


def _dense(num_leaves, batch, channels):
    """The same solves with the tree matrix written out: one dense (N, N) system per (batch, channel)."""
    tree, u, b = _problem(num_leaves, batch, channels)
    n = tree.parent.numel()
    b_node = torch.cat([b.transpose(0, 1), b.new_zeros(1, channels)])[tree.level]  # (N, C)
    T = torch.eye(n, dtype=u.dtype).repeat(channels, 1, 1)
    child = torch.nonzero(tree.parent >= 0).flatten()
    T[:, child, tree.parent[child]] = b_node[child].transpose(0, 1)
    T[:, tree.parent[child], child] = b_node[child].transpose(0, 1).conj()
    rhs = u.permute(2, 1, 0)  # (C, N, batch): the batch shares each channel's matrix
    return lambda: torch.linalg.solve(T, rhs)


def _reference(num_leaves, batch, channels):
    _, u, b = _problem(num_leaves, batch, channels)

    def run():
        before = os.environ.get("SSM_PLUGINS_BACKEND")
        os.environ["SSM_PLUGINS_BACKEND"] = "reference"
        try:
            return myo_solve(u, b, ARITY)
        finally:
            if before is None:
                del os.environ["SSM_PLUGINS_BACKEND"]
            else:
                os.environ["SSM_PLUGINS_BACKEND"] = before

    return run


def run(quick: bool) -> list[tuple]:
    batch, channels = (1, 16) if quick else (4, 64)
    repeat = 3 if quick else 5
    rows = []
    # Scaling rows: "baseline" is time(L), "ours" time(4L), the last column time(4L)/time(L) (linear: 4).
    # "warm" reuses one input, which at small L stays in the last-level cache; "cold" rotates through
    # input sets larger than the caches, so both sizes stream from memory.
    for num_leaves in ((1024,) if quick else (4096, 16384)):
        for name, make in (("fwd", _fwd), ("fwd+bwd", _fwd_bwd)):
            for cache in ("warm", "cold"):
                cold = cache == "cold"
                t_l = seconds(make(num_leaves, batch, channels, cold), repeat=repeat)
                t_4l = seconds(make(4 * num_leaves, batch, channels, cold), repeat=repeat)
                rows.append(("myo_solve", f"{name} {cache} B{batch} C{channels} L={num_leaves}->{4 * num_leaves}",
                             "time(L); last col = time(4L)/time(L), target <= 4.5", t_l, t_4l, t_4l / t_l))
    dense_batch, dense_channels = 1, 4  # an O(N³) solve per channel: keep the baseline affordable
    for num_leaves in ((256,) if quick else (256, 1024)):
        t_dense = seconds(_dense(num_leaves, dense_batch, dense_channels), repeat=2, warmup=0)
        t_ours = seconds(_fwd(num_leaves, dense_batch, dense_channels), repeat=repeat)
        rows.append(("myo_solve", f"fwd B{dense_batch} C{dense_channels} L={num_leaves}", "dense linalg.solve",
                     t_dense, t_ours, t_dense / t_ours))
    num_leaves = 1024 if quick else 16384
    t_ref = seconds(_reference(num_leaves, batch, channels), repeat=repeat)
    t_ours = seconds(_fwd(num_leaves, batch, channels), repeat=repeat)
    rows.append(("myo_solve", f"fwd B{batch} C{channels} L={num_leaves}", "PyTorch pyramid (reference)",
                 t_ref, t_ours, t_ref / t_ours))
    return rows
