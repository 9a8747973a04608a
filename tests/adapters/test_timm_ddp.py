"""timm's own DDP training loop on CPUs: 2 processes (gloo) end with the weights of 1 process (issue #13).

``_timm_ddp_worker.py`` trains one small model per family (``vim2_t``, ``vit_cifar_patch4_32_ssm2d``,
``essm_2d_tiny``, ``myonet_tiny`` at their ``tests/models/test_contract.py`` FAMILIES sizes) for 3 steps with timm's
training pieces as timm's ``train.py`` uses them (``init_distributed_device``, ``random_seed(seed, rank)``,
``create_optimizer_v2`` AdamW, ``DistributedDataParallel``, ``create_dataset`` + ``create_loader(distributed=True)`` on
ImageNet-format digit images, ``LabelSmoothingCrossEntropy``, ``create_scheduler_v2`` cosine per update,
``reduce_tensor``), under ``torchrun --nproc_per_node 2`` (batch 4 per process) and ``--nproc_per_node 1`` (batch 8).

What makes them equal:

* the same samples per step: ``create_loader(distributed=True)`` gives each process a ``DistributedSampler`` (seed 0,
  epoch 0): the same permutation everywhere, process r takes every other index, so the two batches of step k are
  the one-process batch k (that run opens a process group of one only for this sampler; timm leaves it
  non-distributed: no DDP, no SyncBN);
* the same per-sample tensors: ``no_aug=True`` (resize and centre crop, no random transform) and drop rates 0;
* the same initial weights: ``random_seed(seed, rank)`` seeds rank 1 differently, DDP broadcasts rank 0's weights;
* gradient averaging by DDP: the mean of the two per-process mean losses is the mean loss over the 8 samples, so
  the AdamW steps (and the scheduler's learning rates) are those of one process;
* BatchNorm statistics over the global batch: ViM2's BatchNorms converted to ``ssm_plugins.openmmlab``'s
  CPUSyncBatchNorm where ``train.py --sync-bn`` converts them (torch's SyncBatchNorm runs on GPUs only).

Measured 2026-11-25 (float32, 3 AdamW steps at lr 1e-3): 2 processes vs 1 differ by at most 8.5e-6 (ViM2 with
synchronised BatchNorm; the others 1.5e-6 to 4.4e-6). The controls differ by about the learning rate (AdamW's first
steps are about lr per weight): without gradient averaging (DDP's ``no_sync()``) 4.2e-3 (ViM2: 8.7e-3), with every
process drawing its own batches (``create_loader(distributed=False)``) 4.2e-3 (ViM2: 2.8e-2), ViM2 with per-process
BatchNorm statistics 3.2e-2: the tolerance (5e-5) is not met by chance. Two torchrun launches at once: 28-53 s
on 2 cores shared with other jobs (load 13-18), about 20 s of CPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_timm_ddp_worker.py")
# one model per family (MambaMixer with BatchNorms, 2-D SSM, eSSM, Myo)
MODELS = ["vim2_t", "vit_cifar_patch4_32_ssm2d", "essm_2d_tiny", "myonet_tiny"]
CONTROLS = ["no_grad_sync", "local_sampler", "no_sync_bn"]
STEPS, GLOBAL_BATCH = 3, 8
TOLERANCE = 5e-5  # measured at most 8.5e-6
CONTROL_DISTANCE = 1e-3  # measured at least 4.2e-3

pytestmark = pytest.mark.slow  # 2 torchrun launches (3 processes) at once: 28-53 s on 2 busy cores


def _torchrun(processes: int, out: Path, data: Path, variants) -> subprocess.Popen:
    args = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", str(processes),
            str(WORKER), "--out", str(out), "--data", str(data), "--models", *MODELS, "--variants", *variants,
            "--steps", str(STEPS), "--global-batch", str(GLOBAL_BATCH)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    with open(out.with_suffix(".log"), "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from ssm_plugins.data.imagenet_digits import imagenet_digits

    tmp = tmp_path_factory.mktemp("timm_ddp")
    data = imagenet_digits()
    launches = {"two": _torchrun(2, tmp / "two", data, ["ddp", *CONTROLS]),
                "one": _torchrun(1, tmp / "one", data, ["ddp"])}
    for name, launch in launches.items():
        try:
            launch.wait(timeout=300)
        finally:
            launch.kill()
        assert launch.returncode == 0, (tmp / f"{name}.log").read_text()[-4000:]
    return tmp


def _load(tmp: Path, launch: str, model: str, variant: str, rank: int) -> dict:
    return torch.load(tmp / launch / f"{model}.{variant}.rank{rank}.pt")


def _distance(a: dict, b: dict) -> float:
    """Largest absolute difference over the floating-point entries of two state_dicts with the same keys."""
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())


@pytest.mark.parametrize("model", MODELS)
def test_two_processes_end_with_the_weights_of_one_process(runs, model):
    one = _load(runs, "one", model, "ddp", 0)
    ranks = [_load(runs, "two", model, "ddp", rank) for rank in (0, 1)]
    assert one["world_size"] == 1 and all(r["world_size"] == 2 for r in ranks)
    # the same samples per step: the two halves of step k are the one-process batch k
    for k in range(STEPS):
        halves = [r["indices"][k] for r in ranks]
        assert len(halves[0]) == len(halves[1]) == GLOBAL_BATCH // 2
        assert sorted(halves[0] + halves[1]) == sorted(one["indices"][k]), k
        assert not set(halves[0]) & set(halves[1])
    # the scheduler stepped per update, alike in both runs (cosine from 1e-3 towards 1e-4)
    assert one["lrs"] == ranks[0]["lrs"] and one["lrs"][0] == 1e-3 and one["lrs"][0] > one["lrs"][1] > one["lrs"][2]
    # the global loss (reduce_tensor of the per-process means) is the one-process loss, step by step
    torch.testing.assert_close(torch.tensor(ranks[0]["losses"]), torch.tensor(one["losses"]), rtol=0, atol=1e-5)
    assert ranks[0]["losses"] == ranks[1]["losses"]
    assert _distance(ranks[0]["state"], ranks[1]["state"]) == 0.0  # DDP keeps the replicas identical
    assert _distance(one["state"], ranks[0]["state"]) < TOLERANCE


@pytest.mark.parametrize("model", MODELS)
def test_without_gradient_averaging_or_the_distributed_sampler_the_weights_differ(runs, model):
    one = _load(runs, "one", model, "ddp", 0)["state"]
    # no gradient all-reduce: each process steps on its own half batch, the replicas drift apart
    unsynced = [_load(runs, "two", model, "no_grad_sync", rank)["state"] for rank in (0, 1)]
    assert _distance(unsynced[0], unsynced[1]) > CONTROL_DISTANCE
    assert min(_distance(one, state) for state in unsynced) > CONTROL_DISTANCE
    # create_loader(distributed=False): gradients averaged, but over batches of the processes' own random draws
    local = _load(runs, "two", model, "local_sampler", 0)
    assert local["indices"] is None  # a RandomSampler, not a DistributedSampler
    assert _distance(one, local["state"]) > CONTROL_DISTANCE
    # per-process BatchNorm statistics (train.py without --sync-bn): only ViM2 has BatchNorms
    no_sync_bn = runs / "two" / f"{model}.no_sync_bn.rank0.pt"
    assert no_sync_bn.exists() == (model == "vim2_t")
    if no_sync_bn.exists():
        assert _distance(one, torch.load(no_sync_bn)["state"]) > CONTROL_DISTANCE
