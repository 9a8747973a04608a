"""OpenMMLab main job: the papers' pipeline at small scale, through the real ``mim train`` command lines.

1. ``mim train mmpretrain configs_mmpretrain/vim2/vim2-t_8xb128_in1k.py`` pre-trains a ViM2 backbone on the
   embedded ImageNet-format digits (``imagenet_digits``);
2. ``mim train mmdet configs_mmdet/vim2/mask-rcnn_vim2-t_fpn_1x_coco.py`` loads that checkpoint through the
   config's ``init_cfg=dict(type='Pretrained', checkpoint=...)`` and learns to detect and segment the digits of the
   COCO-format scenes (``coco_digits``);
(3. with ``--toolboxes mmpretrain mmdet mmseg``: ``mim train mmseg`` of the UperNet ViM2-T config from the same
   checkpoint on the ADE20K-format scenes.)

The configs are the paper configs, shrunk by ``--cfg-options`` to a CPU run (``ssm_plugins.openmmlab_tiny``):
a narrow ViM2 (width 64, 4 blocks, 2 interactions; same code paths as ViM2-T), small images, short schedules. Prints
one JSON line per run: the training loss at the start and the end, the validation metrics (Accuracy top-1;
CocoMetric bbox/segm mAP; IoUMetric mIoU) and the time. ``--no-pretrain`` runs the dense stages from scratch (the
"before" of the README).

    .venv/bin/python scripts/main_openmmlab.py                        # classify, then detect: about 5 min on 2 cores
    .venv/bin/python scripts/main_openmmlab.py --toolboxes mmpretrain mmdet mmseg --work-dir work_dirs/main
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from ssm_plugins.data.ade_digits import ade_digits
from ssm_plugins.data.coco_digits import coco_digits
from ssm_plugins.data.imagenet_digits import imagenet_digits
from ssm_plugins.openmmlab_tiny import (CPU_PLAIN_MIXER, mask_rcnn_width_options, mim, mmdet_tiny_options,
                                             mmpretrain_tiny_options, mmseg_tiny_options, summarise)

REPO = Path(__file__).resolve().parents[1]
# the backbone of all three stages: ViM2's classes at a CPU size (the classifier's timm kwargs = the backbone's)
BACKBONE = CPU_PLAIN_MIXER
WIDTH = BACKBONE["embed_dim"]


def _kwargs(prefix: str) -> list:
    return [f"{prefix}.{key}={value}" for key, value in BACKBONE.items()]


# Mask R-CNN's neck and heads at 64 channels (ssm_plugins.openmmlab_tiny.mask_rcnn_width_options)
MASK_RCNN_WIDTH = mask_rcnn_width_options(WIDTH)


RUNS = {
    # classification: 1000 images at 64 px, batch 32, 6 epochs (1 warm-up, cosine), lr 3e-3, light augmentation;
    # Accuracy on the 200 val images
    "mmpretrain": dict(
        config=REPO / "configs_mmpretrain/vim2/vim2-t_8xb128_in1k.py", data=imagenet_digits, checkpoint="epoch_{}.pth",
        options=lambda root, scale, pretrained: mmpretrain_tiny_options(
            root, epochs=max(1, round(6 * scale)), images=None, val_images=None, image_size=64, batch_size=32,
            lr=3e-3, light_augment=True, warmup_cosine=True) + _kwargs("model"),
        metrics=("accuracy/top1",)),
    # Mask R-CNN: 100 training images at 160 px, batch 4, 6 epochs (constant lr: the 1x steps come at 8 and 11);
    # CocoMetric on the 30 val images
    "mmdet": dict(
        config=REPO / "configs_mmdet/vim2/mask-rcnn_vim2-t_fpn_1x_coco.py", data=coco_digits, checkpoint=None,
        options=lambda root, scale, pretrained: mmdet_tiny_options(
            root, epochs=max(1, round(6 * scale)), images=100, batch_size=4, val_interval=1000, lr=5e-4,
            pretrained=pretrained) + _kwargs("model.backbone") + [f"model.neck.in_channels=[{','.join([str(WIDTH)] * 4)}]"]
        + MASK_RCNN_WIDTH,
        metrics=("coco/bbox_mAP", "coco/bbox_mAP_50", "coco/segm_mAP", "coco/segm_mAP_50")),
    # UperNet: 48 iterations of batch 2 on 128-px crops; IoUMetric on the 30 val images
    "mmseg": dict(
        config=REPO / "configs_mmseg/vim2/upernet_vim2-t_4xb4-160k_ade20k-512x512.py", data=ade_digits, checkpoint=None,
        options=lambda root, scale, pretrained: mmseg_tiny_options(
            root, iters=max(1, round(48 * scale)), lr=1e-3, pretrained=pretrained) + _kwargs("model.backbone") + [
            f"model.decode_head.in_channels=[{','.join([str(WIDTH)] * 4)}]", f"model.auxiliary_head.in_channels={WIDTH}"],
        metrics=("mIoU", "mAcc", "aAcc")),
}


def run(toolbox: str, work_dir: Path, scale: float = 1.0, pretrained: Path | None = None) -> dict:
    spec = RUNS[toolbox]
    root = spec["data"]()
    start = time.perf_counter()
    done = mim("train", toolbox, spec["config"], work_dir, spec["options"](root, scale, pretrained))
    if done.returncode != 0:
        raise RuntimeError(f"mim train {toolbox} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    summary = summarise(work_dir, list(spec["metrics"]))
    epochs = summary.pop("epochs")
    config = spec["config"]  # a derived config (benchmarks.chain_transfer control) may lie outside the repository
    result = {"toolbox": toolbox, "config": str(config.relative_to(REPO) if config.is_relative_to(REPO) else config),
              "pretrained": None if pretrained is None else pretrained.name, **summary,
              "seconds": round(time.perf_counter() - start, 1)}
    if spec["checkpoint"]:
        result["checkpoint"] = work_dir / spec["checkpoint"].format(epochs)
    return result


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolboxes", nargs="+", choices=sorted(RUNS), default=["mmpretrain", "mmdet"])
    parser.add_argument("--no-pretrain", action="store_true",
                        help="mmdet/mmseg start from scratch even if mmpretrain ran (the README's 'before')")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="mim work dirs go to WORK_DIR/<toolbox> (default: a temporary folder, removed)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the length of every run")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error(f"--scale must be > 0, got {args.scale}")
    order = [t for t in RUNS if t in args.toolboxes]  # classification first: the others start from its checkpoint
    results, pretrained = [], None
    with tempfile.TemporaryDirectory(prefix="ssm_plugins_openmmlab_") as tmp:
        base = args.work_dir or Path(tmp)
        for toolbox in order:
            result = run(toolbox, base / toolbox, args.scale, None if args.no_pretrain else pretrained)
            if "checkpoint" in result:
                pretrained = result.pop("checkpoint")
            print(json.dumps(result), flush=True)
            results.append(result)
    return results


if __name__ == "__main__":
    main()
