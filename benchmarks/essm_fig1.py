"""eSSM Figs. 1 and 6 on the CPU: parameters and training time of eSSM, Transformer, LSTM, S4 and Mamba layers.

Paper: Liang & Li, arXiv 2402.15290, Sec. 5.3: IMDB, batch 16, 10 epochs, the parameters and the mean training time
per epoch, (a, b) at input sizes H = 64, 128, 256 with L = 4096, (c) at L = 256 ... 4096 with H = 256. Its figures at
H = 256: eSSM has 8.59 % of the Transformer's parameters, 13.24 % of Mamba's, 40.84 % of S4's, and trains 3.94x faster
than LSTM, 2.14x than S4, 1.35x than Mamba (RTX 4090). Fig. 6: S4 and DSS add parameters with a bidirectional
kernel, eSSM does not.

    .venv/bin/python -m benchmarks.essm_fig1 [--widths 64 128 256] [--lengths 256 1024 4096] [--plot fig1.png]

The paper names the models, not their sizes [D]: each variant is one layer of width H between the IMDB model's
byte embedding (257 tokens) and head (BatchNorm, mean over time, Linear(H, 2)): eSSM = the essm_text layer
(S = N = H, bidirectional kernel); Transformer = torch's TransformerEncoderLayer (H/32 heads, feed-forward 4H);
LSTM = torch's one-layer nn.LSTM(H, H); S4 = S4D (ssm_plugins.layers.essm_baselines, N = 64, bidirectional);
Mamba = our S6 block (SelectiveTokenMixer: expand 2, N 16, conv 4). Fig. 6 adds DSS (DSS_softmax, N = 64: 32
complex eigenvalues shared by the channels, bidirectional as S4). Train step = forward + cross-entropy + backward
on (batch, L) byte ids; time per epoch = that x 25,000 / batch (IMDB's training set), the least process CPU time of
--repeat runs after one warm-up, all in one process.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from ssm_plugins.layers.essm import ESSM, BatchNormNLC
from ssm_plugins.layers.essm_baselines import DSS, S4D
from ssm_plugins.layers.mambamixer import SelectiveTokenMixer

from ._common import add_clock, add_write_readme, clock_name, readme_section, table, timer

IMDB_TRAIN, VOCAB = 25_000, 257
# Sec. 5.3.1 at H = 256: eSSM's parameters as a share of each model's, and each model's training time over eSSM's
PAPER_PARAM_SHARE = {"Transformer": 8.59, "Mamba": 13.24, "S4": 40.84}
PAPER_SPEEDUP = {"LSTM": 3.94, "S4": 2.14, "Mamba": 1.35}


class _LSTM(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.lstm = nn.LSTM(width, width, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


VARIANTS = {
    "eSSM": lambda h: ESSM(h, h, n_heads=h, bidirectional=True),
    "Transformer": lambda h: nn.TransformerEncoderLayer(h, max(1, h // 32), 4 * h, dropout=0.0, batch_first=True),
    "LSTM": _LSTM,
    "S4": lambda h: S4D(h, 64, bidirectional=True),
    "Mamba": lambda h: SelectiveTokenMixer(h, d_state=16, expand=2, d_conv=4),
}


class IMDBModel(nn.Module):
    """Byte embedding -> one layer -> BatchNorm, mean over time, Linear(H, 2)."""

    def __init__(self, layer: nn.Module, width: int):
        super().__init__()
        self.embed, self.layer = nn.Embedding(VOCAB, width), layer
        self.norm, self.decoder = BatchNormNLC(width), nn.Linear(width, 2)

    def forward(self, tokens):
        return self.decoder(self.norm(self.layer(self.embed(tokens))).mean(1))


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def measure(width: int, length: int, batch: int, repeat: int, clock: str = "cpu") -> dict:
    """{variant: (layer params, model params, train s/step)}."""
    tokens = torch.randint(0, VOCAB, (batch, length))
    target = torch.randint(0, 2, (batch,))
    time_of = timer(clock)
    results = {}
    for name, make in VARIANTS.items():
        torch.manual_seed(0)
        model = IMDBModel(make(width), width).train()

        def train_step():
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(tokens), target).backward()

        results[name] = (_params(model.layer), _params(model), time_of(train_step, repeat=repeat))
    return results


def tables(results: dict, batch: int, paper: bool) -> str:
    """One row per variant: parameters, step and epoch times, and the paper's ratio columns (at H = 256)."""
    essm_layer, _, essm_time = results["eSSM"]
    rows = []
    for name, (layer, model, step) in results.items():
        share = f"{100 * essm_layer / layer:.1f} %"
        speed = f"{step / essm_time:.2f}x"
        rows.append([name, f"{layer:,}", f"{model:,}", share,
                     f"{PAPER_PARAM_SHARE[name]} %" if paper and name in PAPER_PARAM_SHARE else "-",
                     f"{1e3 * step:.1f}", f"{step * IMDB_TRAIN / batch / 60:.1f}", speed,
                     f"{PAPER_SPEEDUP[name]}x" if paper and name in PAPER_SPEEDUP else "-"])
    return table(["model", "params (layer)", "params (model)", "eSSM layer / this", "paper", "train ms/step",
                  "min/epoch", "time / eSSM's", "paper"], rows)


def bidirectional_params(width: int) -> str:
    """Fig. 6: layer parameters with and without the bidirectional kernel."""
    rows = []
    for name, make in (("eSSM", lambda bi: ESSM(width, width, n_heads=width, bidirectional=bi)),
                       ("S4", lambda bi: S4D(width, 64, bidirectional=bi)),
                       ("DSS", lambda bi: DSS(width, 64, bidirectional=bi))):
        one, two = _params(make(False)), _params(make(True))
        rows.append([name, f"{one:,}", f"{two:,}", f"{two - one:+,}"])
    return table(["model", "unidirectional", "bidirectional", "difference"], rows)


def plot(by_width: dict, by_length: dict, path: str, title: str) -> None:
    """Fig. 1's three panels: parameters and time per epoch against H, time per epoch against L."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for name in VARIANTS:
        widths = sorted(by_width)
        axes[0].plot(widths, [by_width[w][name][1] / 1e3 for w in widths], marker="o", label=name)
        axes[1].plot(widths, [by_width[w][name][2] for w in widths], marker="o", label=name)
        lengths = sorted(by_length)
        axes[2].plot(lengths, [by_length[n][name][2] for n in lengths], marker="o", label=name)
    for ax, (xlabel, ylabel) in zip(axes, [("input size H", "parameters (k)"), ("input size H", "train s/step"),
                                            ("sequence length L", "train s/step")]):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    axes[2].set_xscale("log", base=2)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256], help="Fig. 1 (a, b), at the "
                        "longest --lengths")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096], help="Fig. 1 (c), at the "
                        "widest --widths")
    parser.add_argument("--batch", type=int, default=16, help="paper: 16")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    add_clock(parser, default="cpu")
    parser.add_argument("--plot", metavar="PATH", help="also write Fig. 1-style panels to this PNG")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    widest, longest = max(args.widths), max(args.lengths)
    setting = (f"one layer of each model, batch {args.batch}, torch {torch.__version__}, {torch.get_num_threads()} "
               f"threads, CPU, {clock_name(args.clock)} of {args.repeat} after a warm-up")
    with readme_section("benchmarks.essm_fig1", args.write_readme, argv):
        print(setting)
        cache = {}

        def run(width, length):
            if (width, length) not in cache:
                cache[width, length] = measure(width, length, args.batch, args.repeat, args.clock)
            return cache[width, length]

        by_width = {w: run(w, longest) for w in args.widths}
        for width in args.widths:
            print(f"\nFig. 1 (a, b): H = {width}, L = {longest}\n\n"
                  f"{tables(by_width[width], args.batch, paper=width == 256)}")
        by_length = {n: run(widest, n) for n in args.lengths}
        for length in args.lengths:
            if length != longest:
                print(f"\nFig. 1 (c): H = {widest}, L = {length}\n\n{tables(by_length[length], args.batch, False)}")
        print(f"\nFig. 6: parameters with the bidirectional kernel, H = {widest} (paper: eSSM adds none, S4 and DSS "
              f"do)\n\n{bidirectional_params(widest)}")
    if args.plot:
        plot(by_width, by_length, args.plot, f"eSSM Fig. 1 on the CPU: {setting}")
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
