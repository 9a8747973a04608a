"""OpenMMLab main job: a paper config trained for a short while with the real ``mim train`` on the embedded data.

Generates coco_digits (and ade_digits for ``--toolboxes mmseg``), then runs ``mim train`` on the paper's
Mask R-CNN ViM2-T config (UperNet ViQS-T for mmseg), shrunk by ``--cfg-options`` to a CPU run (see
``ssm_plugins.data.openmmlab_tiny``), and prints the training loss at the start and the end and the validation
metrics after training (CocoMetric bbox/segm mAP; IoUMetric mIoU). One JSON line per run.

    .venv/bin/python scripts/main_openmmlab.py                       # mmdet, about 2 minutes on 2 cores
    .venv/bin/python scripts/main_openmmlab.py --toolboxes mmdet mmseg --work-dir work_dirs/main
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from ssm_plugins.data.ade_digits import ade_digits
from ssm_plugins.data.coco_digits import coco_digits
from ssm_plugins.data.openmmlab_tiny import logged_runs, mim, mmdet_tiny_options, mmseg_tiny_options

REPO = Path(__file__).resolve().parents[1]
RUNS = {
    # Mask R-CNN from scratch: 6 epochs x 8 iterations (16 images, batch 2), then CocoMetric on the 30 val images
    "mmdet": dict(config=REPO / "configs_mmdet/vim2/mask-rcnn_vim2-t_fpn_1x_coco.py",
                  data=coco_digits, options=lambda root, scale: mmdet_tiny_options(
                      root, epochs=max(1, round(6 * scale)), images=16, val_interval=1000, lr=5e-4),
                  metrics=("coco/bbox_mAP", "coco/bbox_mAP_50", "coco/segm_mAP", "coco/segm_mAP_50")),
    # UperNet from scratch: 24 iterations of batch 2 on 128-px crops, then IoUMetric on the 30 val images
    "mmseg": dict(config=REPO / "configs_mmseg/viqs/upernet_viqs-t_4xb4-160k_ade20k-512x512.py",
                  data=ade_digits, options=lambda root, scale: mmseg_tiny_options(
                      root, iters=max(1, round(24 * scale)), lr=1e-3),
                  metrics=("mIoU", "mAcc", "aAcc")),
}


def run(toolbox: str, work_dir: Path, scale: float = 1.0) -> dict:
    spec = RUNS[toolbox]
    root = spec["data"]()
    start = time.perf_counter()
    done = mim("train", toolbox, spec["config"], work_dir, spec["options"](root, scale))
    if done.returncode != 0:
        raise RuntimeError(f"mim train {toolbox} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (records,) = logged_runs(work_dir)[-1:]
    losses = [r["loss"] for r in records if "loss" in r]
    (val,) = [r for r in records if spec["metrics"][0] in r][-1:]
    window = max(1, len(losses) // 4)  # single-batch losses are noisy: report the first / last quarter's mean
    return {"toolbox": toolbox, "config": str(spec["config"].relative_to(REPO)), "iters": len(losses),
            "loss_start": round(statistics.fmean(losses[:window]), 3),
            "loss_end": round(statistics.fmean(losses[-window:]), 3),
            **{key: val[key] for key in spec["metrics"]}, "seconds": round(time.perf_counter() - start, 1)}


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolboxes", nargs="+", choices=sorted(RUNS), default=["mmdet"])
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="mim work dirs go to WORK_DIR/<toolbox> (default: a temporary folder, removed)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the length of every run")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error(f"--scale must be > 0, got {args.scale}")
    results = []
    with tempfile.TemporaryDirectory(prefix="ssm_plugins_openmmlab_") as tmp:
        base = args.work_dir or Path(tmp)
        for toolbox in args.toolboxes:
            result = run(toolbox, base / toolbox, args.scale)
            print(json.dumps(result), flush=True)
            results.append(result)
    return results


if __name__ == "__main__":
    main()
