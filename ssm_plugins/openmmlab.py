"""OpenMMLab backbones shared by the MMDetection and MMSegmentation adapters (mmengine + timm, no toolbox).

Every class is an ``mmengine.model.BaseModule`` around the timm model of the same name, built with
``timm.create_model(name, features_only=True, ...)`` (so the architecture exists once, in ``ssm_plugins.models``):

    ========== =================================== ==========================================
    class      arch -> timm model                  feature maps (strides 4/8/16/32)
    ========== =================================== ==========================================
    ViM2       tiny/small/base/large -> vim2_t/s/b/l  spec mambamixer.md §3.6 pyramid, D channels
    ViQS       tiny/small/base -> viqs_t/s/b          (ConvT / conv branch / pooling + BatchNorm)
    SwinSSM2D  tiny -> swin_tiny_patch4_window7_224_ssm2d  stage outputs + LayerNorm
    ESSM2D     tiny -> essm_2d_tiny                stage outputs + LayerNorm
    MyoNet     tiny/small/base -> myonet_*         stage outputs + LayerNorm
    ========== =================================== ==========================================

``ssm_plugins.mmdet`` / ``ssm_plugins.mmseg`` register these classes in their toolbox's ``MODELS``.
Importing this module also lets ``torch.load``'s default ``weights_only=True`` read mmengine's own checkpoints
(:func:`allow_mmengine_checkpoints`), and registers :class:`CPUDistributedRunner` (``runner_type``): multi-process
training on machines without a GPU (``mim train ... --launcher pytorch --gpus N --cfg-options
runner_type=CPUDistributedRunner env_cfg.dist_cfg.backend=gloo [sync_bn=torch]``), with :class:`CPUSyncBatchNorm`.
"""
from __future__ import annotations

import inspect
import logging
import math
import pickle
import random
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import HOOKS, MODEL_WRAPPERS, OPTIM_WRAPPER_CONSTRUCTORS, RUNNERS
from mmengine.runner import IterBasedTrainLoop, Runner
from mmengine.runner.checkpoint import CheckpointLoader
from timm.layers import LayerNorm2d
from torch.nn.modules.batchnorm import _BatchNorm

from .distributed import end_process_group_at_exit
from .models import essm, ssm2d, vim2  # also registers our timm models
from .openmmlab_flops import install as _install_flop_handles

__all__ = ["ViM2", "ViQS", "SwinSSM2D", "ESSM2D", "MyoNet", "BACKBONES", "allow_mmengine_checkpoints",
           "TimmNoDecayOptimWrapperConstructor", "no_weight_decay_parameters", "CPUDistributedRunner",
           "CPUSyncBatchNorm", "convert_cpu_sync_batchnorm", "RandomStateHook"]


# ---- mmengine checkpoints under torch.load(weights_only=True) -----------------------------------------------------

def _history_buffer_method(owner, name: str):
    """Stands in for ``getattr`` while unpickling (under the name ``builtins.getattr``): mmengine pickles the
    statistics methods its HistoryBuffers keep (``HistoryBuffer.mean`` ...) as ``getattr(HistoryBuffer, 'mean')``.
    Only public methods of HistoryBuffer are handed out, so the allowlist does not grow a general getattr."""
    from mmengine.logging.history_buffer import HistoryBuffer

    if owner is HistoryBuffer and isinstance(name, str) and not name.startswith("_") \
            and callable(inspect.getattr_static(HistoryBuffer, name, None)):
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(f"weights_only load: getattr({owner!r}, {name!r}) is not allowed (ssm_plugins "
                                 f"allows only HistoryBuffer methods, for mmengine checkpoints)")


def _mmengine_checkpoint_globals() -> list:
    """What an mmengine Runner checkpoint pickles besides tensors (found by saving one and reading it with
    ``torch.serialization.get_unsafe_globals_in_checkpoint``, then loading): the message hub's HistoryBuffers with
    their statistics methods, and the numpy arrays / scalars / dtypes they log."""
    import numpy.core.multiarray as multiarray  # the name numpy pickles under (numpy 2 keeps it as an alias)
    from mmengine.logging.history_buffer import HistoryBuffer

    dtype_classes = [type(np.dtype(t)) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                                 "uint32", "uint64", "float16", "float32", "float64")]
    # numpy 1 pickles these as numpy.core.multiarray.*, numpy 2 as numpy._core.multiarray.*: accept both names
    numpy_functions = [(f, f"numpy.{core}.multiarray.{f.__name__}")
                       for f in (multiarray._reconstruct, multiarray.scalar) for core in ("core", "_core")]
    return [HistoryBuffer, np.ndarray, np.dtype, *dtype_classes, *numpy_functions,
            (_history_buffer_method, "builtins.getattr")]


def allow_mmengine_checkpoints() -> None:
    """Let ``torch.load`` with its default ``weights_only=True`` (torch >= 2.6) load the checkpoints mmengine
    writes (``mim test``, ``resume``, ``load_from``). Only these classes are allowlisted; any other
    non-tensor object in a file is still refused, and ``weights_only`` itself is left alone."""
    torch.serialization.add_safe_globals(_mmengine_checkpoint_globals())


allow_mmengine_checkpoints()
_install_flop_handles()  # mmengine's get_model_complexity_info counts our ops (ssm_plugins.openmmlab_flops)


# ---- optimiser: timm's no_weight_decay() ----------------------------------------------------------------------------

def no_weight_decay_parameters(model: nn.Module) -> Set[nn.Parameter]:
    """Every parameter that a (sub)module's timm-style ``no_weight_decay()`` names, looked up by exact name (a
    substring match, as ``paramwise_cfg.custom_keys`` does, would also catch ``blocks.10.*`` for ``blocks.1.*``)."""
    found = set()
    for module in model.modules():
        names = getattr(module, "no_weight_decay", None)
        if not callable(names):
            continue
        for name in names():
            try:
                found.add(module.get_parameter(name))
            except AttributeError:
                continue  # a name of a parameter the module does not have at this size (e.g. pruned levels)
    return found


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()  # mmengine's root: every toolbox scope finds it
class TimmNoDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """MMEngine's default constructor, plus weight decay 0 for every parameter in the model's ``no_weight_decay()``.

    Needs a non-empty ``paramwise_cfg`` (without it MMEngine puts all parameters in one group and nothing can be
    exempted); ``paramwise_cfg=dict(norm_decay_mult=0., bias_decay_mult=0.)`` is the DeiT/Swin setting."""

    def __call__(self, model: nn.Module):
        if not self.paramwise_cfg:
            raise ValueError("TimmNoDecayOptimWrapperConstructor needs a non-empty optim_wrapper.paramwise_cfg, e.g. "
                             "dict(norm_decay_mult=0., bias_decay_mult=0.)")
        return super().__call__(model)

    def add_params(self, params: List[dict], module: nn.Module, prefix: str = "",
                   is_dcn_module: Optional[int] = None) -> None:
        super().add_params(params, module, prefix, is_dcn_module)
        if prefix:  # MMEngine recurses through add_params; exempt once, at the top
            return
        exempt = {id(p) for p in no_weight_decay_parameters(module)}
        for group in params:
            if any(id(p) in exempt for p in group["params"]):
                group["weight_decay"] = 0.0



# ---- multi-process training on CPUs (gloo) -------------------------------------------------------------------------

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


# ---- exact resume: the random generators' states in the checkpoint ----------------------------------------------------

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


# ---- backbones ------------------------------------------------------------------------------------------------------

def _unwrap_checkpoint(checkpoint) -> Dict[str, torch.Tensor]:
    if not isinstance(checkpoint, dict):
        raise ValueError(f"checkpoint must hold a state_dict (a dict), got {type(checkpoint).__name__}")
    for key in ("state_dict", "model"):
        if isinstance(checkpoint.get(key), dict):
            return checkpoint[key]
    return checkpoint


class _TimmBackbone(BaseModule):
    """Base of the OpenMMLab backbones: a timm ``features_only`` model, padded input, cropped outputs.

    Args:
        arch: model size, one of the class's ``arch_zoo`` keys.
        img_size: training resolution the model is built at (int or (H, W)); it sizes position embeddings and
            token-grid weights (ViM2/ViQS) and Swin's windows; ESSM2D and MyoNet have no size-dependent weights and
            ignore it. Other input sizes still work (resampled on the fly).
        out_indices: feature levels to return, strictly increasing in 0..3 (strides 4, 8, 16, 32).
        frozen_stages: freeze the stem (0) and stages 1..frozen_stages (see the class docstring); -1 = none.
        norm_eval: keep every BatchNorm in eval mode while training (frozen statistics and affine updates only).
        with_cp: gradient checkpointing of the blocks (timm ``set_grad_checkpointing``).
        drop_path_rate: stochastic depth; None keeps the timm model's default.
        pad_size_divisor: the input is zero-padded on the bottom/right to a multiple of this; outputs are cropped
            back to ceil(H / stride) x ceil(W / stride).
        init_cfg: ``dict(type='Pretrained', checkpoint=path[, prefix='backbone.'])`` loads a local checkpoint of
            the timm classifier (through its checkpoint filter: position embeddings and token-axis weights are
            resampled to ``img_size``; the classifier head is dropped) or of a detector/segmentor (with
            ``prefix``); other init_cfgs go to mmengine.
        **model_kwargs: passed to ``timm.create_model``.
    """

    arch_zoo: Dict[str, str] = {}
    # the smallest padding multiple the model accepts
    min_pad_divisor = 1
    takes_img_size = False
    filter_fn: Optional[Callable] = None

    def __init__(self, arch: str = "tiny", img_size=224, out_indices: Sequence[int] = (0, 1, 2, 3),
                 frozen_stages: int = -1, norm_eval: bool = False, with_cp: bool = False,
                 drop_path_rate: Optional[float] = None, pad_size_divisor: int = 32, init_cfg=None, **model_kwargs):
        super().__init__(init_cfg=init_cfg)
        if arch not in self.arch_zoo:
            raise ValueError(f"arch must be one of {sorted(self.arch_zoo)} for {type(self).__name__}, got {arch!r}")
        out_indices = tuple(out_indices) if isinstance(out_indices, (list, tuple)) else out_indices
        if (not isinstance(out_indices, tuple) or not out_indices
                or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= 3 for i in out_indices)
                or list(out_indices) != sorted(set(out_indices))):
            raise ValueError(f"out_indices must be a non-empty, strictly increasing sequence of levels in "
                             f"(0, 1, 2, 3), got {out_indices!r}")
        if (isinstance(pad_size_divisor, bool) or not isinstance(pad_size_divisor, int) or pad_size_divisor < 1
                or pad_size_divisor % self.min_pad_divisor):
            raise ValueError(f"pad_size_divisor must be a positive multiple of {self.min_pad_divisor} for "
                             f"{type(self).__name__}, got {pad_size_divisor!r}")
        self.arch, self.model_name = arch, self.arch_zoo[arch]
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.out_indices, self.frozen_stages, self.norm_eval = out_indices, frozen_stages, norm_eval
        self.pad_size_divisor = pad_size_divisor
        if drop_path_rate is not None:
            model_kwargs["drop_path_rate"] = drop_path_rate
        if self.takes_img_size:
            model_kwargs["img_size"] = self.img_size
        features = timm.create_model(self.model_name, pretrained=False, features_only=True,
                                     out_indices=out_indices, **model_kwargs)
        # keep timm's model itself (the feature getter only calls its forward_intermediates): parameter names
        # are then 'model.<timm name>', as in the classifier checkpoint with a 'model.' prefix
        self.model = features.model
        self.in_chans = getattr(self.model, "in_chans", model_kwargs.get("in_chans", 3))
        self.out_channels = tuple(features.feature_info.channels())
        self.strides = tuple(features.feature_info.reduction())
        self._build_output_layers()
        if (isinstance(frozen_stages, bool) or not isinstance(frozen_stages, int)
                or not -1 <= frozen_stages <= self.num_stages):
            raise ValueError(f"frozen_stages must be an int in -1..{self.num_stages} (-1: nothing frozen, 0: the "
                             f"stem), got {frozen_stages!r}")
        if with_cp:
            self.model.set_grad_checkpointing(True)
        self._freeze_stages()

    def _build_output_layers(self):
        """Layers the wrapper adds after the timm model's outputs (none by default)."""

    # -- stages (frozen_stages) --
    num_stages = 4

    def _stage_modules(self, index: int):
        """Modules and bare parameters of stage ``index`` (0 = stem)."""
        raise NotImplementedError

    def _freeze_stages(self):
        for index in range(self.frozen_stages + 1):
            for item in self._stage_modules(index):
                if isinstance(item, nn.Parameter):
                    item.requires_grad = False
                elif item is not None:
                    item.eval()
                    for param in item.parameters():
                        param.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self

    # -- forward --
    def _features(self, x: torch.Tensor):
        return self.model.forward_intermediates(x, indices=list(self.out_indices), intermediates_only=True)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[1] != self.in_chans or min(x.shape[-2:]) < 1:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (B, {self.in_chans}, H, W) with H, W >= 1, got {got}")
        if not x.is_floating_point():
            raise ValueError(f"x must be a floating-point image batch (the data preprocessor's normalised output), "
                             f"got {x.dtype}")
        height, width = x.shape[-2:]
        pad_h, pad_w = -height % self.pad_size_divisor, -width % self.pad_size_divisor
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h))
        outs = self._features(x)
        # contiguous NCHW: the models' maps come out channels-last (LayerNorm2d, channels-last convs) and the crop
        # makes views, and mmcv's RoIAlign indexes its input's memory as NCHW without looking at the strides (an
        # FPN passes the layout on to it), so a detector's box and mask heads read scrambled RoI features
        return tuple(out[..., :math.ceil(height / stride), :math.ceil(width / stride)].contiguous()
                     for out, stride in zip(outs, self.strides))

    def no_weight_decay(self) -> set:
        """Names (in this module) of the timm model's no-weight-decay parameters (position/class embeddings, SSM
        scalars, ...), for an optimizer constructor or ``paramwise_cfg``; norms and biases are not listed."""
        own = {name for name, _ in self.named_parameters()}
        return {f"model.{name}" for name in self.model.no_weight_decay()} & own

    # -- weights --
    def init_weights(self):
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get("type") == "Pretrained":
            if "checkpoint" not in cfg:
                raise ValueError("init_cfg of type 'Pretrained' needs checkpoint='/path/to/checkpoint.pth'")
            self.load_pretrained(cfg["checkpoint"], prefix=cfg.get("prefix"))
            self._is_init = True
        elif cfg is None:
            # the timm model initialised itself when built; mmengine would re-run timm's init_weights on children
            self._is_init = True
        else:
            super().init_weights()

    def load_pretrained(self, checkpoint: str, prefix: Optional[str] = None) -> None:
        """Load a local checkpoint: the timm classifier's (raw state_dict, {'state_dict': ...} or {'model': ...}),
        or with ``prefix`` (e.g. 'backbone.') the matching part of any checkpoint, e.g. a detector's."""
        state = _unwrap_checkpoint(CheckpointLoader.load_checkpoint(checkpoint, map_location="cpu"))
        state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
        if prefix:
            state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            if not state:
                raise ValueError(f"no key of {checkpoint} starts with prefix {prefix!r}")
        if any(k.startswith("model.") for k in state):
            # a checkpoint of this wrapper (e.g. a detector's backbone.* part): the timm models have no 'model.'
            # submodule, so the names are the wrapper's
            result = self.load_state_dict(state, strict=False)
            dropped = []
        else:
            state, dropped = self._adapt_classifier_state(state)
            result = self.model.load_state_dict(state, strict=False)
        name = type(self).__name__
        print_log(f"{name}: loaded {checkpoint}" + (f" (prefix {prefix!r})" if prefix else ""), logger="current")
        if dropped:
            print_log(f"{name}: unused by the backbone (classifier head, final norm, pruned levels): "
                      f"{', '.join(dropped)}", logger="current")
        if result.missing_keys:
            print_log(f"{name}: missing keys (kept at their initialisation): {', '.join(result.missing_keys)}",
                      logger="current", level=30)
        if result.unexpected_keys:
            print_log(f"{name}: unexpected keys (ignored): {', '.join(result.unexpected_keys)}",
                      logger="current", level=30)

    def _adapt_classifier_state(self, state):
        """The timm classifier's checkpoint -> the features model's state: the model's own checkpoint filter
        (resampling, old-format renames) on the keys whose module the backbone still has, then the keys it does
        not use (classifier head, final norm, levels not built) set aside."""
        kept, dropped = {}, []
        for key, value in state.items():
            try:  # modules of pruned stages are gone; the filters would look them up
                self.model.get_submodule(key.rpartition(".")[0])
                kept[key] = value
            except AttributeError:
                dropped.append(key)
        if type(self).filter_fn is not None:
            kept = type(self).filter_fn(kept, self.model)
        own = self.model.state_dict()
        dropped += [k for k in kept if k not in own]
        return {k: v for k, v in kept.items() if k in own}, dropped


class _PlainMixer(_TimmBackbone):
    """ViM2 / ViQS: the isotropic token stack plus the conv branch; the 4 levels are the §3.6 pyramid.

    Stages (``frozen_stages``): 0 = stem (patch embedding, class token, position embedding, Switch-of-Scans
    router, conv-branch stem SPM); stage i in 1..n_interactions (2 in the registered variants) = interaction
    group i (its multi-resolution conv gate, its conv<->token interaction and its depth/n_interactions blocks).
    The pyramid's ConvT and BatchNorms are never frozen.
    """

    min_pad_divisor = 32  # the patch grid (1/16) and the conv branch's 1/32 level must coincide
    takes_img_size = True
    filter_fn = staticmethod(vim2.checkpoint_filter_fn)

    @property
    def num_stages(self):
        return self.model.n_interactions

    def _stage_modules(self, index):
        m = self.model
        if index == 0:
            return [m.patch_embed, m.cls_token, m.pos_embed, m.sos, m.spm]
        per_group = len(m.blocks) // m.n_interactions
        return [m.mrfp[index - 1], m.interactions[index - 1],
                *m.blocks[(index - 1) * per_group:index * per_group]]


class ViM2(_PlainMixer):
    __doc__ = "ViM2 (MambaMixer token mixer) backbone.\n\n" + _PlainMixer.__doc__ + _TimmBackbone.__doc__
    arch_zoo = {"tiny": "vim2_t", "small": "vim2_s", "base": "vim2_b", "large": "vim2_l"}


class ViQS(_PlainMixer):
    __doc__ = "ViQS (QSMixer token mixer) backbone.\n\n" + _PlainMixer.__doc__ + _TimmBackbone.__doc__
    arch_zoo = {"tiny": "viqs_t", "small": "viqs_s", "base": "viqs_b"}


class _Hierarchical(_TimmBackbone):
    """Four-stage backbones: the stage outputs, each through a LayerNorm over channels (as MMDetection's Swin;
    ``out_norm=False`` returns the raw residual stream).

    Stages (``frozen_stages``): 0 = stem (patch embedding), stage i in 1..4 = the model's i-th stage (with its
    downsampling) and its output norm.
    """

    stem_names: Tuple[str, ...] = ()
    stages_name = "stages"

    def __init__(self, *args, out_norm: bool = True, **kwargs):
        self._out_norm = out_norm
        super().__init__(*args, **kwargs)

    def _build_output_layers(self):
        self.out_norms = nn.ModuleList(
            LayerNorm2d(c) if self._out_norm else nn.Identity() for c in self.out_channels)

    def _stage_modules(self, index):
        if index == 0:
            return [getattr(self.model, n, None) for n in self.stem_names]
        stages = getattr(self.model, self.stages_name)
        items = [stages[index - 1]] if index - 1 < len(stages) else []
        if index - 1 in self.out_indices:
            items.append(self.out_norms[self.out_indices.index(index - 1)])
        return items

    def _features(self, x):
        return [norm(out) for norm, out in zip(self.out_norms, super()._features(x))]


class SwinSSM2D(_Hierarchical):
    __doc__ = "Swin-T with a 2-D SSM in every block (2d-ssm.md §2.2).\n\n" + _Hierarchical.__doc__ + \
        _TimmBackbone.__doc__
    arch_zoo = {"tiny": "swin_tiny_patch4_window7_224_ssm2d"}
    min_pad_divisor = 4
    takes_img_size = True
    stem_names = ("patch_embed", "absolute_pos_embed")
    stages_name = "layers"
    filter_fn = staticmethod(ssm2d.swin_ssm2d_checkpoint_filter_fn)


class ESSM2D(_Hierarchical):
    __doc__ = "Hierarchical 2-D eSSM backbone (essm.md, extension).\n\n" + _Hierarchical.__doc__ + \
        _TimmBackbone.__doc__
    arch_zoo = {"tiny": "essm_2d_tiny"}
    stem_names = ("patch_embed",)
    filter_fn = staticmethod(essm.checkpoint_filter_fn)


class MyoNet(_Hierarchical):
    __doc__ = "Hierarchical Myosotis backbone (myosotis.md §7.3).\n\n" + _Hierarchical.__doc__ + \
        _TimmBackbone.__doc__
    arch_zoo = {"tiny": "myonet_tiny", "small": "myonet_small", "base": "myonet_base"}
    stem_names = ("stem", "stem_norm")


BACKBONES = (ViM2, ViQS, SwinSSM2D, ESSM2D, MyoNet)
