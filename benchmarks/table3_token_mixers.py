"""MambaMixer Table 3 at CPU size: token mixer (S6 / S4 / HiPPO) x channel mixer (none / MLP / QS) in ViM2-T's
configs, each one ``mim train mmpretrain`` of the main job's classification run, beside a DeiT control.

    .venv/bin/python -m benchmarks.table3_token_mixers                 # 10 runs, about 25 min on 2 cores
    .venv/bin/python -m benchmarks.table3_token_mixers --seeds 0 1 2   # each row over three seeds
    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.table3_token_mixers --only S4 "S4 + QS" --work-dir work_dirs/t3

Every row is the row's config (``configs_mmpretrain/vim2/vim2-t*.py``) with the options of the main job's
classification stage (``scripts/main_openmmlab.py``): ``imagenet_digits`` (1,000 train / 200 val images of 64 px,
10 classes), 6 epochs of batch 32, one warm-up epoch then cosine, lr 3e-3, light augmentation, seed 0 (or each of
``--seeds``: at this size one seed's top-1 moves by up to 25 points, scripts/README.md 'Repeats'), the backbone
at the main job's CPU size (``CPU_PLAIN_MIXER``: 64 wide, 4 blocks, 2 interactions). The control is timm's DeiT
(``deit_tiny_patch16_224``) at the same width and depth (64, 4 blocks, 2 heads) through the same ViM2-T config, so
recipe, optimiser and data are the same. Top-1 on the 200 val images; the paper's ImageNet top-1 beside it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ssm_plugins.openmmlab_tiny import CPU_PLAIN_MIXER

from ._common import table

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs_mmpretrain/vim2"
CONTROL = "DeiT (control)"
DEIT = dict(model_name="deit_tiny_patch16_224", embed_dim=64, depth=4, num_heads=2)
# row -> (config file, the paper's Table 3 top-1 on ImageNet, None for the control)
ROWS: Dict[str, Tuple[str, Optional[float]]] = {
    CONTROL: ("vim2-t_8xb128_in1k.py", None),
    "ViM2 (S6 + QS)": ("vim2-t_8xb128_in1k.py", 81.9),
    "ViM2 - QS (S6)": ("vim2-t-noqs_8xb128_in1k.py", 78.4),
    "ViM2 (MLP) (S6 + MLP)": ("vim2-t-mlp_8xb128_in1k.py", 80.0),
    "S4": ("vim2-t-s4-noqs_8xb128_in1k.py", 68.9),
    "S4 + MLP": ("vim2-t-s4-mlp_8xb128_in1k.py", 72.7),
    "S4 + QS": ("vim2-t-s4_8xb128_in1k.py", 73.1),
    "Hippo": ("vim2-t-hippo-noqs_8xb128_in1k.py", 67.8),
    "Hippo + MLP": ("vim2-t-hippo-mlp_8xb128_in1k.py", 75.3),
    "Hippo + QS": ("vim2-t-hippo_8xb128_in1k.py", 77.5),
}


def options(name: str, scale: float = 1.0, seed: int = 0) -> List[str]:
    """The main job's classification options for one row (and the control's model in place of ViM2)."""
    from ssm_plugins.data.imagenet_digits import imagenet_digits
    from ssm_plugins.openmmlab_tiny import mmpretrain_tiny_options

    out = mmpretrain_tiny_options(imagenet_digits(), epochs=max(1, round(6 * scale)), images=None, val_images=None,
                                  image_size=64, batch_size=32, lr=3e-3, light_augment=True, warmup_cosine=True,
                                  seed=seed)
    kwargs = DEIT if name == CONTROL else CPU_PLAIN_MIXER
    return out + [f"model.{key}={value}" for key, value in kwargs.items()]


def parameters(name: str) -> float:
    """Millions of parameters of the row's model as the run builds it (meta device)."""
    import timm
    from mmengine.config import Config

    import ssm_plugins  # noqa: F401  (registers the models)

    model = dict(Config.fromfile(CONFIGS / ROWS[name][0]).model)
    kwargs = {k: v for k, v in model.items() if k not in ("type", "loss", "train_cfg", "model_name", "num_classes")}
    kwargs.update(DEIT if name == CONTROL else CPU_PLAIN_MIXER)
    model_name = kwargs.pop("model_name", model["model_name"])
    net = timm.create_model(model_name, img_size=64, num_classes=10, device="meta", **kwargs)
    return sum(p.numel() for p in net.parameters()) / 1e6


def run(name: str, work_dir: Path, scale: float = 1.0, seed: int = 0) -> dict:
    from ssm_plugins.openmmlab_tiny import mim, summarise

    start = time.perf_counter()
    done = mim("train", "mmpretrain", CONFIGS / ROWS[name][0], work_dir, options(name, scale, seed))
    if done.returncode != 0:
        raise RuntimeError(f"mim train mmpretrain ({name}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return dict(summarise(work_dir, ["accuracy/top1"]), seconds=time.perf_counter() - start)


def main(argv: Optional[List[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(ROWS), default=None, help="these rows only")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the length of every run")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the mim work dirs here")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="train each row once per seed")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error(f"--scale must be > 0, got {args.scale}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ssm_plugins_table3_") as tmp:
        base = args.work_dir or Path(tmp)
        for i, name in enumerate(args.only or list(ROWS)):
            runs = [run(name, base / f"row{i}_seed{seed}", args.scale, seed) for seed in args.seeds]
            top1 = [r["accuracy/top1"] for r in runs]
            paper = ROWS[name][1]
            rows.append([name, ROWS[name][0], f"{parameters(name):.3f}", "–" if paper is None else f"{paper:.1f}",
                         " / ".join(f"{t:.1f}" for t in top1), f"{statistics.mean(top1):.1f}",
                         " / ".join(f"{r['loss_start']:.2f} -> {r['loss_end']:.2f}" for r in runs),
                         f"{statistics.mean(r['seconds'] for r in runs):.0f}"])
            print(" | ".join(rows[-1]), flush=True)
    seeds = " / ".join(map(str, args.seeds))
    text = (f"Table 3 at CPU size, imagenet_digits, {max(1, round(6 * args.scale))} epochs, seeds {seeds} "
            f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}):\n\n"
            + table(["row", "config", "params M (here)", "paper top-1 (ImageNet)", f"top-1 (digits), seeds {seeds}",
                     "mean", "loss", "s per run"], rows))
    print(text, flush=True)
    return text


if __name__ == "__main__":
    main()
