"""Timing and table printing shared by the benchmark scripts (ratios are always from one run)."""
from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence


def seconds(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (pastes straight into the README)."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def gflops(model, size, in_chans: int = 3) -> tuple[float, float]:
    """(total, ssm_plugins ops' part) GFLOPs of one no-grad forward of a (1, in_chans, *size) image."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(1, in_chans, *size)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    ours = sum(n for op, n in counter.get_flop_counts()["Global"].items() if "ssm_plugins" in str(op))
    return counter.get_total_flops() / 1e9, ours / 1e9
