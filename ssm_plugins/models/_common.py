"""What the model families share: the pretrained_cfg of a model with no published weights, the
forward_intermediates of hierarchical NHWC backbones, and optimizer parameter groups."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models._features import feature_take_indices


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
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f'{name} must have shape (batch, {in_chans}, H, W), got {got}')


def new_head(like: torch.Tensor, in_features: int, num_classes: int) -> nn.Module:
    """A classifier for ``reset_classifier``: Linear(in_features, num_classes) on ``like``'s device and dtype
    (so a model moved to another device/dtype keeps one), or Identity for ``num_classes`` 0."""
    if num_classes <= 0:
        return nn.Identity()
    return nn.Linear(in_features, num_classes, device=like.device, dtype=like.dtype)
