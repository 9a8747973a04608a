"""ViM2 / ViQS timm models: parameters and GFLOPs vs the paper's Table 15 (spec mambamixer.md §3.5, §6.2).

    .venv/bin/python -m benchmarks.models_vim2

The paper gives no widths or depths; the models use the spec's proposed [D] configs (§3.5), so these numbers
are reported, not tuned. GFLOPs: one 224² image, torch.utils.flop_counter.FlopCounterMode (2 x multiply-adds;
the paper's "FLOPs" are most likely fvcore MACs, which would be half of ours for the same network). "scan"
= the selective_scan / qs_mix ops' registered FLOPs. The parameter split shows where the budget goes.
"""
from __future__ import annotations

import torch

import ssm_plugins  # noqa: F401  (registers the models)

from ._common import gflops, table

# (model, paper params M, paper GFLOPs) from Table 15
PAPER = [
    ("vim2_t", 13.2, 2.1),
    ("viqs_t", 10.1, 1.9),
    ("vim2_s", 28.0, 5.3),
    ("viqs_s", 23.0, 4.7),
    ("vim2_b", 74.0, 17.9),
    ("viqs_b", 45.0, 9.0),
    ("vim2_l", 122.0, 23.2),
]


def _count(module) -> float:
    return sum(p.numel() for p in module.parameters()) / 1e6


def measure(name: str, with_flops: bool) -> dict:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    token = sum(_count(b.token_mixer) for b in model.blocks)
    channel = sum(_count(b.channel_mixer) for b in model.blocks if b.channel_mixer is not None)
    conv = _count(model.spm) + _count(model.mrfp) + _count(model.interactions) if model.conv_branch else 0.0
    out = dict(params=_count(model), token=token, channel=channel, conv=conv)
    if with_flops:
        out["gflops"], out["scan_gflops"] = gflops(model, (224, 224))
    return out


def main(with_flops: bool = True) -> None:
    torch.set_num_threads(1)
    rows = []
    for name, paper_params, paper_gflops in PAPER:
        r = measure(name, with_flops)
        rows.append([name, f"{r['params']:.2f}", f"{paper_params:.1f}",
                     f"{100 * (r['params'] - paper_params) / paper_params:+.0f}%",
                     f"{r['token']:.2f}", f"{r['channel']:.2f}", f"{r['conv']:.2f}",
                     f"{r['gflops']:.2f}" if with_flops else "-", f"{r['scan_gflops']:.3f}" if with_flops else "-",
                     f"{paper_gflops:.1f}"])
    print(table(["model", "params M", "paper M", "diff", "token mixers M", "channel mixers M", "conv branch M",
                 "GFLOPs (2xMAC)", "of which scan", "paper GFLOPs"], rows))


if __name__ == "__main__":
    import sys

    main(with_flops="--no-flops" not in sys.argv)
