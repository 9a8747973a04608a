"""eSSM Fig. 7 on the CPU: Vanilla (dense A, recurrent) vs Diagonal (recurrent) vs Diagonal + FFT (our eSSM layer).

Paper: Liang & Li, arXiv 2402.15290, Sec. 5.8.1: IMDB, one layer, H = M = N = 64. Vanilla 20.90k parameters,
Diagonal 8.70k; Diagonal trains 74.37x and infers 22.93x faster than Vanilla (per epoch, RTX 4090); Diagonal + FFT
is faster again (no figure given).

    .venv/bin/python -m benchmarks.essm_diagonal_fft [--length 256 1024] [--batch 16] [--plot fig7.png]

Each variant is one causal layer (ssm_plugins.layers.essm_baselines; glu="gelu": the paper's 8.70k leaves no
room for the gate) followed by the IMDB model's head: BatchNorm over channels, mean over time, Linear(64, 2).
The token embedding (the same in all three) is left out: the input is a random (batch, L, 64) tensor. Train step
= forward + cross-entropy + backward; inference = eval forward under no_grad; the least process CPU time of
--repeat runs after one warm-up (``--clock wall``: the median wall time), all in one process.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from ssm_plugins.layers.essm import ESSM, BatchNormNLC
from ssm_plugins.layers.essm_baselines import DiagonalRecurrentESSM, VanillaRecurrentSSM

from ._common import add_clock, add_write_readme, clock_name, readme_section, table, timer

# Fig. 7 (Sec. 5.8.1): parameters, and each variant's speed-up over the previous one (None: not given)
PAPER_PARAMS = {"Vanilla": "20.90k", "Diagonal": "8.70k", "Diagonal + FFT": "-"}
PAPER_SPEEDUP = {"Vanilla / Diagonal": (74.37, 22.93), "Diagonal / Diagonal + FFT": (None, None)}
VARIANTS = {"Vanilla": VanillaRecurrentSSM, "Diagonal": DiagonalRecurrentESSM,
            "Diagonal + FFT": lambda width, state, **kw: ESSM(width, state, bidirectional=False, **kw)}


class IMDBLikeModel(nn.Module):
    """One SSM layer, then the IMDB model's head: BatchNorm (post-norm), mean pool, Linear(H, 2)."""

    def __init__(self, layer: nn.Module, width: int):
        super().__init__()
        self.layer, self.norm, self.decoder = layer, BatchNormNLC(width), nn.Linear(width, 2)

    def forward(self, x):
        return self.decoder(self.norm(self.layer(x)).mean(1))


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def measure(width: int, length: int, batch: int, repeat: int, clock: str = "cpu") -> dict:
    """{variant: (layer params, model params, train s/step, inference s/batch)}."""
    x = torch.randn(batch, length, width)
    target = torch.randint(0, 2, (batch,))
    time_of = timer(clock)
    results = {}
    for name, make in VARIANTS.items():
        torch.manual_seed(0)
        model = IMDBLikeModel(make(width, width, glu="gelu"), width)

        def train_step():
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), target).backward()

        def infer():
            with torch.no_grad():
                model(x)

        model.train()
        train = time_of(train_step, repeat=repeat)
        model.eval()
        results[name] = (_params(model.layer), _params(model), train, time_of(infer, repeat=repeat))
    return results


def tables(results: dict) -> str:
    rows = [[name, f"{layer:,}", f"{model:,}", PAPER_PARAMS[name], f"{1e3 * train:.2f}", f"{1e3 * infer:.2f}"]
            for name, (layer, model, train, infer) in results.items()]
    first = table(["variant", "params (layer)", "params (+ BN + decoder)", "params (paper)", "train ms/step",
                   "inference ms/batch"], rows)
    ratio_rows = []
    for pair, (paper_train, paper_infer) in PAPER_SPEEDUP.items():
        slow, fast = (results[name] for name in pair.split(" / ", 1))
        ratio_rows.append([pair, f"{slow[2] / fast[2]:.2f}x", f"{paper_train}x" if paper_train else "> 1 (no figure)",
                           f"{slow[3] / fast[3]:.2f}x", f"{paper_infer}x" if paper_infer else "> 1 (no figure)"])
    second = table(["speed-up", "train (ours)", "train (paper)", "inference (ours)", "inference (paper)"],
                   ratio_rows)
    return first + "\n\n" + second


def plot(results: dict, path: str, title: str) -> None:
    """Fig. 7's three bar charts: parameters, training time, inference time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    colors = ["tab:blue", "tab:green", "tab:red"]
    panels = [("parameters (layer, k)", [r[0] / 1e3 for r in results.values()]),
              ("train ms/step", [1e3 * r[2] for r in results.values()]),
              ("inference ms/batch", [1e3 * r[3] for r in results.values()])]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, (label, values) in zip(axes, panels):
        bars = ax.bar(names, values, color=colors)
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64, help="H = M = N (paper: 64)")
    parser.add_argument("--length", type=int, nargs="+", default=[256, 1024], help="one table per length")
    parser.add_argument("--batch", type=int, default=16, help="paper: 16")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    add_clock(parser, default="cpu")
    parser.add_argument("--plot", metavar="PATH", help="also write Fig. 7-style bars to this PNG")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    setting = (f"H = M = N = {args.width}, one causal layer, batch {args.batch}, torch {torch.__version__}, "
               f"{torch.get_num_threads()} threads, CPU, {clock_name(args.clock)} of {args.repeat}")
    with readme_section("benchmarks.essm_diagonal_fft", args.write_readme, argv):
        print(setting)
        runs = {}
        for length in args.length:
            runs[length] = measure(args.width, length, args.batch, args.repeat, args.clock)
            print(f"\nL = {length}\n\n{tables(runs[length])}")
    if args.plot:
        length = args.length[0]
        plot(runs[length], args.plot, f"eSSM Fig. 7 on the CPU, L = {length}: {setting}")
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
