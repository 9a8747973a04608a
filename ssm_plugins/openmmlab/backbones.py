"""The OpenMMLab backbones: ``mmengine.model.BaseModule`` wrappers of our timm models (as mmdet's
``models/backbones/``); see the package docstring for the table."""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.runner.checkpoint import CheckpointLoader
from timm.layers import LayerNorm2d
from torch.nn.modules.batchnorm import _BatchNorm

from ..models import essm, ssm2d, vim2  # also registers our timm models

__all__ = ["ViM2", "ViQS", "SwinSSM2D", "ESSM2D", "MyoNet", "BACKBONES"]


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
    __doc__ = ("Swin-T with a 2-D SSM in every block (2-D SSM paper, arXiv 2306.06635; docs/2d-ssm.md, 'Placement in "
               "the backbones').\n\n") + _Hierarchical.__doc__ + \
        _TimmBackbone.__doc__
    arch_zoo = {"tiny": "swin_tiny_patch4_window7_224_ssm2d"}
    min_pad_divisor = 4
    takes_img_size = True
    stem_names = ("patch_embed", "absolute_pos_embed")
    stages_name = "layers"
    filter_fn = staticmethod(ssm2d.swin_ssm2d_checkpoint_filter_fn)


class ESSM2D(_Hierarchical):
    __doc__ = "Hierarchical 2-D eSSM backbone (an extension of ours: docs/essm.md, '2-D backbone').\n\n" + \
        _Hierarchical.__doc__ + _TimmBackbone.__doc__
    arch_zoo = {"tiny": "essm_2d_tiny"}
    stem_names = ("patch_embed",)
    filter_fn = staticmethod(essm.checkpoint_filter_fn)


class MyoNet(_Hierarchical):
    __doc__ = "Hierarchical Myosotis backbone (an extension of ours: docs/myosotis.md, 'Backbones').\n\n" + \
        _Hierarchical.__doc__ + _TimmBackbone.__doc__
    arch_zoo = {"tiny": "myonet_tiny", "small": "myonet_small", "base": "myonet_base"}
    stem_names = ("stem", "stem_norm")


BACKBONES = (ViM2, ViQS, SwinSSM2D, ESSM2D, MyoNet)
