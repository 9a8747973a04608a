"""``--cfg-options`` that turn a paper config of configs_mmpretrain/, configs_mmdet/ or configs_mmseg/ into a CPU run
of seconds on the embedded ``imagenet_digits`` / ``coco_digits`` / ``ade_digits`` data (tests and the OpenMMLab main
job use them).

They keep the config's model family, heads, optimiser type and evaluators and change only: the data (root,
classes, a few small images, no worker processes), the number of classes, the backbone's build size, the length
of the run (iterations, no warm-up), logging every iteration without smoothing, and the test-time score threshold
(a barely trained Mask R-CNN scores below mmdet's 0.05, and CocoMetric then reports nothing). The detector and
segmentor start from scratch (``init_cfg=None``) unless given ``pretrained=`` (a checkpoint that a configs_mmpretrain
run wrote): the paper configs expect a local ImageNet checkpoint.

Pure data: no toolbox is imported, so ``mim train`` gets these as plain strings::

    mim train mmdet CONFIG --work-dir DIR --cfg-options $(python -c "...; print(' '.join(mmdet_tiny_options(root)))")
"""
from __future__ import annotations

import os
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from .data import DIGIT_NAMES

_CLASSES = "[" + ",".join(DIGIT_NAMES) + "]"


LOADERS = ("train_dataloader", "val_dataloader", "test_dataloader")


def _loaders(data_root: os.PathLike, batch_size: int) -> List[str]:
    options = []
    for loader in LOADERS:
        options += [f"{loader}.dataset.data_root={data_root}", f"{loader}.dataset.metainfo.classes={_CLASSES}",
                    f"{loader}.num_workers=0", f"{loader}.persistent_workers=False"]
    return options + [f"train_dataloader.batch_size={batch_size}"]


def _run(seed: int, lr: float) -> List[str]:
    return [f"randomness.seed={seed}", "randomness.deterministic=False", f"optim_wrapper.optimizer.lr={lr}",
            "default_hooks.logger.interval=1", "log_processor.window_size=1"]


def _backbone_init(pretrained: Optional[os.PathLike]) -> List[str]:
    return ["model.backbone.init_cfg=None"] if pretrained is None else [
        f"model.backbone.init_cfg.checkpoint={pretrained}"]


def mmpretrain_tiny_options(data_root: os.PathLike, epochs: int = 1, images: Optional[int] = 64,
                            val_images: Optional[int] = 50, image_size: int = 64, batch_size: int = 8,
                            lr: float = 1e-3, seed: int = 0, model_image_size: bool = True,
                            light_augment: bool = False, warmup_cosine: bool = False) -> List[str]:
    """Options for an ImageNet config of configs_mmpretrain (MMPretrain's Swin/DeiT pipeline layout: crop is train
    step 1, resize + centre crop are test steps 1-2) on imagenet_digits: ``epochs`` epochs over the first ``images``
    training images (None: all) at ``image_size`` px, then Accuracy top-1/5 on the first ``val_images`` val images
    and a checkpoint. ``model_image_size`` passes ``img_size`` to the timm model (models with size-dependent
    weights); the classifier has 10 classes.

    ``light_augment``: the paper recipe's regularisation is made for 300 ImageNet epochs and stops a run of a few
    epochs from learning at all (measured: chance level after 6 epochs); this keeps RandAugment and turns off
    Mixup/CutMix and random erasing, and crops at least 35 % of the image (a digit fills most of it).

    ``warmup_cosine``: one warm-up epoch from a tenth of ``lr``, then the config's cosine decay to 0 over the rest
    (the config's 10 warm-up epochs would outlast a short run, so the default is a constant ``lr``). A constant lr
    left the main job's ViM2 classifier at 52-59 % top-1 after 6 epochs; this schedule at lr 3e-3 gives 75.0 %
    (2026-11-29), as scripts/main.py's timm recipe found for vim2_t."""
    from .data.imagenet_digits import CLASSES

    classes = "[" + ",".join(CLASSES) + "]"
    options = []
    for loader, count in (("train_dataloader", images), ("val_dataloader", val_images),
                          ("test_dataloader", val_images)):
        options += [f"{loader}.dataset.data_root={data_root}", f"{loader}.dataset.metainfo.classes={classes}",
                    f"{loader}.num_workers=0", f"{loader}.persistent_workers=False", f"{loader}.batch_size={batch_size}"]
        if count is not None:
            options.append(f"{loader}.dataset.indices={count}")
    resize = round(image_size / 0.875)  # ImageNet's 256 -> 224 ratio
    options += [
        f"train_dataloader.dataset.pipeline.1.scale={image_size}",
        *(f"{loader}.dataset.pipeline.1.scale={resize}" for loader in ("val_dataloader", "test_dataloader")),
        *(f"{loader}.dataset.pipeline.2.crop_size={image_size}" for loader in ("val_dataloader", "test_dataloader")),
        "model.num_classes=10", "data_preprocessor.num_classes=10",
        f"train_cfg.max_epochs={epochs}", f"train_cfg.val_interval={epochs}", "default_hooks.checkpoint.interval=1",
    ]
    if warmup_cosine and epochs >= 2:
        options += ["param_scheduler.0.start_factor=0.1", "param_scheduler.0.end=1", "param_scheduler.1.begin=1",
                    f"param_scheduler.1.end={epochs}", "param_scheduler.1.eta_min=0.0"]
    else:  # constant lr: the warm-up (now from factor 1) lasts 10 epochs, the cosine decay starts after it
        options.append("param_scheduler.0.start_factor=1.0")
    if model_image_size:
        options.append(f"model.img_size={image_size}")
    if light_augment:
        options += ["model.train_cfg=None", "train_dataloader.dataset.pipeline.4.erase_prob=0.0",
                    "train_dataloader.dataset.pipeline.1.crop_ratio_range=(0.6,1.0)",
                    "train_dataloader.dataset.pipeline.2.prob=0.0",
                    "train_dataloader.dataset.pipeline.3.num_policies=1",
                    "train_dataloader.dataset.pipeline.3.magnitude_level=5"]
    return options + _run(seed, lr)


def mmdet_tiny_options(data_root: os.PathLike, epochs: int = 1, images: int = 8, val_images: int = 30,
                       val_interval: int = 1, image_scale: int = 160, batch_size: int = 2, lr: float = 2e-4,
                       seed: int = 0, pretrained: Optional[os.PathLike] = None) -> List[str]:
    """Options for a Mask R-CNN config (1x pipeline layout: Resize is train step 2, test step 1) on coco_digits:
    ``epochs`` epochs over the first ``images`` training images at ``image_scale`` px, validation (CocoMetric
    bbox + segm on the first ``val_images`` of the 30 val images) every ``val_interval`` epochs and after the
    last, and a checkpoint after every epoch.

    Scenes hold at most 4 digits, so proposals and sampled RoIs are cut to a few hundred / 64 and test-time
    detections to 20: mmdet's COCO numbers (1000 proposals, 512 RoIs, 100 detections) make the mask head dominate a
    CPU run."""
    ann = f"{data_root}/annotations/instances_val2017.json"
    scale = f"({image_scale},{image_scale})"
    return _loaders(data_root, batch_size) + [
        f"train_dataloader.dataset.indices={images}", f"val_dataloader.dataset.indices={val_images}",
        f"test_dataloader.dataset.indices={val_images}",
        f"train_dataloader.dataset.pipeline.2.scale={scale}",
        f"val_dataloader.dataset.pipeline.1.scale={scale}",
        f"test_dataloader.dataset.pipeline.1.scale={scale}",
        f"val_evaluator.ann_file={ann}", f"test_evaluator.ann_file={ann}",
        "model.roi_head.bbox_head.num_classes=10", "model.roi_head.mask_head.num_classes=10",
        f"model.backbone.img_size={scale}",
        "model.test_cfg.rcnn.score_thr=0.0", "model.test_cfg.rcnn.max_per_img=20",
        "model.train_cfg.rpn_proposal.nms_pre=300", "model.train_cfg.rpn_proposal.max_per_img=100",
        "model.test_cfg.rpn.nms_pre=300", "model.test_cfg.rpn.max_per_img=100",
        "model.train_cfg.rcnn.sampler.num=64",
        f"train_cfg.max_epochs={epochs}", f"train_cfg.val_interval={val_interval}",
        "default_hooks.checkpoint.interval=1",
        # constant lr: the warm-up (now from factor 1) lasts 1000 iterations, the first step is at epoch 8
        "param_scheduler.0.start_factor=1.0",
    ] + _run(seed, lr) + _backbone_init(pretrained)


def mmseg_tiny_options(data_root: os.PathLike, iters: int = 4, val_images: int = 30, crop: int = 128,
                       batch_size: int = 2, lr: float = 2e-4, seed: int = 0,
                       pretrained: Optional[os.PathLike] = None) -> List[str]:
    """Options for an UperNet config (ADE20K pipeline layout) on ade_digits: ``iters`` iterations on ``crop``-px
    crops, then validation (IoUMetric mIoU on the first ``val_images`` of the 30 val images) and a checkpoint."""
    crop_size = f"({crop},{crop})"
    # ADE20KDataset only accepts subsets of its own 150 class names; the generic dataset takes ours, with the
    # same layout and label convention (0 = other, ignored)
    generic = [f"{loader}.dataset.{key}" for loader in LOADERS
               for key in ("type=BaseSegDataset", "img_suffix=.jpg", "seg_map_suffix=.png", "reduce_zero_label=True")]
    scale = f"({2 * crop},{crop})"  # ADE20K's (2048, 512) at the tiny size
    return _loaders(data_root, batch_size) + generic + [
        f"train_dataloader.dataset.pipeline.2.scale={scale}",
        f"train_dataloader.dataset.pipeline.3.crop_size={crop_size}",
        f"val_dataloader.dataset.pipeline.1.scale={scale}",
        f"test_dataloader.dataset.pipeline.1.scale={scale}",
        f"model.data_preprocessor.size={crop_size}",
        f"model.backbone.img_size={crop}",
        "model.decode_head.num_classes=10", "model.auxiliary_head.num_classes=10",
        # digits cover a few % of a crop: average the loss over labelled pixels, not over every pixel, so it does
        # not swing with the amount of ink in the batch
        "model.decode_head.loss_decode.avg_non_ignore=True", "model.auxiliary_head.loss_decode.avg_non_ignore=True",
        f"val_dataloader.dataset.indices={val_images}", f"test_dataloader.dataset.indices={val_images}",
        f"train_cfg.max_iters={iters}", f"train_cfg.val_interval={iters}",
        f"default_hooks.checkpoint.interval={iters}",
        # constant lr: the warm-up (now from factor 1) lasts 1500 iterations, the poly decay starts after it
        "param_scheduler.0.start_factor=1.0",
    ] + _run(seed, lr) + _backbone_init(pretrained)


# ViM2 / ViQS at a CPU size (the main job's backbone, scripts/main_openmmlab.py, and benchmarks.dense_control's):
# 64 wide, 4 blocks, 2 interactions; the same code paths as ViM2-T (timm kwargs of the classifier and the backbone)
CPU_PLAIN_MIXER = dict(embed_dim=64, depth=4, n_interactions=2, spm_inplanes=32, mrfp_ratio=0.5)


def mask_rcnn_width_options(width: int, in_channels: Optional[List[int]] = None, fc: int = 256) -> List[str]:
    """Mask R-CNN's neck and heads at ``width`` channels (a box head of ``fc`` instead of 1024): at mmdet's 256 their
    convolutions and RoIAlign take 85 % of a CPU step beside a small backbone (measured: 8.5 s -> 1.5 s per step).
    ``in_channels``: the backbone's four levels (the neck's input), if the config's do not fit."""
    neck = [] if in_channels is None else [f"model.neck.in_channels=[{','.join(map(str, in_channels))}]"]
    return neck + [f"model.neck.out_channels={width}", f"model.rpn_head.in_channels={width}",
                   f"model.rpn_head.feat_channels={width}", f"model.roi_head.bbox_roi_extractor.out_channels={width}",
                   f"model.roi_head.bbox_head.in_channels={width}", f"model.roi_head.bbox_head.fc_out_channels={fc}",
                   f"model.roi_head.mask_roi_extractor.out_channels={width}",
                   f"model.roi_head.mask_head.in_channels={width}",
                   f"model.roi_head.mask_head.conv_out_channels={width}"]


def summarise(work_dir: os.PathLike, metrics: List[str]) -> Dict:
    """The last run logged in ``work_dir``: its number of iterations, the training loss over its first and last
    quarter (single-batch losses are noisy) and ``metrics`` from its last validation."""
    (records,) = logged_runs(work_dir)[-1:]
    losses = [r["loss"] for r in records if "loss" in r]
    (val,) = [r for r in records if metrics[0] in r][-1:]
    window = max(1, len(losses) // 4)
    return {"iters": len(losses), "loss_start": round(statistics.fmean(losses[:window]), 3),
            "loss_end": round(statistics.fmean(losses[-window:]), 3), **{key: val[key] for key in metrics},
            "epochs": max(r.get("epoch", 0) for r in records)}


# what a run of several CPU processes adds (``--launcher pytorch --gpus N`` on a machine without a GPU): the runner
# that starts gloo processes without CUDA and synchronises BatchNorm on CPUs (ssm_plugins.openmmlab)
CPU_DISTRIBUTED_OPTIONS = ["runner_type=CPUDistributedRunner", "env_cfg.dist_cfg.backend=gloo"]


def cpu_distributed_options(sync_bn: bool = True) -> List[str]:
    """``--cfg-options`` for ``mim train <toolbox> CONFIG --launcher pytorch --gpus N`` on CPUs (gloo); ``sync_bn``:
    every BatchNorm synchronised across the processes (``sync_bn='torch'``), so N processes of batch B train as one
    of batch N*B. (SyncBN layers of the config's own ``norm_cfg`` are synchronised either way.)"""
    return CPU_DISTRIBUTED_OPTIONS + (["sync_bn=torch"] if sync_bn else [])


def mim(command: str, toolbox: str, config: os.PathLike, work_dir: os.PathLike, options: List[str],
        *args: str, timeout: float = 1800, processes: int = 0) -> subprocess.CompletedProcess:
    """Run ``mim <command> <toolbox> <config> --work-dir <work_dir> [args] --cfg-options <options>`` on the CPU
    (``--gpus 0`` for train; ``processes`` > 0: ``--launcher pytorch --gpus <processes>``, mim's torch.distributed
    launcher, with :func:`cpu_distributed_options` among ``options``), with this checkout of ssm_plugins importable
    by the config's custom_imports."""
    if processes < 0 or (processes and command != "train"):
        raise ValueError(f"processes must be 0, or > 0 for mim train, got {processes} for mim {command}")
    exe = Path(sys.executable).with_name("mim")
    cmd = [str(exe) if exe.exists() else "mim", command, toolbox, str(config), "--work-dir", str(work_dir)]
    if processes:
        cmd += ["--launcher", "pytorch", "--gpus", str(processes)]
    elif command == "train":
        cmd += ["--gpus", "0"]
    cmd += list(args) + ["--cfg-options", *options]
    return subprocess.run(cmd, env=_with_this_checkout(), capture_output=True, text=True, timeout=timeout)


def _with_this_checkout() -> Dict[str, str]:
    """This process's environment with this checkout of ssm_plugins first on PYTHONPATH (the configs'
    custom_imports import it in the launched process)."""
    package_root = str(Path(__file__).resolve().parents[1])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))


def logged_runs(work_dir: os.PathLike) -> List[List[Dict]]:
    """The scalars mmengine logged in ``work_dir``, one list of records per run (oldest run first)."""
    runs = []
    for scalars in sorted(Path(work_dir).glob("*/vis_data/scalars.json")):
        with open(scalars) as f:
            runs.append([json.loads(line) for line in f if line.strip()])
    return runs
