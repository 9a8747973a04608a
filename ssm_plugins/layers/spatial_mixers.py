"""The spatial layers of the 2-D SSM family and their options: the layer at the 2-D SSM's position in a ViT / Swin
block or in Mega's gated attention, i.e. Table 1's comparison rows of "2-D SSM: A General Spatial Layer for Visual
Transformers" (arXiv:2306.06635: Sec. 5, Table 1, App. F; docs/2d-ssm.md, 'Placement in the backbones').

:class:`SpatialMixerOptions` is the one place that declares the options, their defaults and which kind of layer
takes which; the models (``ssm_plugins.models.ssm2d``, ``ssm_plugins.models.mega``) read them from their timm
kwargs (``spatial_mixer``, ``mixer_kwargs``, ``ssm_<option>``) with :meth:`SpatialMixerOptions.pop_model_kwargs`
and pass the object down to :meth:`SpatialMixerOptions.build`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional

import torch.nn as nn

from ._common import choice
from .ema import MultiHeadEMA
from .s4nd import S4ND
from .ssm2d import SSM2D

__all__ = ["SPATIAL_MIXERS", "MIXER_OPTIONS", "SpatialMixerOptions", "make_spatial_mixer"]

SPATIAL_MIXERS = ("ssm2d", "s4nd", "ema", "none")

# Which options each kind's layer takes; the others are ignored for that kind (code-v1 has one --ndim for the
# EMA, the 2-D SSM and S4ND, so d_state serves all three).
MIXER_OPTIONS = {
    "ssm2d": ("d_state", "n_ssm", "directions", "complex", "complex_param", "layernorm", "fused"),
    "s4nd": ("d_state", "n_ssm"),
    "ema": ("d_state",),
    "none": (),
}
_LAYERS = {"ssm2d": (SSM2D, {}), "s4nd": (S4ND, {}), "ema": (MultiHeadEMA, {"bidirectional": True})}
_OPTION_NAMES = MIXER_OPTIONS["ssm2d"]  # every option (the 2-D SSM takes them all)
_MODEL_PREFIX = "ssm_"  # the models' timm kwargs: ssm_d_state, ssm_n_ssm, ...


@dataclasses.dataclass(frozen=True)
class SpatialMixerOptions:
    """The spatial layer of a block and its options, for a channels-last (B, H, W, dim) token grid.

    Args:
        kind: "ssm2d" (the paper's 2-D SSM, :class:`~ssm_plugins.layers.SSM2D`; every option below), "s4nd"
            (:class:`~ssm_plugins.layers.S4ND`: d_state, n_ssm), "ema" (Mega's
            :class:`~ssm_plugins.layers.MultiHeadEMA`, bidirectional: d_state is the EMA dimension) or "none"
            (identity: the plain ViT / Swin, Mega-ablate). Which kind takes which option: ``MIXER_OPTIONS``; the
            others are ignored.
        d_state: N, the state size per axis (the EMA dimension for "ema") [D: 16, paper App. F].
        n_ssm: distinct kernels per direction (S4ND: (A, B, C) groups) [D: 8, paper App. F].
        directions: 2-D SSM scan directions, 4 or 2 [D: 4, code-v1].
        complex: complex 2-D SSM, "SSM-c" [D: False, "SSM-r"].
        complex_param: "cartesian" (official code) or "polar" (paper text), with ``complex`` [D: "cartesian";
            docs/2d-ssm.md, 'Parameterisation'].
        layernorm: LayerNorm over channels after the 2-D SSM [D: False, code-v1].
        fused: the 2-D SSM's directions as one fused kernel and one FFT convolution (exact either way) [D: True].
        extra: further keyword arguments of the chosen layer's constructor; "none" takes none.

    ``mixer_kwargs``, in the models and in the Mega blocks alike, is one dict of the layer's keyword arguments: the
    names above set these options, the others go to ``extra`` (:meth:`from_mixer_kwargs`). The models' timm kwargs
    are ``spatial_mixer`` (kind), ``mixer_kwargs`` and ``ssm_<option>``, e.g. ``ssm_d_state``
    (:meth:`pop_model_kwargs`).
    """

    kind: str = "ssm2d"
    d_state: int = 16
    n_ssm: int = 8
    directions: int = 4
    complex: bool = False
    complex_param: str = "cartesian"
    layernorm: bool = False
    fused: bool = True
    extra: Optional[Mapping[str, Any]] = None

    def __post_init__(self):
        choice("spatial_mixer", self.kind, SPATIAL_MIXERS)
        if self.extra is not None and not isinstance(self.extra, Mapping):
            raise TypeError(f"mixer_kwargs must be a dict or None, got {type(self.extra).__name__}")
        if self.kind == "none" and self.extra:
            raise ValueError(f"spatial_mixer='none' takes no extra arguments, got {sorted(self.extra)}")

    @classmethod
    def from_mixer_kwargs(cls, kind: str, mixer_kwargs: Optional[Mapping[str, Any]] = None,
                          **options) -> "SpatialMixerOptions":
        """``kind`` with ``mixer_kwargs`` (the layer's keyword arguments: option names set the options, the rest
        go to ``extra``) and further ``options``; a name given both ways is a TypeError."""
        fields, extra = _split_mixer_kwargs(mixer_kwargs)
        twice = sorted(set(fields) & set(options))
        if twice:
            raise TypeError(f"{', '.join(twice)} given twice: as an option and in mixer_kwargs")
        return cls(kind=kind, **fields, **options, extra=extra)

    @classmethod
    def pop_model_kwargs(cls, kwargs: Dict[str, Any], default_kind: str) -> "SpatialMixerOptions":
        """Take a model's spatial-mixer kwargs out of ``kwargs`` (in place): ``spatial_mixer`` (a kind, default
        ``default_kind``, or a SpatialMixerOptions, which the other two then update), ``mixer_kwargs``
        (:meth:`from_mixer_kwargs`) and ``ssm_<option>``; a ``ssm_*`` key that names no option is a TypeError."""
        names = [name for name in kwargs if name.startswith(_MODEL_PREFIX)]
        options = {name[len(_MODEL_PREFIX):]: kwargs.pop(name) for name in names}
        unknown = sorted(_MODEL_PREFIX + name for name in options if name not in _OPTION_NAMES)
        if unknown:
            valid = ", ".join(_MODEL_PREFIX + name for name in _OPTION_NAMES)
            raise TypeError(f"unknown spatial mixer option(s) {', '.join(unknown)}; the options are {valid}")
        if "mixer_kwargs" in kwargs:
            fields, options["extra"] = _split_mixer_kwargs(kwargs.pop("mixer_kwargs"))
            twice = sorted(_MODEL_PREFIX + name for name in set(fields) & set(options))
            if twice:
                raise TypeError(f"{', '.join(twice)} given twice: as a model kwarg and in mixer_kwargs")
            options.update(fields)
        kind = kwargs.pop("spatial_mixer", default_kind)
        if isinstance(kind, cls):
            return dataclasses.replace(kind, **options)
        return cls(kind=kind, **options)

    def layer_kwargs(self) -> Dict[str, Any]:
        """The options the chosen kind's layer takes (``MIXER_OPTIONS``), by their constructor names."""
        return {name: getattr(self, name) for name in MIXER_OPTIONS[self.kind]}

    def build(self, dim: int, device=None, dtype=None) -> nn.Module:
        """The layer for a (B, H, W, dim) token grid, output in the same layout (``nn.Identity`` for "none")."""
        if self.kind == "none":
            return nn.Identity()
        layer, fixed = _LAYERS[self.kind]
        extra = {"device": device, "dtype": dtype, **(self.extra or {})}
        return layer(dim, **self.layer_kwargs(), **fixed, input_fmt="NHWC", **extra)


def _split_mixer_kwargs(mixer_kwargs: Optional[Mapping[str, Any]]):
    """(options, extra) of a ``mixer_kwargs`` dict: the SpatialMixerOptions names, then the rest (None if none)."""
    if mixer_kwargs is None:
        return {}, None
    if not isinstance(mixer_kwargs, Mapping):
        raise TypeError(f"mixer_kwargs must be a dict or None, got {type(mixer_kwargs).__name__}")
    fields = {name: value for name, value in mixer_kwargs.items() if name in _OPTION_NAMES}
    extra = {name: value for name, value in mixer_kwargs.items() if name not in _OPTION_NAMES}
    return fields, extra or None


def make_spatial_mixer(kind: str, dim: int, *, device=None, dtype=None, **options) -> nn.Module:
    """``SpatialMixerOptions(kind, **options).build(dim, device, dtype)``: the spatial layer of a block on a
    channels-last (B, H, W, dim) token grid (options: :class:`SpatialMixerOptions`)."""
    return SpatialMixerOptions(kind, **options).build(dim, device=device, dtype=dtype)
