"""Exact ``--resume``: :class:`RandomStateHook` keeps the random generators' states in the checkpoint (as mmengine's
``hooks/``)."""
from __future__ import annotations

import logging
import random
from typing import Callable, List, Optional, Tuple

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS
from mmengine.runner import IterBasedTrainLoop

__all__ = ["RandomStateHook"]


def _random_states() -> dict:
    """This process's generators: Python's ``random``, NumPy's global one, torch's CPU and (if started) CUDA ones,
    as tensors and plain Python values (``torch.load(weights_only=True)`` reads them back)."""
    numpy_state = np.random.get_state(legacy=False)
    states = {"python": random.getstate(),
              "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                        "pos": int(numpy_state["state"]["pos"]), "has_gauss": int(numpy_state["has_gauss"]),
                        "gauss": float(numpy_state["gauss"])},
              "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: dict) -> None:
    random.setstate(states["python"])  # torch.save/load keep its tuples
    numpy_state = states["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": numpy_state["key"].cpu().numpy().astype(np.uint32), "pos": numpy_state["pos"]},
                         "has_gauss": numpy_state["has_gauss"], "gauss": numpy_state["gauss"]})
    torch.set_rng_state(states["torch"].cpu())  # map_location may have moved it to the GPU
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in states["cuda"]])


class _RestoreAfterSkip:
    """Stands in for ``IterBasedTrainLoop.dataloader_iterator`` while the resumed loop draws (and drops) the batches
    already trained; after the last of them it puts the loop's iterator back and calls ``restore``: the generators
    then stand where the uninterrupted run stood when it saved, before it drew the next batch."""

    def __init__(self, loop, skip: int, restore: Callable[[], None]):
        self.loop, self.iterator, self.remaining, self.restore = loop, loop.dataloader_iterator, skip, restore

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.iterator)
        self.remaining -= 1
        if self.remaining == 0:
            self.loop.dataloader_iterator = self.iterator
            self.restore()
        return batch


@HOOKS.register_module()  # mmengine's root: every toolbox scope finds it
class RandomStateHook(Hook):
    """Makes ``--resume`` continue the random streams of the interrupted run, so that it ends with the weights of the
    uninterrupted run (random augmentations, Mask R-CNN's anchor/RoI sampling, dropout, drop path).

    mmengine 0.10 checkpoints the seed, not the generators: a resumed run re-seeds them, and ``IterBasedTrainLoop``
    then draws the batches already trained again to skip them. This hook saves every process's generator states
    (Python, NumPy, torch CPU/CUDA; ``checkpoint['random_states']``, one entry per rank) and, on resume, restores
    them after that skip (iteration loop) or before the first resumed epoch (epoch loop: exact from the end-of-epoch
    checkpoints). Validation and testing hand the generators back as they found them, so that an evaluation between
    checkpoint and next step (or its absence in the resumed run) changes nothing. Dataloader workers need nothing:
    mmengine seeds them from the seed and rank, and the skip replays their draws.

    Use: ``custom_hooks = [dict(type='RandomStateHook')]`` (the configs of configs_mmdet/, configs_mmseg/ and
    configs_mmpretrain/ have it). A resume with another number of processes, or from a checkpoint without the
    states, warns and continues from the re-seeded generators.
    """

    # before CheckpointHook (VERY_LOW) in after_train_iter/epoch, after the other hooks' before_train
    priority = "LOW"

    def __init__(self) -> None:
        self._saved: Optional[List[dict]] = None
        self._saved_iter: Optional[int] = None
        self._outside_evaluation: Optional[dict] = None
        self._gathered: Optional[Tuple[int, List[dict]]] = None

    def _gather(self, runner) -> None:
        """Every rank's states, collected where all ranks are (mmengine saves checkpoints on rank 0 only): one
        all_gather_object of about 13 KB a process per iteration, in multi-process runs only."""
        if runner.world_size > 1:
            from mmengine.dist import all_gather_object

            self._gathered = (runner.iter, all_gather_object(_random_states()))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._gather(runner)

    def after_train_epoch(self, runner) -> None:
        self._gather(runner)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if runner.world_size == 1:  # (saved during validation, e.g. save_best: the states validation started from)
            checkpoint["random_states"] = [self._outside_evaluation or _random_states()]
        elif self._gathered is not None and self._gathered[0] == runner.iter:
            checkpoint["random_states"] = self._gathered[1]

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._saved = checkpoint.get("random_states")
        self._saved_iter = checkpoint.get("meta", {}).get("iter")

    def before_train(self, runner) -> None:
        loop = runner.train_loop
        # only a resume: load_from (fine-tuning) starts the loop at iteration 0 and keeps the seeded generators
        if not loop.iter or loop.iter != self._saved_iter:
            return
        if self._saved is None:
            print_log("RandomStateHook: the checkpoint has no random_states (saved without this hook); the resumed "
                      "run continues from re-seeded generators", logger="current", level=logging.WARNING)
            return
        if len(self._saved) != runner.world_size:
            print_log(f"RandomStateHook: the checkpoint has the random states of {len(self._saved)} processes, this "
                      f"run has {runner.world_size}; the resumed run continues from re-seeded generators",
                      logger="current", level=logging.WARNING)
            return
        states = self._saved[runner.rank]
        if isinstance(loop, IterBasedTrainLoop):
            loop.dataloader_iterator = _RestoreAfterSkip(loop, loop.iter, lambda: _set_random_states(states))
        else:
            _set_random_states(states)

    def before_val(self, runner) -> None:
        self._outside_evaluation = _random_states()

    def after_val(self, runner) -> None:
        if self._outside_evaluation is not None:
            _set_random_states(self._outside_evaluation)
            self._outside_evaluation = None

    before_test = before_val
    after_test = after_val
