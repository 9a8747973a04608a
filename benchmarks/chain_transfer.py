"""What the main job's ViM2 digits classifier hands its Mask R-CNN (issue 30): detection from parts of the checkpoint,
and where the classifier looks.

    # the main job's Mask R-CNN (150 steps, scripts/main_openmmlab.py's options) from a classifier checkpoint with
    # the grid-dependent weights left at their initialisation; --frozen trains only what the checkpoint lacks
    .venv/bin/python -m benchmarks.chain_transfer detect CKPT --drop pos_embed sos channel_x_proj [--seed 1]
    .venv/bin/python -m benchmarks.chain_transfer detect CKPT --flatten pos_embed channel_x_proj [--drop sos]
    # the classifier on its val images pasted, at their own scale, into a larger noise canvas (centre / corner /
    # random place): a classifier of translation-invariant features scores the same at every place
    .venv/bin/python -m benchmarks.chain_transfer probe CKPT --sizes 64 160 [--flatten channel_x_proj]
    .venv/bin/python -m benchmarks.chain_transfer probe R18_CKPT --config R18_CONFIG   # an MMPretrain control
    # the control through the same chain: the main job's classification run with a ResNet-18 in it (mmpretrain's
    # ImageClassifier: ResNet depth 18, average pooling, linear head), then benchmarks.dense_control's ResNet-18
    # Mask R-CNN from its checkpoint; --steps 300 runs the detector twice as long at the same constant lr
    .venv/bin/python -m benchmarks.chain_transfer control [--steps 150 300] [--scratch] [--frozen]

``CKPT`` is ``mim train mmpretrain``'s checkpoint of the main job's classifier (``epoch_6.pth``). ``--drop`` groups:
``pos_embed``; ``sos`` (Switch of Scans: window summaries, their projection, the router); ``channel_x_proj`` (the
channel mixers' token-axis selection weights, resampled from the classifier's grid); ``stem`` (patch embedding and
the conv branch's SPM); ``bn_stats`` (BatchNorm running statistics). ``--flatten`` replaces the patch-token columns of
``pos_embed`` / ``channel_x_proj`` by their mean over the tokens (a position-free version) before the probe.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import List, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
GROUPS = {
    "pos_embed": lambda k: k == "pos_embed",
    "sos": lambda k: k.startswith("sos."),
    "channel_x_proj": lambda k: ".channel_mixer." in k and k.endswith("x_proj.weight"),
    "stem": lambda k: k.startswith(("patch_embed.", "spm.")),
    "bn_stats": lambda k: k.endswith(("running_mean", "running_var", "num_batches_tracked")),
}


def _state(path: Path) -> dict:
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    return checkpoint.get("state_dict", checkpoint)


def _flattened(state: dict, groups: List[str]) -> dict:
    """``state`` with the patch-token columns of the ``groups``' weights replaced by their mean over the tokens."""
    for key in [k for k in state if any(GROUPS[g](k) for g in groups)]:
        w = state[key].clone()  # pos_embed (1, 1 + tokens, D), x_proj (rows, 1 + tokens): class token kept
        w[:, 1:] = w[:, 1:].mean(1, keepdim=True)
        state[key] = w
    return state


def _main_job():
    spec = importlib.util.spec_from_file_location("main_openmmlab", REPO / "scripts/main_openmmlab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def detect(checkpoint: Optional[Path], drop: List[str], seed: int, frozen: bool, work_dir: Path,
           cfg_options: List[str] = (), flatten: List[str] = ()) -> dict:
    part = None
    if checkpoint is not None:
        state = {k: v for k, v in _flattened(_state(checkpoint), list(flatten)).items()
                 if not any(GROUPS[g](k) for g in drop)}
        part = work_dir / "backbone.pth"
        torch.save({"state_dict": state}, part)
    main_job = _main_job()
    options = main_job.RUNS["mmdet"]["options"]
    extra = [f"randomness.seed={seed}"] + (["model.backbone.frozen_stages=2"] if frozen else []) + list(cfg_options)
    main_job.RUNS["mmdet"]["options"] = lambda root, scale, pretrained: options(root, scale, pretrained) + extra
    result = main_job.run("mmdet", work_dir / "mmdet", pretrained=part)
    return {"checkpoint": str(checkpoint), "drop": drop, "flatten": list(flatten), "seed": seed, "frozen": frozen,
            "cfg_options": list(cfg_options), **result}


RESNET18_CLASSIFIER = (
    "model = dict(_delete_=True, type='ImageClassifier',\n"
    "             backbone=dict(type='ResNet', depth=18, num_stages=4, out_indices=(3, ), style='pytorch'),\n"
    "             neck=dict(type='GlobalAveragePooling'),\n"
    "             head=dict(type='LinearClsHead', num_classes=10, in_channels=512,\n"
    "                       loss=dict(type='CrossEntropyLoss', loss_weight=1.0), topk=(1, 5)))\n")


def _constant_lr(steps: int) -> List[str]:
    """A detector run of ``steps`` (150 a 6-epoch run) at the main job's constant lr: the 1x steps moved past it."""
    return [] if steps <= 150 else ["param_scheduler.1.milestones=[100,110]"]


def resnet18_chain_job(work_dir: Path):
    """The main job's module with its classification run's model replaced by a ResNet-18 (a derived config in
    ``work_dir``; the options that size ViM2 left out, every other option the same)."""
    main_job = _main_job()
    config = work_dir / "derived" / "resnet18_classifier.py"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"_base_ = [{str(main_job.RUNS['mmpretrain']['config'])!r}]\n" + RESNET18_CLASSIFIER)
    vim2_keys = {f"model.{key}" for key in main_job.BACKBONE} | {"model.num_classes", "model.img_size"}
    options = main_job.RUNS["mmpretrain"]["options"]
    main_job.RUNS["mmpretrain"] = dict(main_job.RUNS["mmpretrain"], config=config, options=lambda *a: [
        o for o in options(*a) if o.split("=")[0] not in vim2_keys])
    return main_job


def control(work_dir: Path, steps: List[int], scratch: bool, frozen: bool = False) -> List[dict]:
    """The ResNet-18 through the main job's chain: its classifier with the main job's classification options (the
    ViM2 model replaced), then the ResNet-18 Mask R-CNN of benchmarks.dense_control from that checkpoint (and from
    scratch with ``scratch``), ``steps`` long each; ``frozen``: the backbone's stem and 4 stages frozen."""
    from benchmarks import dense_control

    classifier = resnet18_chain_job(work_dir).run("mmpretrain", work_dir / "classifier")
    rows = [{"run": "classifier", **{k: str(v) if isinstance(v, Path) else v for k, v in classifier.items()}}]
    freeze = ["model.backbone.frozen_stages=4"] if frozen else []
    for n in steps:
        starts = [("checkpoint", classifier["checkpoint"])] + ([("scratch", None)] if scratch else [])
        for start, checkpoint in starts:
            result = dense_control.run("ResNet-18", "mmdet", work_dir / f"detector_{start}_{n}", scale=n / 150,
                                       cfg_options=_constant_lr(n) + freeze,
                                       init_checkpoint=checkpoint)
            rows.append({"run": f"detector from {start}", "steps": n, "frozen": frozen, **result})
    return rows


def _canvas(image, size: int, place: str, rng):
    import numpy as np

    side = image.shape[0]
    corner = image[:2, :2].reshape(-1, 3).mean(0)  # the scene's background level
    out = np.clip(corner + rng.normal(0, 12, size=(size, size, 3)), 0, 255).astype(np.float32)
    y, x = {"centre": ((size - side) // 2,) * 2, "corner": (0, 0)}.get(place) or rng.integers(0, size - side + 1, 2)
    out[y:y + side, x:x + side] = image
    return out


@torch.no_grad()
def probe(checkpoint: Path, sizes: List[int], flatten: List[str], global_pool: str = "token",
          config: Optional[Path] = None) -> List[dict]:
    import numpy as np
    import timm
    from PIL import Image

    import ssm_plugins  # noqa: F401  (registers the models)
    from ssm_plugins.data.imagenet_digits import imagenet_digits
    from ssm_plugins.openmmlab_tiny import CPU_PLAIN_MIXER
    from ssm_plugins.models import vim2

    state = _flattened(_state(checkpoint), flatten)
    root = imagenet_digits()
    images, labels = [], []
    for line in (root / "meta/val.txt").read_text().splitlines():
        name, label = line.split()
        images.append(np.asarray(Image.open(root / "val" / name).convert("RGB"), dtype=np.float32))
        labels.append(int(label))
    labels = torch.tensor(labels)
    mean = torch.tensor([123.675, 116.28, 103.53]).view(1, 3, 1, 1)  # MMPretrain's ImageNet normalisation
    std = torch.tensor([58.395, 57.12, 57.375]).view(1, 3, 1, 1)
    rows = []
    for size in sizes:
        if config is not None:  # a control classifier of MMPretrain's own (e.g. its ResNet-18 config, 10 classes)
            from mmengine.config import Config
            from mmpretrain.registry import MODELS

            model = MODELS.build(Config.fromfile(config).model).eval()
            model.load_state_dict(state)
            model = functools.partial(model, mode="tensor")
        else:
            model = timm.create_model("vim2_t", num_classes=10, img_size=size, global_pool=global_pool,
                                      **CPU_PLAIN_MIXER).eval()
            model.load_state_dict(vim2.checkpoint_filter_fn(state, model))
        for place in (("centre",) if size == images[0].shape[0] else ("centre", "corner", "random")):
            rng = np.random.default_rng(0)
            x = torch.from_numpy(np.stack([_canvas(i, size, place, rng) for i in images])).permute(0, 3, 1, 2)
            top1 = (model((x - mean) / std).argmax(-1) == labels).float().mean().item() * 100
            rows.append({"canvas": size, "place": place, "flatten": flatten, "top1": round(top1, 1)})
    return rows


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("detect", help="Mask R-CNN from the checkpoint without the --drop groups")
    d.add_argument("checkpoint", type=Path, help="the classifier checkpoint, or 'scratch' (no pre-training)")
    d.add_argument("--drop", nargs="*", default=[], choices=sorted(GROUPS))
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--frozen", action="store_true", help="freeze every stage the checkpoint holds")
    d.add_argument("--flatten", nargs="*", default=[], choices=["pos_embed", "channel_x_proj"],
                   help="these weights' patch-token columns replaced by their mean over the tokens (position-free)")
    d.add_argument("--work-dir", type=Path, default=None)
    d.add_argument("--cfg-options", nargs="*", default=[], metavar="KEY=VALUE",
                   help="more overrides of the detector config, e.g. model.backbone.drop_path_rate=0.1")
    p = sub.add_parser("probe", help="top-1 of the classifier with its val digits placed in a larger canvas")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--sizes", nargs="+", type=int, default=[64, 160])
    p.add_argument("--flatten", nargs="*", default=[], choices=["pos_embed", "channel_x_proj"])
    p.add_argument("--global-pool", default="token", choices=["token", "avg"])
    p.add_argument("--config", type=Path, default=None,
                   help="an MMPretrain config of the checkpoint's classifier (a control), instead of the main job's ViM2")
    c = sub.add_parser("control", help="the chain with a ResNet-18 classifier and detector (the control)")
    c.add_argument("--steps", nargs="+", type=int, default=[150], help="detector steps (150: the main job's)")
    c.add_argument("--scratch", action="store_true", help="also the ResNet-18 detector from scratch")
    c.add_argument("--frozen", action="store_true", help="the detector's backbone frozen (stem and 4 stages)")
    c.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "control":
        with tempfile.TemporaryDirectory(prefix="ssm_plugins_chain_") as tmp:
            for row in control(args.work_dir or Path(tmp), args.steps, args.scratch, args.frozen):
                print(json.dumps(row, default=str), flush=True)
        return
    scratch = args.command == "detect" and str(args.checkpoint) == "scratch"
    if not scratch and not args.checkpoint.is_file():
        parser.error(f"checkpoint {str(args.checkpoint)!r} is not a file")
    if args.command == "probe":
        for row in probe(args.checkpoint, args.sizes, args.flatten, args.global_pool, args.config):
            print(json.dumps(row), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="ssm_plugins_chain_") as tmp:
        work_dir = args.work_dir or Path(tmp)
        work_dir.mkdir(parents=True, exist_ok=True)
        result = detect(None if scratch else args.checkpoint, args.drop, args.seed, args.frozen, work_dir,
                        args.cfg_options, args.flatten)
        print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in result.items()}), flush=True)


if __name__ == "__main__":
    main()
