"""What the model families share: the pretrained_cfg of a model with no published weights, the
forward_intermediates of hierarchical NHWC backbones, optimizer parameter groups, the no-weight-decay names, the
input check of image classifiers, the classifier head of ``reset_classifier`` and flax's Dense initialisation (the
S5-style models)."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import trunc_normal_
from timm.models._features import feature_take_indices

from ..layers._common import shape_or_type


def local_weights_cfg(**kwargs) -> Dict[str, Any]:
    """A timm pretrained_cfg with no url and no hf_hub_id, so nothing is ever fetched; local checkpoints
    load through ``timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=path))``."""
    return {
        'url': '',
        'hf_hub_id': None,
        'num_classes': 1000,
        'input_size': (3, 224, 224),
        'pool_size': None,
        'crop_pct': .875,
        'interpolation': 'bicubic',
        'fixed_input_size': False,
        'mean': IMAGENET_DEFAULT_MEAN,
        'std': IMAGENET_DEFAULT_STD,
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }


def stage_intermediates(stages, final_norm, x, indices=None, norm: bool = False, stop_early: bool = False,
                        output_fmt: str = 'NCHW', intermediates_only: bool = False):
    """timm's ``forward_intermediates`` for a stack of NHWC stages (Swin-like hierarchical backbones).

    ``x`` is the embedded input; ``norm`` applies ``final_norm`` to the last stage's map when it is taken.
    Returns the taken stage maps (NCHW or NHWC), preceded by the final features unless ``intermediates_only``.
    """
    if output_fmt not in ('NCHW', 'NHWC'):
        raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
    num_stages = len(stages)
    take_indices, max_index = feature_take_indices(num_stages, indices)
    run = stages if torch.jit.is_scripting() or not stop_early else stages[:max_index + 1]
    intermediates, last = [], -1
    for last, stage in enumerate(run):
        x = stage(x)
        if last in take_indices:
            y = final_norm(x) if norm and last == num_stages - 1 else x
            intermediates.append(y.permute(0, 3, 1, 2).contiguous() if output_fmt == 'NCHW' else y)
    if intermediates_only:
        return intermediates
    if last == num_stages - 1:
        x = final_norm(x)
    return x, intermediates


def param_groups(model: torch.nn.Module, assign: Callable[[str, torch.nn.Parameter], str],
                 settings: Dict[str, Tuple[float, float]]) -> List[Dict[str, Any]]:
    """Optimizer parameter groups: ``assign(name, param)`` names the group of every trainable parameter and
    ``settings`` maps a group name to its (lr, weight_decay). Returns ``[dict(params, lr, weight_decay, name)]`` in
    the order of ``settings``, empty groups left out (for ``torch.optim.AdamW`` and the like)."""
    groups = {name: [] for name in settings}
    for name, param in model.named_parameters():
        if param.requires_grad:
            groups[assign(name, param)].append(param)
    return [dict(params=params, lr=settings[key][0], weight_decay=settings[key][1], name=key)
            for key, params in groups.items() if params]


def check_image(x, in_chans: int, name: str = 'x') -> None:
    """ValueError naming ``name`` unless ``x`` is a (batch, in_chans, H, W) tensor."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[1] != in_chans:
        got = shape_or_type(x)
        raise ValueError(f'{name} must have shape (batch, {in_chans}, H, W), got {got}')


def new_head(like: Optional[torch.Tensor], in_features: int, num_classes: int, *, bias: bool = True,
             init: Optional[Callable[[nn.Linear], Any]] = None, training: bool = True) -> nn.Module:
    """A classifier head: Linear(in_features, num_classes, bias) on ``like``'s device and dtype (so a model moved to
    another device/dtype keeps one; ``like=None``: the default device and dtype), initialised in place by
    ``init(linear)`` when given (else PyTorch's default), or Identity for ``num_classes`` <= 0; in train or eval mode
    per ``training`` (``reset_classifier`` passes the model's ``self.training``)."""
    if num_classes <= 0:
        head = nn.Identity()
    else:
        dd = {} if like is None else {'device': like.device, 'dtype': like.dtype}
        head = nn.Linear(in_features, num_classes, bias=bias, **dd)
        if init is not None:
            init(head)
    return head.train(training)


def no_weight_decay_names(model: nn.Module, params: Tuple[str, ...] = (), norms: Tuple[type, ...] = ()) -> Set[str]:
    """Full names of the parameters to keep out of weight decay, as ``model.no_weight_decay()`` returns them:
    every module's ``no_weight_decay_names`` (names relative to that module; the model's own included), those of
    ``params`` (full names, e.g. ``pos_embed``) that the model has as parameters (an optional one may be None), and
    every parameter held directly by a module of the ``norms`` types."""
    names = set()
    for name in params:
        try:
            model.get_parameter(name)
        except AttributeError:  # None or absent: this configuration has no such parameter
            continue
        names.add(name)
    for module_name, module in model.named_modules():
        prefix = f'{module_name}.' if module_name else ''
        names.update(prefix + p for p in getattr(module, 'no_weight_decay_names', ()))
        if norms and isinstance(module, norms):
            names.update(prefix + p for p, _ in module.named_parameters(recurse=False))
    return names


def lecun_linear(layer: nn.Linear) -> nn.Linear:
    """flax Dense initialisation, in place: LeCun normal weights (truncated at 2 sigma, rescaled as flax does), zero
    bias (docs/myosotis.md, 'S5 settings'). Returns the layer."""
    std = 1.0 / math.sqrt(layer.in_features) / 0.87962566103423978
    trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
    nn.init.zeros_(layer.bias)
    return layer
