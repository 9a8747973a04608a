"""Shared by the OpenMMLab config tests: where the configs are, how to build one without weights, and how to run
the toolboxes' train.py on one."""
import argparse
import copy
import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

import _forked

REPO = Path(__file__).resolve().parents[2]


def is_alias(path: Path) -> bool:
    """A config kept at a former path for a release: a comment saying where it moved, then one ``_base_`` line."""
    return path.read_text().startswith("# Moved to ")


CONFIG_ALIASES = sorted(p for tree in ("configs_mmdet", "configs_mmseg") for p in (REPO / tree).glob("*/*.py")
                        if is_alias(p))
MMDET_CONFIGS = sorted(p for p in (REPO / "configs_mmdet").glob("*/*.py") if not is_alias(p))
MMSEG_CONFIGS = sorted(p for p in (REPO / "configs_mmseg").glob("*/*.py") if not is_alias(p))
MMPRETRAIN_CONFIGS = sorted(p for p in (REPO / "configs_mmpretrain").glob("**/*.py") if "_base_" not in p.parts)
TOOLBOX = {"configs_mmdet": "mmdet", "configs_mmseg": "mmseg", "configs_mmpretrain": "mmpretrain"}


def succeeded(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``done`` if its command exited with 0; else the test fails with the end of the command's stderr (warnings left
    out, lines cut at 300 characters: a launcher's failure ends with its own traceback and command line, and the
    failed process's traceback or native abort is some 80 lines above the end), then of its stdout."""
    if done.returncode != 0:
        lines = [line[:300] for line in done.stderr.splitlines() if "Warning" not in line and "warn(" not in line]
        pytest.fail(f"{Path(str(done.args[0])).name} {' '.join(map(str, done.args[1:3]))} exited with "
                    f"{done.returncode}; the end of its stderr:\n" + "\n".join(lines[-100:])
                    + "\nthe end of its stdout:\n" + done.stdout[-2000:], pytrace=False)
    return done


def tools_train(toolbox: str, config: os.PathLike, work_dir: os.PathLike, options: List[str], *args: str,
                timeout: float = 1800) -> subprocess.CompletedProcess:
    """What ``mim train <toolbox> <config> --gpus 0 --work-dir <work_dir> [args] --cfg-options <options>`` runs, without
    mim: the toolbox's own ``tools/train.py`` (the copy mim finds in ``<toolbox>/.mim/tools/``) with
    ``--launcher none`` and the same arguments, with this checkout importable by the config's custom_imports. Before
    it, mim runs that script with ``-h`` to see whether it takes ``--gpus`` (the OpenMMLab 2.0 scripts do not): a
    second interpreter and toolbox import, 9 s on 2 cores. The script runs in a process of its own forked from
    ``_forked``'s pre-imported server. For runs that are about our configs rather than about mim
    (test_mim_train.py runs mim itself)."""
    spec = importlib.util.find_spec(toolbox)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"toolbox must be an installed OpenMMLab package, got {toolbox!r}")
    root = Path(list(spec.submodule_search_locations)[0])
    script = next((p for p in (root / ".mim" / "tools" / "train.py", root / "tools" / "train.py") if p.exists()), None)
    if script is None:
        raise FileNotFoundError(f"{toolbox} has no tools/train.py under {root}/.mim or {root} (as mim looks for it)")
    cmd = [sys.executable, str(script), str(config), "--launcher", "none", "--work-dir", str(work_dir), *args,
           "--cfg-options", *options]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return _forked.run(cmd, env=env, timeout=timeout)


def config_id(path: Path) -> str:
    return path.stem


def one_per_config_family(paths):
    """``paths`` as test parameters: the first config of each family (folder, model, data set; the resolution
    variants of a data set count as one) as it is, the others ``exhaustive`` (make test-all runs them)."""
    seen, params = set(), []
    for path in paths:
        stem = path.stem
        family = (path.parent.name, stem.split("-")[0].split("_")[0], re.sub(r"-\d+px$", "", stem.split("_")[-1]))
        params.append(pytest.param(path, id=config_id(path), marks=pytest.mark.exhaustive if family in seen else ()))
        seen.add(family)
    return params


def toolbox_of(path: Path) -> str:
    (toolbox,) = [TOOLBOX[part] for part in path.relative_to(REPO).parts[:1] if part in TOOLBOX]
    return toolbox


def config_strings(node, path=""):
    """(dotted key, value) of every string in a config dict (to find URLs)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from config_strings(value, f"{path}.{key}")
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from config_strings(value, f"{path}.{index}")
    elif isinstance(node, str):
        yield path, node


def load(path: Path):
    """The config as ``mim train`` reads it (custom_imports imported); a copy of this process's one parse of the file
    (resolving a ``mmdet::`` / ``mmpretrain::`` base reads the toolbox's ~300 metafiles: 0.5-1 s a config)."""
    return copy.deepcopy(_parsed(str(path)))


@functools.lru_cache(maxsize=None)
def _parsed(path: str):
    from mmengine.config import Config

    return Config.fromfile(path)


def build(path: Path):
    """(config, model in eval mode) from the toolbox's registry; the backbone starts from scratch."""
    from mmengine.registry import init_default_scope

    cfg = load(path)
    cfg.model.backbone.init_cfg = None  # the paper configs expect a local ImageNet checkpoint
    init_default_scope(cfg.default_scope)
    if cfg.default_scope == "mmdet":
        from mmdet.registry import MODELS
    else:
        from mmseg.registry import MODELS
    model = MODELS.build(cfg.model)
    model.init_weights()
    return cfg, model.eval()


def built_model(toolbox: str, config: Path, options: list):
    """The model that ``mim train <toolbox> config --cfg-options *options`` builds (mmengine's own option parser),
    before ``init_weights``: what the runner builds, in this process."""
    from mmengine.config import DictAction
    from mmengine.registry import init_default_scope

    parser = argparse.ArgumentParser()
    parser.add_argument("--cfg-options", nargs="+", action=DictAction)
    cfg = load(config)
    cfg.merge_from_dict(parser.parse_args(["--cfg-options", *options]).cfg_options)
    init_default_scope(cfg.default_scope)
    registry = {"mmpretrain": "mmpretrain.registry", "mmdet": "mmdet.registry", "mmseg": "mmseg.registry"}[toolbox]
    return __import__(registry, fromlist=["MODELS"]).MODELS.build(cfg.model)


# ---- tiny multi-process / resume runs (test_distributed.py, test_resume.py) ---------------------------------------

MMPRETRAIN_VIM2 = REPO / "configs_mmpretrain" / "vim2" / "vim2-t_8xb128_in1k.py"
MMDET_VIM2 = REPO / "configs_mmdet" / "vim2" / "mask-rcnn_vim2-t_fpn_1x_coco.py"
MMSEG_VIM2 = REPO / "configs_mmseg" / "vim2" / "upernet_vim2-t_4xb4-160k_ade20k-512x512.py"
# ViM2's classes at a test size (the main job's backbone, narrower and shallower): same code paths, BatchNorms in the
# conv branch (SPM) and the multi-resolution gate, and in the 4-level pyramid of the dense backbones
TINY_VIM2 = dict(embed_dim=32, depth=2, n_interactions=1, spm_inplanes=16, mrfp_ratio=0.5)
TINY_WIDTH = TINY_VIM2["embed_dim"]


def tiny_vim2_options(prefix: str) -> list:
    """``<prefix>.<kwarg>=<value>`` for TINY_VIM2 (prefix ``model`` for the classifier, ``model.backbone`` else)."""
    return [f"{prefix}.{key}={value}" for key, value in TINY_VIM2.items()]


def tiny_mask_rcnn_options() -> list:
    """Mask R-CNN's neck and heads at TINY_WIDTH channels (as the main job's MASK_RCNN_WIDTH, narrower)."""
    w = TINY_WIDTH
    return [f"model.neck.in_channels=[{w},{w},{w},{w}]", f"model.neck.out_channels={w}",
            f"model.rpn_head.in_channels={w}", f"model.rpn_head.feat_channels={w}",
            f"model.roi_head.bbox_roi_extractor.out_channels={w}", f"model.roi_head.bbox_head.in_channels={w}",
            "model.roi_head.bbox_head.fc_out_channels=64", f"model.roi_head.mask_roi_extractor.out_channels={w}",
            f"model.roi_head.mask_head.in_channels={w}", f"model.roi_head.mask_head.conv_out_channels={w}"]


def tiny_upernet_options() -> list:
    w = TINY_WIDTH
    return [f"model.decode_head.in_channels=[{w},{w},{w},{w}]", "model.decode_head.channels=32",
            f"model.auxiliary_head.in_channels={w}", "model.auxiliary_head.channels=16"]


def derived_config(folder: Path, base: Path, image_size: Optional[int] = None, iterations: bool = False) -> Path:
    """A config file that derives from ``base`` (the paper config; ``mim train`` reads it as any config) and changes:

    * ``image_size`` (MMPretrain configs): the training pipeline becomes one without random transforms (resize the
      short edge, centre crop: the test pipeline's steps), so that an image becomes the same tensor in every process
      (RandAugment, random crops, flips and erasing draw from each process's own generators): the 1-vs-2-process
      tests compare weights; use with ``mmpretrain_tiny_options(image_size=image_size)``.
    * ``iterations``: the loop becomes mmengine's IterBasedTrainLoop (``--cfg-options train_cfg.max_iters=N``; no
      validation) over an InfiniteSampler, with a checkpoint every 4 iterations. (The epoch loop's keys cannot be
      removed with ``--cfg-options``, hence the file.)"""
    lines = [f"_base_ = [{str(base)!r}]"]
    if image_size is not None:
        lines.append(
            "train_dataloader = dict(dataset=dict(pipeline=[\n"
            "    dict(type='LoadImageFromFile'),\n"
            f"    dict(type='ResizeEdge', scale={image_size}, edge='short', backend='pillow',"
            " interpolation='bicubic'),\n"
            f"    dict(type='CenterCrop', crop_size={image_size}),\n"
            "    dict(type='PackInputs')]))")
    if iterations:
        lines += ["train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=8, val_interval=1000)",
                  "train_dataloader = dict(sampler=dict(_delete_=True, type='InfiniteSampler', shuffle=True))",
                  "default_hooks = dict(checkpoint=dict(by_epoch=False, interval=4))",
                  "log_processor = dict(by_epoch=False)"]
    path = Path(folder) / f"{base.stem}_derived.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def deterministic_mmpretrain_config(folder: Path, image_size: int = 32) -> Path:
    """The ViM2-T ImageNet config with a training pipeline without random transforms (see ``derived_config``)."""
    return derived_config(folder, MMPRETRAIN_VIM2, image_size=image_size)


def checkpoint_state(path: Path) -> dict:
    """The ``state_dict`` of an mmengine checkpoint (weights and buffers), as float64 tensors."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    return {key: value.double() for key, value in state.items() if value.is_floating_point()}


def max_abs_difference(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    return max(float((a[key] - b[key]).abs().max()) for key in a)
