"""Dense prediction against a ResNet-18 control: the same small Mask R-CNN (and UperNet) problem with every backbone
family registered for MMDetection / MMSegmentation and with the toolbox's own ResNet (depth 18, from scratch).

    .venv/bin/python -m benchmarks.dense_control                      # Mask R-CNN rows (about 15 min on 2 cores)
    .venv/bin/python -m benchmarks.dense_control --toolboxes mmdet mmseg --only ResNet-18 ViM2
    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.dense_control --work-dir work_dirs/dense_control

Every row is one ``mim train`` (the main job's command line, ``scripts/main_openmmlab.py``) from scratch with the
same data, options, heads and seed; only the backbone (and the neck's / decode heads' input widths) changes:

* Mask R-CNN: ``coco_digits`` (100 scenes at 160 px, CocoMetric bbox/segm on the 30 val scenes),
  ``mmdet_tiny_options(epochs=6, images=100, batch_size=4, lr=5e-4)`` (150 steps), neck and heads 64 wide
  (``mask_rcnn_width_options``), the ViM2-T 1x config's optimiser (AdamW, wd 0.05 and its no-decay keys).
* UperNet: ``ade_digits`` (48 steps of batch 2 on 128-px crops, lr 1e-3, IoUMetric on the 30 val scenes), the
  ViM2-T config's schedule and heads.

ViM2 / ViQS run at the main job's CPU size (64 wide, 4 blocks, 2 interactions); Swin-2D-SSM, ESSM2D and MyoNet at
their smallest registered size. The control is ``ResNet(depth=18)`` with trained BatchNorm statistics
(``norm_eval=False``; from scratch, mmdet's default ``norm_eval=True`` would freeze them at their initial values)
and nothing frozen. A family's config is its configs_mmdet / configs_mmseg file where there is one, otherwise the
ViM2-T config with the backbone swapped in a derived file (written to the work dir, ``_delete_`` on the backbone).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from ssm_plugins.openmmlab_tiny import CPU_PLAIN_MIXER

from ._common import table

REPO = Path(__file__).resolve().parents[1]
MMDET_VIM2 = REPO / "configs_mmdet/vim2/mask-rcnn_vim2-t_fpn_1x_coco.py"
MMSEG_VIM2 = REPO / "configs_mmseg/vim2/upernet_vim2-t_4xb4-160k_ade20k-512x512.py"
RESNET18 = dict(type="ResNet", depth=18, num_stages=4, out_indices=(0, 1, 2, 3), frozen_stages=-1,
                norm_cfg=dict(type="BN", requires_grad=True), norm_eval=False, style="pytorch", init_cfg=None)
HEAD_WIDTH = 64

# name -> (backbone type or None for the control, kwargs, mmdet config, mmseg config; None: derived from ViM2-T's)
FAMILIES: Dict[str, tuple] = {
    "ResNet-18": (None, {}, None, None),
    "ViM2": ("ViM2", CPU_PLAIN_MIXER, MMDET_VIM2, MMSEG_VIM2),
    "ViQS": ("ViQS", CPU_PLAIN_MIXER, REPO / "configs_mmdet/viqs/mask-rcnn_viqs-t_fpn_1x_coco.py",
             REPO / "configs_mmseg/viqs/upernet_viqs-t_4xb4-160k_ade20k-512x512.py"),
    "SwinSSM2D": ("SwinSSM2D", {}, REPO / "configs_mmdet/ssm2d/mask-rcnn_swin-t-p4-w7-ssm2d_fpn_1x_coco.py",
                  REPO / "configs_mmseg/ssm2d/upernet_swin-t-p4-w7-ssm2d_4xb4-160k_ade20k-512x512.py"),
    "ESSM2D": ("ESSM2D", {}, None, None),
    "MyoNet": ("MyoNet", {}, None, None),
}
METRICS = {"mmdet": ["coco/bbox_mAP_50", "coco/segm_mAP_50", "coco/bbox_mAP"], "mmseg": ["mIoU", "mAcc"]}
CONTROL = "ResNet-18"


def registered_families() -> List[str]:
    """Our OpenMMLab backbone classes (ssm_plugins.openmmlab.BACKBONES): the table must have a row for each."""
    from ssm_plugins.openmmlab import BACKBONES

    return [cls.__name__ for cls in BACKBONES]


def out_channels(name: str) -> List[int]:
    """The four levels' widths of a family's backbone as the runs build it."""
    kind, kwargs, _, _ = FAMILIES[name]
    if kind is None:
        return [64, 128, 256, 512]
    from ssm_plugins import openmmlab

    return list(getattr(openmmlab, kind)(arch="tiny", img_size=160, device="meta", **kwargs).out_channels)


def _derived(work_dir: Path, base: Path, toolbox: str, backbone: dict, channels: List[int]) -> Path:
    """A config that is ``base`` with ``backbone`` in place of its own (and the neck / heads' input widths)."""
    if toolbox == "mmdet":
        rest = f"neck=dict(in_channels={channels})"
    else:  # the auxiliary FCN head reads level 2 (1/16)
        rest = f"decode_head=dict(in_channels={channels}), auxiliary_head=dict(in_channels={channels[2]})"
    path = work_dir / "derived" / f"{toolbox}_derived.py"  # not in the work dir itself: mim dumps its config there
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"_base_ = [{str(base)!r}]\nmodel = dict(backbone=dict(_delete_=True, **{backbone!r}), {rest})\n")
    return path


def spec(name: str, toolbox: str, work_dir: Path, scale: float = 1.0, init_checkpoint: Optional[str] = None):
    """(config path, --cfg-options) of one row; ``init_checkpoint``: the ResNet-18 row starts from an MMPretrain
    classifier's checkpoint (its ``backbone.`` weights) instead of from scratch."""
    from ssm_plugins.data.ade_digits import ade_digits
    from ssm_plugins.data.coco_digits import coco_digits
    from ssm_plugins.openmmlab_tiny import mask_rcnn_width_options, mmdet_tiny_options, mmseg_tiny_options

    kind, kwargs, mmdet_config, mmseg_config = FAMILIES[name]
    channels = out_channels(name)
    config = mmdet_config if toolbox == "mmdet" else mmseg_config
    if toolbox == "mmdet":
        options = mmdet_tiny_options(coco_digits(), epochs=max(1, round(6 * scale)), images=100, batch_size=4,
                                     val_interval=1000, lr=5e-4)
        options += mask_rcnn_width_options(HEAD_WIDTH, in_channels=channels)
    else:
        options = mmseg_tiny_options(ade_digits(), iters=max(1, round(48 * scale)), lr=1e-3)
        options += [f"model.decode_head.in_channels=[{','.join(map(str, channels))}]",
                    f"model.auxiliary_head.in_channels={channels[2]}"]
    options += [f"model.backbone.{key}={value}" for key, value in kwargs.items()]
    if config is None:
        backbone = dict(RESNET18) if kind is None else dict(type=kind, arch="tiny", init_cfg=None)
        if kind is None and init_checkpoint is not None:
            backbone["init_cfg"] = dict(type="Pretrained", checkpoint=str(init_checkpoint), prefix="backbone.")
        config = _derived(work_dir, MMDET_VIM2 if toolbox == "mmdet" else MMSEG_VIM2, toolbox, backbone, channels)
    if kind is None:  # mmdet's / mmseg's ResNet has no build size; its init_cfg is the derived config's
        options = [o for o in options if not o.startswith(("model.backbone.img_size=", "model.backbone.init_cfg="))]
    return config, options


def run(name: str, toolbox: str, work_dir: Path, scale: float = 1.0, cfg_options: List[str] = (),
        init_checkpoint: Optional[str] = None) -> dict:
    from ssm_plugins.openmmlab_tiny import mim, summarise

    config, options = spec(name, toolbox, work_dir, scale, init_checkpoint)
    options = options + list(cfg_options)
    start = time.perf_counter()
    done = mim("train", toolbox, config, work_dir, options)
    if done.returncode != 0:
        raise RuntimeError(f"mim train {toolbox} ({name}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return dict(summarise(work_dir, METRICS[toolbox]), seconds=time.perf_counter() - start)


def rows(toolbox: str, names: List[str], base: Path, scale: float) -> List[list]:
    results = {name: run(name, toolbox, base / toolbox / name, scale) for name in names}
    control = results.get(CONTROL)
    key = METRICS[toolbox][0]
    out = []
    for name, r in results.items():
        digits = 3 if toolbox == "mmdet" else 1
        gap = "–" if control is None or name == CONTROL else f"{r[key] - control[key]:+.{digits}f}"
        out.append([name + (" (control)" if name == CONTROL else ""), r["iters"],
                    f"{r['loss_start']:.2f} -> {r['loss_end']:.2f}",
                    *(f"{r[m]:.3f}" if toolbox == "mmdet" else f"{r[m]:.1f}" for m in METRICS[toolbox]), gap,
                    f"{r['seconds']:.0f}"])
    return out


def main(argv: Optional[List[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolboxes", nargs="+", choices=["mmdet", "mmseg"], default=["mmdet"])
    parser.add_argument("--only", nargs="+", choices=list(FAMILIES), default=None, help="these rows only")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the length of every run")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the mim work dirs here")
    args = parser.parse_args(argv)
    missing = set(registered_families()) - set(FAMILIES)
    if missing:
        parser.error(f"no row for the registered backbone families {sorted(missing)}: add them to FAMILIES")
    names = args.only or list(FAMILIES)
    texts = []
    with tempfile.TemporaryDirectory(prefix="ssm_plugins_dense_control_") as tmp:
        base = args.work_dir or Path(tmp)
        for toolbox in args.toolboxes:
            headers = (["backbone", "iters", "loss"]
                       + (["bbox mAP50", "segm mAP50", "bbox mAP"] if toolbox == "mmdet" else ["mIoU", "mAcc"])
                       + [("bbox mAP50" if toolbox == "mmdet" else "mIoU") + " - control", "s"])
            title = ("Mask R-CNN, coco_digits, 150 steps" if toolbox == "mmdet"
                     else "UperNet, ade_digits, 48 steps")
            text = f"{title} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}):\n\n" + table(
                headers, rows(toolbox, names, base, args.scale))
            print(text + "\n", flush=True)
            texts.append(text)
    return "\n\n".join(texts)


if __name__ == "__main__":
    main()
