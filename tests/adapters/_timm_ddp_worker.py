"""timm's DDP training loop on CPUs for tests/adapters/test_timm_ddp.py; run it under torchrun:

    torchrun --standalone --nproc_per_node 2 tests/adapters/_timm_ddp_worker.py --out DIR --data ROOT --models ...

Each model is built at its family's test size (``tests/models/test_contract.py``'s FAMILIES row) and trained for
``--steps`` steps of ``--global-batch`` images the way timm's ``train.py`` trains:
``timm.utils.init_distributed_device``, ``timm.utils.random_seed(seed, rank)``, the model created (drop rates 0),
BatchNorm converted for the processes to share statistics (train.py's ``--sync-bn``, with ssm_plugins'
CPUSyncBatchNorm: torch's SyncBatchNorm runs on GPUs only),
``timm.optim.create_optimizer_v2``, ``DistributedDataParallel``, ``timm.data.create_dataset`` +
``timm.data.create_loader(..., is_training=True, no_aug=True, distributed=...)``, ``LabelSmoothingCrossEntropy``,
``timm.scheduler.create_scheduler_v2`` stepped per update, the sampler's ``set_epoch``, and
``timm.utils.reduce_tensor`` of the loss. Each process saves ``<model>.<variant>.rank<r>.pt`` (final state_dict, the
global loss per step, the sample indices per step) under ``--out``; files, not queues (a tensor sent through a queue
dies with a sender that exits first).

Variants: ``ddp`` (train.py); controls, with 2 processes only: ``no_grad_sync`` (backward under DDP's ``no_sync()``:
no gradient averaging), ``local_sampler`` (``create_loader(distributed=False)``: every process draws its own random
batches, not its share of the global one), ``no_sync_bn`` (per-process BatchNorm statistics; models with BatchNorm).

One process (``--nproc_per_node 1``): timm sets ``args.distributed = False`` (no DDP wrapper, no SyncBN, as train.py),
but the worker still opens a process group of one so that ``create_loader(..., distributed=True)`` builds the same
``DistributedSampler`` (seed 0, epoch 0) with one replica: its batch k is the union of the 2 processes' batches k.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # test_contract's FAMILIES (small kwargs)

SEED = 42
LR = 1e-3


def _train(args, name: str, variant: str, dataset, device) -> dict:
    import timm
    from timm.data import create_loader, resolve_data_config
    from timm.loss import LabelSmoothingCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2
    from timm.utils import random_seed, reduce_tensor
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.parallel import DistributedDataParallel

    from test_contract import family

    fam = family(name)
    timm_args = args.timm
    random_seed(SEED, timm_args.rank)  # train.py: seed + rank (DDP's first broadcast makes the replicas equal)
    model = timm.create_model(name, **dict(fam.small, num_classes=10, drop_rate=0.0, drop_path_rate=0.0))
    model.to(device=device)
    has_batchnorm = any(isinstance(m, _BatchNorm) for m in model.modules())
    if variant == "no_sync_bn" and not has_batchnorm:
        return None
    if timm_args.distributed and has_batchnorm and variant != "no_sync_bn":  # train.py --sync-bn
        from ssm_plugins.openmmlab import convert_cpu_sync_batchnorm

        model, _ = convert_cpu_sync_batchnorm(model, batchnorm=True)
    # train.py resolves the data config from the model before wrapping it (DDP has no pretrained_cfg)
    data_config = resolve_data_config(dict(input_size=(3, *fam.sizes[0])), model=model)
    optimizer = create_optimizer_v2(model, opt="adamw", lr=LR, weight_decay=0.05)
    if timm_args.distributed:  # train.py passes device_ids=[device], which DDP refuses for a CPU module
        model = DistributedDataParallel(model, device_ids=None if device.type == "cpu" else [device])

    per_process = args.global_batch // timm_args.world_size
    loader = create_loader(dataset, input_size=data_config["input_size"], batch_size=per_process, is_training=True,
                           no_aug=True, interpolation=data_config["interpolation"], mean=data_config["mean"],
                           std=data_config["std"], crop_pct=data_config["crop_pct"], num_workers=0,
                           distributed=variant != "local_sampler", device=device, use_prefetcher=False)
    loss_fn = LabelSmoothingCrossEntropy(smoothing=0.1)
    lr_scheduler, _ = create_scheduler_v2(optimizer, sched="cosine", num_epochs=1, min_lr=1e-4,
                                          step_on_epochs=False, updates_per_epoch=args.steps)
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(0)
        order = list(loader.sampler)  # DistributedSampler: this process's indices, in loading order
        indices = [order[k * per_process:(k + 1) * per_process] for k in range(args.steps)]
    else:
        indices = None  # RandomSampler draws its order when iterated

    model.train()
    losses, lrs = [], []
    for step, (images, target) in enumerate(loader):
        if step == args.steps:
            break
        images, target = images.to(device), target.to(device)
        no_grad_sync = variant == "no_grad_sync"
        with model.no_sync() if no_grad_sync else contextlib.nullcontext():
            loss = loss_fn(model(images), target)
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        lrs.append(optimizer.param_groups[0]["lr"])
        lr_scheduler.step_update(num_updates=step + 1)
        losses.append((reduce_tensor(loss.detach(), timm_args.world_size) if timm_args.distributed
                       else loss.detach()).item())
    unwrapped = model.module if isinstance(model, DistributedDataParallel) else model
    return dict(state={k: v.detach().clone() for k, v in unwrapped.state_dict().items()}, losses=losses, lrs=lrs,
                indices=indices, world_size=timm_args.world_size)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--data", required=True, help="an ImageFolder root with a train/ split")
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--variants", nargs="+", default=["ddp"])
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    import timm
    import timm.data
    import timm.utils

    import ssm_plugins  # noqa: F401  (registers the models; train.py: --device-modules ssm_plugins)

    args.timm = argparse.Namespace(device="cpu", dist_backend="gloo", dist_url=None)
    device = timm.utils.init_distributed_device(args.timm)
    if not args.timm.distributed:
        dist.init_process_group("gloo")  # one replica, for create_loader(distributed=True)'s DistributedSampler
    assert args.global_batch % args.timm.world_size == 0
    dataset = timm.data.create_dataset("", root=args.data, split="train", is_training=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name in args.models:
            for variant in args.variants:
                result = _train(args, name, variant, dataset, device)
                if result is not None:
                    torch.save(result, out / f"{name}.{variant}.rank{args.timm.rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
