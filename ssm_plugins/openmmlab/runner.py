"""Multi-process training on CPUs (gloo): :class:`CPUDistributedRunner` and :class:`CPUSyncBatchNorm` (as
mmengine's ``runner/``)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.registry import MODEL_WRAPPERS, RUNNERS
from mmengine.runner import Runner
from torch.nn.modules.batchnorm import _BatchNorm

from ..distributed import end_process_group_at_exit

__all__ = ["CPUDistributedRunner", "CPUSyncBatchNorm", "convert_cpu_sync_batchnorm"]


class CPUSyncBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics are taken over the samples of every process, for CPU processes (torch's
    ``SyncBatchNorm`` raises "expected input tensor to be on GPU", and DistributedDataParallel refuses it on CPU
    modules). In training, with a process group of more than one process, the batch mean and variance come from two
    differentiable all-reduces (the mean, then the centred sum of squares), so N processes of batch B normalise as
    one process of batch N*B; running statistics are updated as BatchNorm does (unbiased variance). Otherwise
    (eval mode, one process) it is plain BatchNorm. Any input of shape (N, C, ...); same state_dict as BatchNorm."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"input must have shape (N, C, ...) with at least 2 dims, got {tuple(input.shape)}")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        self._check_input_dim(input)
        if not self.training or not dist.is_available() or not dist.is_initialized():
            return super().forward(input)
        group = self.process_group or dist.group.WORLD
        if dist.get_world_size(group) == 1:
            return super().forward(input)
        from torch.distributed.nn.functional import all_reduce

        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        shape = [1, channels] + [1] * (input.dim() - 2)
        x = input.float()
        count = all_reduce(torch.tensor([x.numel() // channels], dtype=x.dtype), group=group)
        mean = all_reduce(x.sum(dims), group=group) / count
        centred = x - mean.view(shape)
        var = all_reduce(centred.pow(2).sum(dims), group=group) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum)
                unbiased = var * (count / (count - 1).clamp_min(1))
                self.running_mean.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased.detach(), alpha=momentum)
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(input.dtype)


def convert_cpu_sync_batchnorm(module: nn.Module, batchnorm: bool = False) -> Tuple[nn.Module, List[str]]:
    """Replace every ``torch.nn.SyncBatchNorm`` of ``module`` (e.g. from ``norm_cfg=dict(type='SyncBN')``) and, with
    ``batchnorm=True`` (mmengine's ``sync_bn='torch'``), every other BatchNorm by :class:`CPUSyncBatchNorm`, keeping
    parameters, buffers and mode (same state_dict as the BatchNorm it replaces). Returns (the module, the dotted
    names of the converted layers)."""
    converted: List[str] = []

    def convert(child: nn.Module, name: str) -> nn.Module:
        wanted = nn.SyncBatchNorm if not batchnorm else _BatchNorm
        if isinstance(child, wanted) and not isinstance(child, CPUSyncBatchNorm):
            new = CPUSyncBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                   child.track_running_stats, getattr(child, "process_group", None))
            if child.affine:
                new.weight, new.bias = child.weight, child.bias
            if child.track_running_stats:
                new.running_mean, new.running_var = child.running_mean, child.running_var
                new.num_batches_tracked = child.num_batches_tracked
            new.train(child.training)
            converted.append(name)
            return new
        for key, grandchild in child.named_children():
            child.add_module(key, convert(grandchild, f"{name}.{key}" if name else key))
        return child

    return convert(module, ""), converted


@RUNNERS.register_module()  # mmengine's root: every toolbox scope finds it
class CPUDistributedRunner(Runner):
    """mmengine's ``Runner``, able to run ``--launcher pytorch`` (torchrun, ``mim train ... --launcher pytorch
    --gpus N``) on a machine without a GPU: set ``runner_type='CPUDistributedRunner'`` and
    ``env_cfg.dist_cfg.backend='gloo'``. On a machine with CUDA it is the plain Runner.

    mmengine 0.10 cannot start CPU processes itself: ``init_dist`` calls ``torch.cuda.set_device`` ("Found no NVIDIA
    driver") and ``wrap_model`` gives DistributedDataParallel ``device_ids`` (refused for CPU modules). Here the
    process group is created without a device, the model is wrapped in ``MMDistributedDataParallel`` (or
    ``model_wrapper_cfg``) without ``device_ids``, and SyncBN works: ``SyncBatchNorm`` layers (``norm_cfg`` SyncBN)
    and, with ``sync_bn='torch'``, every BatchNorm become :class:`CPUSyncBatchNorm` (logged with their names). The
    process group it starts ends at exit once every process got there (``ssm_plugins.distributed``: without that, a
    finished run could abort at exit)."""

    def setup_env(self, env_cfg: Dict) -> None:
        import datetime

        import torch.distributed as dist

        if self.distributed and not dist.is_initialized() and not torch.cuda.is_available():
            dist_cfg = dict(env_cfg.get("dist_cfg", {}))
            backend = dist_cfg.pop("backend", "gloo")
            if backend != "gloo":
                raise ValueError(f"env_cfg.dist_cfg.backend must be 'gloo' for processes without a GPU (no CUDA "
                                 f"device here), got {backend!r}: add --cfg-options env_cfg.dist_cfg.backend=gloo")
            if dist_cfg.get("timeout") is not None:
                dist_cfg["timeout"] = datetime.timedelta(seconds=dist_cfg["timeout"])
            dist.init_process_group(backend="gloo", **dist_cfg)
            end_process_group_at_exit()  # see there: a finished run could abort at exit
        super().setup_env(env_cfg)

    def wrap_model(self, model_wrapper_cfg: Optional[Dict], model: nn.Module):
        from mmengine.model import MMDistributedDataParallel, is_model_wrapper

        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        if not self.distributed or is_model_wrapper(model) or torch.cuda.is_available() or not on_cpu:
            return super().wrap_model(model_wrapper_cfg, model)
        sync_bn = self.cfg.get("sync_bn", None)
        if sync_bn not in (None, "torch"):
            raise ValueError(f"sync_bn must be None or 'torch' for CPU processes (mmcv's SyncBN is CUDA-only), got "
                             f"{sync_bn!r}")
        model, converted = convert_cpu_sync_batchnorm(model, batchnorm=sync_bn == "torch")
        print_log(f"CPUDistributedRunner: {len(converted)} BatchNorm layers synchronised across "
                  f"{self.world_size} processes (CPUSyncBatchNorm): {', '.join(converted) or 'none'}",
                  logger="current")
        if model_wrapper_cfg is None:
            return MMDistributedDataParallel(module=model, broadcast_buffers=False,
                                             find_unused_parameters=self.cfg.get("find_unused_parameters", False))
        cfg = dict(model_wrapper_cfg)
        cfg.setdefault("type", "MMDistributedDataParallel")
        return MODEL_WRAPPERS.build(cfg, default_args=dict(module=model))
