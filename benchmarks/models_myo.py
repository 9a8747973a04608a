"""Myosotis timm models: parameters and GFLOPs (Myosotis, arXiv 2509.20503; docs/myosotis.md, 'Backbones').

    .venv/bin/python -m benchmarks.models_myo

The paper reports accuracies only (Table 4: zCIFAR 93.4 %, sCIFAR 92.6 %); it gives no parameter counts,
FLOPs or timings (paper Sec. 4). The reference for ``myopix_zcifar`` is therefore the S5 network it copies
(S5's sCIFAR/zCIFAR settings, docs/myosotis.md 'S5 settings': depth 6, H 512, P 384, J 3, 10 classes), counted
analytically; Myo's per-head parameters equal S5's (docs/myosotis.md, 'Edge weights'), so the only difference is
Myo's learned virtual-node inputs (5 levels x H). ``myonet_*`` are [X] scaffolding with no paper numbers.

GFLOPs: one image at the model's default input size, eval mode, torch.utils.flop_counter.FlopCounterMode
(the Myo solve op registers its formula). FLOPs are 2 x multiply-adds; the complex B̃ / C̃ projections run as
real matmuls (2 each), so they are counted at their true cost.
"""
from __future__ import annotations

import torch
import torch.nn as nn

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.layers import MyoSSM

from ._common import gflops, table

# (model, paper's params in M, paper's accuracy in % for the row it reproduces)
PAPER = [
    ("myopix_zcifar", None, "zCIFAR 93.4 (Table 4)"),
    ("myonet_tiny", None, "-"),
    ("myonet_small", None, "-"),
    ("myonet_base", None, "-"),
]


def s5_cifar_params(depth: int = 6, dim: int = 512, state_size: int = 384, in_chans: int = 3,
                    num_classes: int = 10) -> int:
    """Parameters of the S5 sCIFAR network (lindermanlab/S5, conj_sym, not bidirectional, half_glu1, BatchNorm)."""
    heads = state_size // 2
    ssm = 3 * heads + 2 * heads * dim + 2 * dim * heads + dim  # Λre, Λim, log Δ; B̃, C̃ complex; D
    layer = ssm + 2 * dim + dim * dim + dim  # BatchNorm scale/bias, GLU dense
    return in_chans * dim + dim + depth * layer + dim * num_classes + num_classes


def measure(name: str) -> dict:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    size = model.pretrained_cfg["input_size"][-2:]
    params = sum(p.numel() for p in model.parameters())
    ssm_params = sum(p.numel() for m in model.modules() if isinstance(m, MyoSSM) for p in m.parameters())
    total, solve = gflops(model, size)
    return dict(params=params / 1e6, ssm_params=ssm_params / 1e6, gflops=total, solve_gflops=solve, size=tuple(size))


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for name, paper_params, paper_result in PAPER:
        r = measure(name)
        reference = s5_cifar_params() / 1e6 if name == "myopix_zcifar" else None
        rows.append([
            name, f"{r['size'][0]}x{r['size'][1]}", f"{r['params']:.3f}", f"{r['ssm_params']:.3f}",
            f"{paper_params:.3f}" if paper_params else "not reported",
            f"{reference:.3f} ({100 * (r['params'] - reference) / reference:+.2f}%)" if reference else "-",
            f"{r['gflops']:.3f}", f"{r['solve_gflops']:.4f}", paper_result,
        ])
    print(table(["model", "input", "params M", "of which MyoSSM", "paper params M", "S5 equivalent M (diff)",
                 "GFLOPs", "of which solve", "paper result"], rows))
    print("\nThe paper reports no parameter counts or FLOPs; S5 equivalent = the S5 sCIFAR network (docs/myosotis.md).")


if __name__ == "__main__":
    import argparse

    from ._common import add_write_readme, readme_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_readme(parser)
    with readme_section("benchmarks.models_myo", parser.parse_args().write_readme):
        main()
