"""2-D SSM Table 1's "Train Time" column on the CPU: training step time with a spatial layer over the baseline.

Paper: "2-D SSM: A General Spatial Layer for Visual Transformers" (arXiv 2306.06635), Table 1 (CIFAR-100 /
Tiny-ImageNet; hardware and batch not given): ViT + 2-D SSM 2.66x (real) / 2.89x (complex), Mega + 2-D SSM 2.03x,
Swin + 2-D SSM 2.16x / 2.18x; S4ND and EMA rows too. The Mega rows' base is unclear (Mega-ablate is printed
1.1x: we read the column as relative to ViT and give the ratio to Mega-ablate beside it).

    .venv/bin/python -m benchmarks.ssm2d_train_time [--batch 8] [--repeat 3]

The models are benchmarks/models_ssm2d.py's Table 1 rows (the timm models the configs_mmpretrain/ssm2d/
CIFAR-100 configs build) at 32 x 32, 100 classes. One step = forward + cross-entropy + backward + AdamW step on a
random batch; the least process CPU time of --repeat steps after one warm-up (``--clock wall``: the median wall
time), every model in one process.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import ssm_plugins  # noqa: F401  (registers the models)

from ._common import add_clock, add_write_readme, clock_name, readme_section, table, timer
from .models_ssm2d import TABLE1

# Table 1 "Train Time" (CIFAR-100 rows); the baseline each row is divided by
PAPER_TRAIN_TIME = {
    "ViT": 1.0, "ViT w/ S4ND": 2.22, "ViT w/ SSM-r": 2.66, "ViT w/ SSM-c": 2.89,
    "Mega-ablate": 1.1, "Mega": 1.28, "Mega w/ S4ND": 1.46, "Mega 2-D SSM-r": 2.03, "Mega 2-D SSM-c": 2.03,
    "Swin-reprod.": 1.0, "Swin w/ EMA": 1.39, "Swin w/ S4ND": 1.29, "Swin w/ SSM-r": 2.16, "Swin w/ SSM-c": 2.18,
}
BASELINE = {"ViT": "ViT", "Mega": "ViT", "Swin": "Swin-reprod."}  # by the row's first word
ROWS = [(row, name, kwargs) for row, name, kwargs, _ in TABLE1 if row in PAPER_TRAIN_TIME]


def step_seconds(name: str, kwargs: dict, batch: int, repeat: int, clock: str = "cpu") -> float:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name, **kwargs).train()
    size = model.pretrained_cfg["input_size"]
    x, target = torch.randn(batch, *size), torch.randint(0, model.num_classes, (batch,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), target).backward()
        optimizer.step()

    return timer(clock)(step, repeat=repeat)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    add_clock(parser, default="cpu")
    parser.add_argument("--rows", nargs="+", metavar="ROW", help="only these Table 1 rows (e.g. ViT 'ViT w/ SSM-r')")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [r for r in ROWS if args.rows is None or r[0] in args.rows]
    with readme_section("benchmarks.ssm2d_train_time", args.write_readme, argv):
        print(f"CIFAR-100 size (32 x 32, 100 classes), batch {args.batch}, train step = fwd + bwd + AdamW, "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, "
              f"{clock_name(args.clock)} of {args.repeat}\n")
        ms = {row: 1e3 * step_seconds(name, kwargs, args.batch, args.repeat, args.clock)
              for row, name, kwargs in rows}
        out = []
        for row, name, kwargs in rows:
            base = BASELINE[row.split()[0].split("-")[0]]
            ratio = f"{ms[row] / ms[base]:.2f}x" if base in ms else "-"
            to_ablate = f"{ms[row] / ms['Mega-ablate']:.2f}x" if row.startswith("Mega") and "Mega-ablate" in ms else ""
            args_text = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
            out.append([row, name + (f" ({args_text})" if args_text else ""), f"{ms[row]:.1f}", base, ratio,
                        to_ablate, f"{PAPER_TRAIN_TIME[row]}x"])
        print(table(["Table 1 row", "model (kwargs)", "ms/step", "baseline", "ratio (ours)", "vs Mega-ablate (ours)",
                     "ratio (paper)"], out))


if __name__ == "__main__":
    main()
