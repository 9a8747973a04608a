"""Resume: a run stopped mid-epoch and resumed ends where an uninterrupted run ends (issue #13).

* MMPretrain (ViM2-T config, ``mim train ... --resume``): equal weights. Needs mmengine's ``IterBasedTrainLoop``
  (an iteration checkpoint, and on resume the loop advances the dataloader past the batches already trained):
  mmengine 0.10's ``EpochBasedTrainLoop`` restarts an interrupted epoch from its first batch, so with the configs'
  epoch-based loop only a resume from an end-of-epoch checkpoint is exact.
* MMDetection (Mask R-CNN ViM2-T, iteration-based, random flip): equal weights. Mask R-CNN draws from the torch
  RNG at every step (RPN anchor and RoI sampling) and the flip from NumPy's; mmengine checkpoints the seed, not the
  generators, so the configs add ``RandomStateHook`` (ssm_plugins.openmmlab), which saves them and restores them
  after the loop's skip (its own tests, with the control without it: tests/adapters/test_random_state_hook.py).
* SpeechBrain (separation recipe): the process is killed after an intra-epoch checkpoint (``--ckpt_interval_steps``)
  and started again with the same command: equal weights (SpeechBrain checkpoints the dataloader position; the
  recipe draws no random numbers without speed perturbation / dynamic mixing / random cuts).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import _forked
from _openmmlab import (MMDET_VIM2, MMPRETRAIN_VIM2, REPO, checkpoint_state, derived_config, max_abs_difference,
                        succeeded, tiny_mask_rcnn_options, tiny_vim2_options, tools_train)
from ssm_plugins.openmmlab_tiny import logged_runs, mmdet_tiny_options, mmpretrain_tiny_options

pytestmark = pytest.mark.slow  # 3 train.py runs per toolbox, 3 recipe runs: about 3-4 minutes on 2 busy cores


def _iteration_based(options, max_iters):
    """A tiny run's options for a ``derived_config(iterations=True)``: ``max_iters`` iterations (the epoch-loop keys
    of the tiny options dropped; the derived config checkpoints every 4 iterations)."""
    epoch_keys = ("train_cfg.", "default_hooks.checkpoint.")
    return [o for o in options if not o.startswith(epoch_keys)] + [f"train_cfg.max_iters={max_iters}"]


def _stop_and_resume(toolbox, config, options, tmp):
    """Uninterrupted run of 8 iterations; a run stopped after iteration 4 (mid-epoch: 6 iterations per epoch) and
    resumed with ``--resume`` to 8. Returns (full dir, resumed dir)."""
    full, stopped = tmp / "full", tmp / "stopped"
    succeeded(tools_train(toolbox, config, full, _iteration_based(options, 8)))
    succeeded(tools_train(toolbox, config, stopped, _iteration_based(options, 4)))
    assert not (stopped / "iter_8.pth").exists()
    done = succeeded(tools_train(toolbox, config, stopped, _iteration_based(options, 8), "--resume"))
    assert "Advance dataloader 4 steps to skip data that has already been trained" in done.stdout + done.stderr
    first, resumed = logged_runs(stopped)
    assert [r["iter"] for r in first if "loss" in r] == [1, 2, 3, 4]
    assert [r["iter"] for r in resumed if "loss" in r] == [5, 6, 7, 8]
    return full, stopped


def _adamw_steps(path: Path) -> set:
    state = torch.load(path, map_location="cpu", weights_only=False)["optimizer"]["state"]
    return {float(s["step"]) for s in state.values()}


@pytest.mark.exhaustive  # make test: the Mask R-CNN case (same hook, more random streams)
def test_mmpretrain_resumed_mid_epoch_ends_with_the_uninterrupted_weights(tmp_path):
    from ssm_plugins.data.imagenet_digits import imagenet_digits

    config = derived_config(tmp_path, MMPRETRAIN_VIM2, image_size=32, iterations=True)
    # 48 images, batch 8: 6 iterations per epoch, stopped after 4
    options = mmpretrain_tiny_options(imagenet_digits(), images=48, val_images=8, image_size=32, batch_size=8) + \
        tiny_vim2_options("model") + ["model.drop_path_rate=0.0", "model.train_cfg=None"]
    full, stopped = _stop_and_resume("mmpretrain", config, options, tmp_path)
    assert max_abs_difference(checkpoint_state(full / "iter_4.pth"), checkpoint_state(stopped / "iter_4.pth")) == 0
    assert _adamw_steps(stopped / "iter_8.pth") == {8.0}
    end_full, end_resumed = checkpoint_state(full / "iter_8.pth"), checkpoint_state(stopped / "iter_8.pth")
    assert max_abs_difference(end_full, end_resumed) < 1e-6
    # the last 4 iterations moved the weights: equality above is not the trivial one
    assert max_abs_difference(end_full, checkpoint_state(full / "iter_4.pth")) > 1e-3


def test_mmdet_resumed_mid_epoch_ends_with_the_uninterrupted_weights(tmp_path):
    from ssm_plugins.data.coco_digits import coco_digits

    # 12 images, batch 2: 6 iterations per epoch, stopped after 4
    options = mmdet_tiny_options(coco_digits(), images=12, val_images=10, image_scale=128) + \
        tiny_vim2_options("model.backbone") + tiny_mask_rcnn_options()
    config = derived_config(tmp_path, MMDET_VIM2, iterations=True)
    full, stopped = _stop_and_resume("mmdet", config, options, tmp_path)
    at_stop = checkpoint_state(full / "iter_4.pth")
    assert max_abs_difference(at_stop, checkpoint_state(stopped / "iter_4.pth")) == 0  # reproducible up to the stop
    assert _adamw_steps(stopped / "iter_8.pth") == {8.0}
    end_full, end_resumed = checkpoint_state(full / "iter_8.pth"), checkpoint_state(stopped / "iter_8.pth")
    assert max_abs_difference(end_full, end_resumed) < 1e-6
    assert max_abs_difference(end_full, at_stop) > 1e-3  # the last 4 iterations moved the weights


# ---- SpeechBrain: killed after an intra-epoch checkpoint, started again ----------------------------------------------

RECIPE = REPO / "recipes_speech" / "WSJ0Mix" / "separation"
SB_SHAPE = {"dynamic_mixing": False,  # fixed mixtures: runs comparable item by item
            "N_encoder_out": 16, "out_channels": 16, "num_dp_layers": 1, "chunk_size": 20, "inter_num_tokens": 8,
            "d_state": 8, "n_warmup_step": 0, "use_speedperturb": False, "lr": 0.005}
INTERVAL = 8  # steps between intra-epoch checkpoints; 32 training mixtures at batch 1: 32 steps in the epoch


def _recipe_command(data: Path, output: Path):
    args = [sys.executable, str(RECIPE / "train.py"), str(RECIPE / "hparams" / "mambamixer.yaml"),
            "--data_folder", str(data), "--output_folder", str(output), "--device", "cpu", "--noprogressbar",
            "--N_epochs", "1", "--ckpt_interval_steps", str(INTERVAL)]
    for key, value in SB_SHAPE.items():
        args += [f"--{key}", str(value)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    return args, env


def _checkpoints(output: Path, intra: bool):
    found = []
    for ckpt in sorted((output / "save").glob("CKPT+*")):
        meta = ckpt / "CKPT.yaml"
        if meta.exists() and ("brain_intra_epoch_ckpt" in meta.read_text()) == intra:
            found.append(ckpt)
    return found


RECOVERABLES = ("encoder", "decoder", "masknet", "counter", "lr_scheduler", "brain", "dataloader-TRAIN", "optimizer")


def _complete(ckpt: Path) -> bool:
    return all((ckpt / f"{name}.ckpt").exists() for name in RECOVERABLES)


def _weights(ckpt: Path) -> dict:
    return {f"{part}.{k}": v for part in ("encoder", "decoder", "masknet")
            for k, v in torch.load(ckpt / f"{part}.ckpt", map_location="cpu").items()}


@pytest.fixture(scope="module")
def mixtures(tmp_path_factory):
    from ssm_plugins.data.mixtures import generate_mixtures

    root = tmp_path_factory.mktemp("mixtures")
    generate_mixtures(root, n_train=32, n_valid=4, n_test=4, min_seconds=1.0, max_seconds=1.5)
    return root


def test_speechbrain_killed_after_an_intra_epoch_checkpoint_resumes_to_the_same_weights(mixtures, tmp_path):
    args, env = _recipe_command(mixtures, tmp_path / "full")
    succeeded(_forked.run(args, env=env, timeout=900))
    (end_full,) = _checkpoints(tmp_path / "full", intra=False)

    output = tmp_path / "killed"
    args, env = _recipe_command(mixtures, output)
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if any(_complete(c) for c in _checkpoints(output, intra=True)):
                time.sleep(0.05)  # the last file closed; the next save is INTERVAL steps away
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be stopped mid-epoch"
    assert not _checkpoints(output, intra=False) and not (output / "train_log.txt").exists()  # mid-epoch
    (intra,) = _checkpoints(output, intra=True)
    stopped_at = yaml.safe_load((intra / "brain.ckpt").read_text())["step"]
    assert INTERVAL <= stopped_at < 32

    succeeded(_forked.run(args, env=env, timeout=900))  # the same command again
    log = (output / "log.txt").read_text()
    assert f"Loading a checkpoint from {intra}" in log
    (end_resumed,) = _checkpoints(output, intra=False)
    full, resumed = _weights(end_full), _weights(end_resumed)
    assert sorted(full) == sorted(resumed)
    difference = max(float((full[k].double() - resumed[k].double()).abs().max()) for k in full)
    assert difference < 1e-6, (difference, stopped_at)
