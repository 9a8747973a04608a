"""RandomStateHook (ssm_plugins.openmmlab): a resumed mmengine run continues the interrupted run's random streams.

A toy mmengine run that draws from every generator the toolboxes use: the dataset's transform from NumPy and Python
``random`` (as mmcv/mmdet transforms do), the model's loss from torch (as Mask R-CNN's anchor/RoI samplers do), and
a validation between checkpoint and next step (its dataloader draws a torch seed). Stopped after a checkpoint and
resumed, it must end with the uninterrupted run's weights with the hook, and not without it (the test's control).
"""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
import torch.nn as nn

pytest.importorskip("mmengine")
from mmengine.evaluator import BaseMetric  # noqa: E402
from mmengine.model import BaseModel  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

import ssm_plugins.openmmlab  # noqa: E402,F401  registers RandomStateHook

_RUNS = itertools.count()
ITEMS = 5  # batch 2 over 5 items: the iteration and epoch boundaries do not coincide


class NoisyDataset(torch.utils.data.Dataset):
    def __len__(self):
        return ITEMS

    def __getitem__(self, index):
        x = torch.full((3,), float(index)) + torch.from_numpy(np.random.randn(3)).float() + random.random()
        return dict(inputs=x, target=torch.tensor(float(index)))


class NoisyModel(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, inputs, target, mode="tensor"):
        prediction = self.linear(inputs + 0.1 * torch.randn_like(inputs)).squeeze(-1)
        if mode == "loss":
            return dict(loss=((prediction - target) ** 2).mean())
        return [dict(prediction=p, target=t) for p, t in zip(prediction, target)]


class MeanError(BaseMetric):
    def process(self, data_batch, data_samples):
        self.results.extend(float((s["prediction"] - s["target"]).abs()) for s in data_samples)

    def compute_metrics(self, results):
        return dict(mean_error=sum(results) / len(results))


def _collate(batch):
    return dict(inputs=torch.stack([b["inputs"] for b in batch]), target=torch.stack([b["target"] for b in batch]))


def _run(work_dir, max_iters, hook, resume=False, epochs=False):
    loader = dict(dataset=NoisyDataset(), batch_size=2, num_workers=0, collate_fn=_collate,
                  sampler=dict(type="DefaultSampler" if epochs else "InfiniteSampler", shuffle=True))
    val_loader = dict(dataset=NoisyDataset(), batch_size=2, num_workers=0, collate_fn=_collate,
                      sampler=dict(type="DefaultSampler", shuffle=False))
    if epochs:  # 3 iterations an epoch; max_iters counts epochs here
        train_cfg = dict(by_epoch=True, max_epochs=max_iters, val_interval=1)
        checkpoint = dict(type="CheckpointHook", interval=1, by_epoch=True)
    else:
        train_cfg = dict(by_epoch=False, max_iters=max_iters, val_interval=3)
        checkpoint = dict(type="CheckpointHook", interval=3, by_epoch=False)
    runner = Runner(model=dict(type=NoisyModel), work_dir=str(work_dir), train_dataloader=loader,
                    optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.05)), train_cfg=train_cfg,
                    val_dataloader=val_loader, val_cfg=dict(), val_evaluator=dict(type=MeanError),
                    default_hooks=dict(checkpoint=checkpoint, logger=dict(type="LoggerHook", interval=1)),
                    custom_hooks=[dict(type="RandomStateHook")] if hook else [], resume=resume,
                    randomness=dict(seed=7), default_scope="mmengine",
                    experiment_name=f"random_state_hook_{next(_RUNS)}")  # one logger per run
    runner.train()
    return {k: v.clone() for k, v in runner.model.state_dict().items()}


def _equal(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("epochs", [False, True], ids=["iteration_loop", "epoch_loop"])
def test_resumed_run_continues_the_random_streams(tmp_path, epochs):
    stop, end = (1, 2) if epochs else (3, 6)
    full = _run(tmp_path / "full", end, hook=True, epochs=epochs)
    stopped = tmp_path / "stopped"
    _run(stopped, stop, hook=True, epochs=epochs)
    checkpoint = torch.load(stopped / (f"epoch_{stop}.pth" if epochs else f"iter_{stop}.pth"), weights_only=True)
    assert len(checkpoint["random_states"]) == 1  # one entry per process
    resumed = _run(stopped, end, hook=True, resume=True, epochs=epochs)
    assert _equal(full, resumed)
    # the control: without the hook the resumed run re-seeds and ends elsewhere
    full_plain = _run(tmp_path / "full_plain", end, hook=False, epochs=epochs)
    _run(tmp_path / "stopped_plain", stop, hook=False, epochs=epochs)
    assert not _equal(full_plain, _run(tmp_path / "stopped_plain", end, hook=False, resume=True, epochs=epochs))


def test_load_from_keeps_the_seeded_generators_and_a_foreign_checkpoint_warns(tmp_path):
    _run(tmp_path / "first", 3, hook=True)
    checkpoint = torch.load(tmp_path / "first" / "iter_3.pth", weights_only=True)
    checkpoint["random_states"] = checkpoint["random_states"] * 2  # as if saved by 2 processes
    torch.save(checkpoint, tmp_path / "first" / "iter_3.pth")
    hook = ssm_plugins.openmmlab.RandomStateHook()

    class Loop:
        iter = 3

    class FakeRunner:
        train_loop, world_size, rank = Loop(), 1, 0

    hook.after_load_checkpoint(FakeRunner(), checkpoint)
    before = torch.get_rng_state()
    with _logs("random states of 2 processes, this run has 1"):
        hook.before_train(FakeRunner())
    assert torch.equal(torch.get_rng_state(), before)
    Loop.iter = 0  # load_from: the loop starts at 0, nothing restored, nothing said
    hook.before_train(FakeRunner())
    assert torch.equal(torch.get_rng_state(), before)


class _logs:
    """Asserts that mmengine's current logger printed ``text`` inside the block."""

    def __init__(self, text):
        self.text = text

    def __enter__(self):
        import logging

        from mmengine.logging import MMLogger

        self.records = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.records.append(record.getMessage())
        self.logger = MMLogger.get_current_instance()
        self.logger.addHandler(self.handler)

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        assert any(self.text in r for r in self.records), self.records
