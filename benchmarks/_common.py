"""Timing, table printing and README writing shared by the benchmark scripts (ratios are always from one run)."""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

README = Path(__file__).resolve().with_name("README.md")


def _run_times(fn: Callable[[], object], repeat: int, warmup: int, clock: Callable[[], float]) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def seconds(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    return statistics.median(_run_times(fn, repeat, warmup, time.perf_counter))


def cpu_seconds(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Least process CPU time of ``fn()`` over ``repeat`` runs after ``warmup`` runs (on one thread, time the
    process waits for a shared machine's cores is not counted)."""
    return min(_run_times(fn, repeat, warmup, time.process_time))


def add_clock(parser: argparse.ArgumentParser, default: str = "wall") -> None:
    parser.add_argument("--clock", choices=("wall", "cpu"), default=default,
                        help="wall: median wall time; cpu: least process CPU time (steadier on a shared machine)")


def timer(clock: str) -> Callable[..., float]:
    """:func:`seconds` for ``clock="wall"``, :func:`cpu_seconds` for ``"cpu"``."""
    return cpu_seconds if clock == "cpu" else seconds


def clock_name(clock: str) -> str:
    return "least process CPU time" if clock == "cpu" else "median wall time"


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


# --write-readme: a script's printed output replaces its own section of benchmarks/README.md, between
# "<!-- BEGIN benchmarks.<script> -->" and "<!-- END benchmarks.<script> -->", under the command and the machine.

def markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"


def replace_section(text: str, name: str, body: str, where: str = "the README") -> str:
    """``text`` with the lines between ``name``'s BEGIN and END markers replaced by ``body``; the markers and
    everything outside them are kept byte for byte. ValueError (naming the section and the marker) if a marker
    is missing, repeated or out of order."""
    begin, end = markers(name)
    for marker in (begin, end):
        count = text.count(marker)
        if count != 1:
            problem = "not found" if count == 0 else f"found {count} times"
            raise ValueError(f"section {name!r}: marker {marker!r} {problem} in {where}; add exactly one "
                             f"{begin} ... {end} pair where the section belongs")
    start, stop = text.index(begin) + len(begin), text.index(end)
    if stop < start:
        raise ValueError(f"section {name!r}: {end!r} comes before {begin!r} in {where}")
    return text[:start] + "\n" + body.strip("\n") + "\n" + text[stop:]


def machine() -> str:
    """Where a figure was measured: date, CPU, cores, memory, GPU, torch build and its CPU thread count."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    parts = [datetime.date.today().isoformat(), f"{cpu}, {os.cpu_count()} CPU cores"]
    try:
        parts[-1] += f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2 ** 30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    gpus = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [])
    parts.append(", ".join(gpus) if gpus else "no GPU")
    parts.append(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    return " · ".join(parts)


def write_readme_section(name: str, output: str, command: str, readme: Path | str = README) -> None:
    """Rewrite section ``name`` of ``readme`` with the command, the machine line and ``output``."""
    readme = Path(readme)
    if not readme.is_file():
        raise ValueError(f"readme {str(readme)!r} does not exist")
    text = readme.read_text(encoding="utf-8")
    body = f"`{command}` · {machine()}\n\n{output.strip()}"
    readme.write_text(replace_section(text, name, body, where=str(readme)), encoding="utf-8")


def add_write_readme(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write-readme", action="store_true",
                        help="also write what this prints into its own section of benchmarks/README.md")


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


@contextlib.contextmanager
def readme_section(name: str, enabled: bool, argv: Sequence[str] | None = None,
                   readme: Path | str = README) -> Iterator[None]:
    """Inside the block stdout is printed as usual; with ``enabled``, it is also captured and, if the block
    finishes without an error, written into section ``name`` (``benchmarks.<script>``) of ``readme`` under the
    command ``python -m <name> <argv without --write-readme>`` (argv defaults to ``sys.argv[1:]``)."""
    if not enabled:
        yield
        return
    readme = Path(readme)
    if not readme.is_file():
        raise ValueError(f"readme {str(readme)!r} does not exist")
    # a missing marker fails before the benchmark runs, not after it
    replace_section(readme.read_text(encoding="utf-8"), name, "", where=str(readme))
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write-readme"]
    captured = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, captured)):
        yield
    write_readme_section(name, captured.getvalue(), shlex.join(["python", "-m", name, *args]), readme)
    print(f"wrote section {name} of {readme}")
