"""CPU inference throughput (images/s, batch 8, 224x224) of our models next to timm's own, in one run.

    .venv/bin/python -m benchmarks.throughput [--batch 8] [--repeat 3]

Ratios are against timm's deit_small_patch16_224 measured in the same run; a model not registered
is listed as such.
"""
from __future__ import annotations

import argparse

import torch

import ssm_plugins  # noqa: F401  (registers our models when timm is imported)
import timm

from benchmarks._common import add_write_readme, readme_section, seconds, table

OURS = ("vim2_t", "viqs_t", "vim2_s", "deit_tiny_patch16_224_ssm2d", "deit_small_patch16_224_ssm2d",
        "swin_tiny_patch4_window7_224_ssm2d", "essm_2d_tiny", "myonet_tiny")
PEERS = ("deit_tiny_patch16_224", "deit_small_patch16_224", "swin_tiny_patch4_window7_224")
REFERENCE = "deit_small_patch16_224"


def images_per_second(name: str, batch: int, repeat: int) -> float:
    model = timm.create_model(name).eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        return batch / seconds(lambda: model(x), repeat=repeat, warmup=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    add_write_readme(parser)
    args = parser.parse_args(argv)
    registered = set(timm.list_models())
    speed = {n: images_per_second(n, args.batch, args.repeat) for n in PEERS + OURS if n in registered}
    rows = []
    for name in OURS + PEERS:
        if name not in speed:
            rows.append((name, "ours" if name in OURS else "timm", "not registered yet", "-"))
            continue
        rows.append((name, "ours" if name in OURS else "timm", speed[name], speed[name] / speed[REFERENCE]))
    with readme_section("benchmarks.throughput", args.write_readme, argv):
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, 224x224, eval, "
              "no_grad")
        print(table(["model", "from", "images/s", f"vs {REFERENCE}"], rows))


if __name__ == "__main__":
    main()
