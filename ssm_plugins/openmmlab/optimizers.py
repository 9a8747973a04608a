"""Optimiser: mmengine's default constructor with timm's ``no_weight_decay()`` (as mmengine's ``engine/optimizers``)."""
from __future__ import annotations

from typing import List, Optional, Set

import torch.nn as nn
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

__all__ = ["TimmNoDecayOptimWrapperConstructor", "no_weight_decay_parameters"]


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
