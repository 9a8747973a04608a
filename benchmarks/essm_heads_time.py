"""eSSM Table 4 on the CPU: parameters and training time against the number of heads (block diagonalisation).

Paper: Liang & Li, arXiv 2402.15290, Sec. 5.8.2, Table 4: IMDB, one layer, H = N = 128, S = 4 / 16 / 64 heads:
75.5k / 69.3k / 67.8k parameters; training time per epoch (s, unnamed GPU) at L = 512 / 1024 / 2048 / 4096:
S = 4: 42.3 / 41.6 / 47.1 / 73.8, S = 16: 41.8 / 44.1 / 48.1 / 77.0, S = 64: 40.3 / 41.6 / 44.4 / 62.1.

    .venv/bin/python -m benchmarks.essm_heads_time [--lengths 512 1024 2048 4096] [--batch 16]

The model is benchmarks.essm_fig1's IMDB model (byte embedding, one ESSM layer, BatchNorm, mean, Linear(H, 2))
with ESSM(128, 128, n_heads=S); train step = forward + cross-entropy + backward on (batch, L) byte ids, the least
process CPU time of --repeat runs after one warm-up. The paper's parameter counts are checked by
benchmarks.models_essm; its times are per epoch of an unstated size, so the comparable figure is each row's time
relative to S = 4 at the same L.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from ssm_plugins.layers.essm import ESSM

from ._common import add_clock, add_write_readme, clock_name, readme_section, table, timer
from .essm_fig1 import VOCAB, IMDBModel

HEADS = (4, 16, 64)
PAPER_PARAMS = {4: "75.5k", 16: "69.3k", 64: "67.8k"}
PAPER_SECONDS = {4: (42.3, 41.6, 47.1, 73.8), 16: (41.8, 44.1, 48.1, 77.0), 64: (40.3, 41.6, 44.4, 62.1)}
PAPER_LENGTHS = (512, 1024, 2048, 4096)


def measure(lengths, batch: int, repeat: int, clock: str = "cpu", width: int = 128) -> dict:
    """{heads: (layer params, {length: train s/step})}."""
    time_of = timer(clock)
    results = {}
    for heads in HEADS:
        torch.manual_seed(0)
        model = IMDBModel(ESSM(width, width, n_heads=heads, bidirectional=True), width).train()
        times = {}
        for length in lengths:
            tokens = torch.randint(0, VOCAB, (batch, length))
            target = torch.randint(0, 2, (batch,))

            def train_step():
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(tokens), target).backward()

            times[length] = time_of(train_step, repeat=repeat)
        results[heads] = (sum(p.numel() for p in model.layer.parameters()), times)
    return results


def tables(results: dict, lengths) -> str:
    rows = []
    for heads, (params, times) in results.items():
        row = [f"S = {heads}", f"{params:,}", PAPER_PARAMS[heads]]
        for length in lengths:
            ours = f"{1e3 * times[length]:.0f} ms ({times[length] / results[HEADS[0]][1][length]:.2f})"
            paper = ""
            if length in PAPER_LENGTHS:
                seconds = PAPER_SECONDS[heads][PAPER_LENGTHS.index(length)]
                paper = f" / {seconds} s ({seconds / PAPER_SECONDS[HEADS[0]][PAPER_LENGTHS.index(length)]:.2f})"
            row.append(ours + paper)
        rows.append(row)
    return table(["heads", "params (layer)", "paper (model)", *[f"L = {n}: ours / paper (vs S = 4)" for n in lengths]],
                 rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(PAPER_LENGTHS))
    parser.add_argument("--batch", type=int, default=16, help="paper: 16 (Sec. 5.3)")
    parser.add_argument("--width", type=int, default=128, help="H = N (paper: 128)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    add_clock(parser, default="cpu")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with readme_section("benchmarks.essm_heads_time", args.write_readme, argv):
        print(f"IMDB model, one bidirectional ESSM layer, H = N = {args.width}, batch {args.batch}, torch "
              f"{torch.__version__}, {torch.get_num_threads()} threads, CPU, {clock_name(args.clock)} of "
              f"{args.repeat} after a warm-up\n")
        print(tables(measure(args.lengths, args.batch, args.repeat, args.clock, args.width), args.lengths))


if __name__ == "__main__":
    main()
