"""CPU inference throughput (images/s, batch 8, 224x224) of our models next to timm's own, in one run.

    .venv/bin/python -m benchmarks.throughput [--batch 8] [--repeat 3] [--threads 1 --clock cpu] [--models a,b]

Ratios are against timm's deit_small_patch16_224 measured in the same run; a model not registered
is listed as such. ``--clock wall`` (default) times the median wall time; ``--clock cpu`` the least process CPU
time over the repeats, which on a shared machine moves far less than wall time (with one thread it is the
forward's own work; with more it sums the threads' time, spin-waits included).
"""
from __future__ import annotations

import argparse

import torch

import ssm_plugins  # noqa: F401  (registers our models when timm is imported)
import timm

from benchmarks._common import add_write_readme, readme_section, table, timer

OURS = ("vim2_t", "viqs_t", "vim2_s", "deit_tiny_patch16_224_ssm2d", "deit_small_patch16_224_ssm2d",
        "swin_tiny_patch4_window7_224_ssm2d", "essm_2d_tiny", "myonet_tiny")
PEERS = ("deit_tiny_patch16_224", "deit_small_patch16_224", "swin_tiny_patch4_window7_224")
REFERENCE = "deit_small_patch16_224"


def images_per_second(name: str, batch: int, repeat: int, clock: str = "wall") -> float:
    model = timm.create_model(name).eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        return batch / timer(clock)(lambda: model(x), repeat=repeat, warmup=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="median wall time, or least process CPU time (steadier on a shared machine)")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated subset of our models (default: all); {REFERENCE} always runs")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    ours = OURS if args.models is None else tuple(args.models.split(","))
    peers = PEERS if args.models is None else (REFERENCE,)
    registered = set(timm.list_models())
    speed = {n: images_per_second(n, args.batch, args.repeat, args.clock) for n in peers + ours if n in registered}
    rows = []
    for name in ours + peers:
        if name not in speed:
            rows.append((name, "ours" if name in ours else "timm", "not registered yet", "-"))
            continue
        rows.append((name, "ours" if name in ours else "timm", speed[name], speed[name] / speed[REFERENCE]))
    with readme_section("benchmarks.throughput", args.write_readme, argv):
        clock = "least process CPU time" if args.clock == "cpu" else "median wall time"
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, 224x224, eval, "
              f"no_grad, {clock} of {args.repeat} runs")
        print(table(["model", "from", "images/s", f"vs {REFERENCE}"], rows))


if __name__ == "__main__":
    main()
