""" Mega image backbone with a selectable spatial layer (EMA, 2-D SSM, S4ND, none)

A PyTorch impl of the Mega models of:
  * `2-D SSM: A General Spatial Layer for Visual Transformers` (E. Baron, I. Zimerman, L. Wolf,
    arXiv:2306.06635 v1, June 2023), Sec. 5 ("Mega"), Table 1, "Figure 4" (LRA Image) and "Figure 5"
    (ImageNet-1K); readings of the official code: ``docs/2d-ssm.md``,
on the vision Mega of
  * `Mega: Moving Average Equipped Gated Attention` (X. Ma et al., ICLR 2023).

Architecture (the official 2-D SSM code's ``VisionMEGA``, code-v1): conv patch embedding, learned absolute
position embedding, ``depth`` Mega layers (:class:`ssm_plugins.layers.MegaBlock`: moving-average gated attention
with laplace attention and a 1-D relative position bias, then a normalised FFN), final LayerNorm, Linear + SiLU,
mean pool over the tokens, linear classifier. The layers run on the (B, H, W, D) token grid; the spatial layer
filters the Q/K/gate path only, V comes from the unfiltered tokens (paper Sec. 5; docs/2d-ssm.md, 'Placement in
the backbones').

``spatial_mixer`` selects Table 1's Mega rows: ``'ema'`` (Mega, Mega's multi-head EMA on the flattened patches),
``'none'`` (Mega-ablate), ``'s4nd'`` (Mega w/ S4ND) and ``'ssm2d'`` (Mega 2-D SSM-r; ``ssm_complex=True`` for SSM-c).
Registered: ``mega_cifar_patch4_32{,_ablate,_s4nd,_ssm2d}`` (CIFAR-100), ``mega_tinyimagenet_patch8_64{...}``
(Tiny-ImageNet), ``mega_tiny_patch16_224{,_ablate,_ssm2d}`` (Mega ViT-T on ImageNet-1K, the mega-image
repository's ``mega_tiny_patch16_224``: depth 12, dim 192, hidden / FFN 384, z 64, EMA N 16) and
``mega_iso_lra_cifar10{,_ablate,_ssm2d}`` (Mega-ISO, Figure 4: Mega's LRA-Image model on the 32x32 grayscale
pixels, BatchNorm and Mega's LRA classifier head).

Options (timm kwargs): ``spatial_mixer``, ``mixer_kwargs`` and the spatial layer's ``ssm_*`` options, as the
ViT / Swin models' (``ssm_<option>`` is the field ``<option>`` of ``ssm_plugins.layers.SpatialMixerOptions``, which
declares the defaults and which layer takes which); ``no_pos_embed`` (Table 3 ablation), ``rel_pos_bias``,
``attn_activation``. No pretrained weights exist; load a local checkpoint with ``pretrained=True,
pretrained_cfg_overlay=dict(file=path)``.
"""
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.nn as nn

from timm.layers import PatchEmbed, register_notrace_module, resample_abs_pos_embed_nhwc, trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint, checkpoint_seq

from ._common import new_head, no_weight_decay_names
from .ssm2d import CIFAR100_CFG, TINY_IMAGENET_CFG, check_ssm2d_input, ssm2d_cfg
from ..layers._common import positive_int
from ..layers.mega import BatchNormNHWC, MegaBlock, MovingAverageGatedAttention
from ..layers.spatial_mixers import SpatialMixerOptions

__all__ = ['VisionMega']

# torch.fx (timm's notrace registry, which timm's FX feature extraction passes to the tracer): the gated attention
# (input checks, spatial layer and attention sized by the token grid) is one opaque call, and so is BatchNormNHWC
# (BatchNorm1d's input-rank check is Python control flow); the FFN, other norms and the head are traced. Plain
# torch.fx.symbolic_trace also needs the shape-dependent helpers wrapped by their names here.
register_notrace_module(MovingAverageGatedAttention)
register_notrace_module(BatchNormNHWC)
torch.fx.wrap('check_ssm2d_input')
torch.fx.wrap('resample_abs_pos_embed_nhwc')


def _init_head(head: nn.Linear) -> None:
    """The classifier's initialisation: Xavier-uniform weight, zero bias."""
    nn.init.xavier_uniform_(head.weight)
    if head.bias is not None:
        nn.init.zeros_(head.bias)


class VisionMega(nn.Module):
    """Vision Mega (code-v1 ``VisionMEGA``) with a selectable spatial layer in every Mega layer.

    Args:
        img_size, patch_size, in_chans, num_classes: as timm's ViT. ``global_pool``: 'avg' (token mean) or ''.
        embed_dim, depth: width D and number of Mega layers.
        hidden_dim: value / gate dimension (hdim). ffn_hidden_dim: FFN width. zdim: Q/K dimension.
        spatial_mixer (in ``**kwargs``, with ``mixer_kwargs`` and the ``ssm_*`` options): 'ema' | 'ssm2d' | 's4nd' |
            'none' [D: 'ema', the original Mega]; the options' defaults and which layer takes which:
            :class:`~ssm_plugins.layers.SpatialMixerOptions`.
        attn_activation: 'laplace' [D] or 'softmax'. rel_pos_bias: Mega's relative position bias [D: True].
        no_pos_embed: drop the learned absolute position embedding (Table 3; docs/2d-ssm.md, 'Removing the
            positional encoding').
        norm_layer: 'layernorm' [D] or 'batchnorm' (Mega's LRA models), in every layer and at the end.
        head_hidden_dim: None [D]: code-v1 VisionMEGA's head (per-token Linear + SiLU, mean pool, Linear); an int:
            Mega's LRA classifier (mean pool, Linear(D, head_hidden_dim) + GELU, Linear without bias), whose
            hidden layer is then ``head_hidden_size`` (``num_features`` stays D, forward_features' width).
        drop_rate, attn_drop_rate, drop_path_rate: Mega's dropout, attention dropout, stochastic depth
            (linearly increasing over depth) [D: 0, code-v1 builds VisionMEGA without them].
    """

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 224,
            patch_size: Union[int, Tuple[int, int]] = 16,
            in_chans: int = 3,
            num_classes: int = 1000,
            global_pool: str = 'avg',
            embed_dim: int = 192,
            depth: int = 12,
            hidden_dim: int = 384,
            ffn_hidden_dim: int = 384,
            zdim: int = 64,
            attn_activation: str = 'laplace',
            rel_pos_bias: bool = True,
            no_pos_embed: bool = False,
            norm_layer: str = 'layernorm',
            head_hidden_dim: Optional[int] = None,
            drop_rate: float = 0.,
            attn_drop_rate: float = 0.,
            drop_path_rate: float = 0.,
            device=None,
            dtype=None,
            **kwargs,
    ):
        super().__init__()
        mixer = SpatialMixerOptions.pop_model_kwargs(kwargs, default_kind='ema')
        if kwargs:
            raise TypeError(f"VisionMega got unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        if global_pool not in ('avg', ''):
            raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
        if norm_layer not in ('layernorm', 'batchnorm'):
            raise ValueError(f"norm_layer must be 'layernorm' or 'batchnorm', got {norm_layer!r}")
        for name, value in (('embed_dim', embed_dim), ('depth', depth), ('head_hidden_dim', head_hidden_dim or 1)):
            positive_int(name, value)
        dd = {'device': device, 'dtype': dtype}
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.embed_dim = embed_dim
        self.num_features = embed_dim  # forward_features' channels (timm); the pooled pre-logits: head_hidden_size
        self.head_hidden_size = head_hidden_dim or embed_dim
        self.output_fmt = 'NHWC'  # forward_features is channels-last tokens on the patch grid
        self.spatial_mixer = mixer.kind
        norm = nn.LayerNorm if norm_layer == 'layernorm' else BatchNormNHWC
        self.grad_checkpointing = False

        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans,
                                      embed_dim=embed_dim, output_fmt='NHWC', strict_img_size=False, **dd)
        grid = tuple(self.patch_embed.grid_size)
        if no_pos_embed:
            self.pos_embed = None
        else:
            self.pos_embed = nn.Parameter(torch.zeros(1, *grid, embed_dim, **dd))
            trunc_normal_(self.pos_embed, std=embed_dim ** -0.5)

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth, device='cpu')]
        self.blocks = nn.Sequential(*[
            MegaBlock(embed_dim, zdim, hidden_dim, ffn_hidden_dim, spatial_mixer=mixer,
                      attn_activation=attn_activation,
                      max_positions=grid[0] * grid[1] if rel_pos_bias else None,
                      drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i], norm_layer=norm, **dd)
            for i in range(depth)])
        self.norm = norm(embed_dim, **dd)
        if head_hidden_dim is None:
            # code-v1: Linear + SiLU on every token before the mean pool
            self.out_proj = nn.Sequential()
            self.out_proj.add_module('fc', nn.Linear(embed_dim, embed_dim, **dd))
            self.out_proj.add_module('act', nn.SiLU())
            nn.init.normal_(self.out_proj.fc.weight, mean=0.0, std=0.02)
            nn.init.zeros_(self.out_proj.fc.bias)
            self.pre_logits = nn.Identity()
        else:
            # Mega's LRA classifier: one hidden layer on the pooled features
            self.out_proj = nn.Identity()
            self.pre_logits = nn.Sequential()
            self.pre_logits.add_module('fc', nn.Linear(embed_dim, head_hidden_dim, **dd))
            self.pre_logits.add_module('act', nn.GELU())
        self.head_drop = nn.Dropout(drop_rate)
        self.head_bias = head_hidden_dim is None
        self.head = new_head(self.patch_embed.proj.weight, self.head_hidden_size, num_classes, bias=self.head_bias,
                             init=_init_head)
        reduction = self.patch_embed.patch_size[0]
        self.feature_info = [dict(num_chs=embed_dim, reduction=reduction, module=f'blocks.{i}') for i in range(depth)]

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        """The position embedding (code-v1 VisionMEGA) and the spatial layers' SSM / EMA parameters (paper App. E.2)."""
        return no_weight_decay_names(self, params=('pos_embed',))

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r'^patch_embed|^pos_embed', blocks=[(r'^blocks\.(\d+)', None), (r'^norm', (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        self.num_classes = num_classes
        if global_pool is not None:
            if global_pool not in ('avg', ''):
                raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
            self.global_pool = global_pool
        self.head = new_head(self.patch_embed.proj.weight, self.head_hidden_size, num_classes, bias=self.head_bias,
                             init=_init_head, training=self.training)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch + position embedding: (B, C, H, W) -> (B, H/p, W/p, D)."""
        x = self.patch_embed(check_ssm2d_input(x, self.in_chans, self.patch_embed.patch_size, False))
        if self.pos_embed is not None:
            x = x + resample_abs_pos_embed_nhwc(self.pos_embed, x.shape[1:3]).to(x.dtype)
        return x

    def _run_block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x)
        return block(x)

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Block outputs on the token grid, NCHW or NHWC (``norm``: through the final LayerNorm); the final
        features are those of :meth:`forward_features`."""
        if output_fmt not in ('NCHW', 'NHWC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        x = self._embed(x)
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        intermediates = []
        for i, block in enumerate(blocks):
            x = self._run_block(block, x)
            if i in take_indices:
                y = self.norm(x) if norm else x
                intermediates.append(y.permute(0, 3, 1, 2).contiguous() if output_fmt == 'NCHW' else y)
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.out_proj = self.pre_logits = nn.Identity()
            self.reset_classifier(0, '')
        return take_indices

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> normalised tokens (B, H/p, W/p, D)."""
        x = self._embed(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = checkpoint_seq(self.blocks, x)
        else:
            x = self.blocks(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.out_proj(x)
        if self.global_pool == 'avg':
            x = x.mean(dim=(1, 2))
        x = self.head_drop(self.pre_logits(x))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: VisionMega) -> Dict[str, torch.Tensor]:
    """Unwrap training checkpoints ('state_dict' / 'model'), resample the position embedding to the model's grid
    and drop it if the model has none (a ``no_pos_embed`` fine-tune of a checkpoint with one)."""
    for key in ('state_dict', 'model'):
        if key in state_dict and isinstance(state_dict[key], dict):
            state_dict = state_dict[key]
    state_dict = dict(state_dict)
    if 'pos_embed' in state_dict:
        if model.pos_embed is None:
            state_dict.pop('pos_embed')
        elif state_dict['pos_embed'].shape != model.pos_embed.shape:
            state_dict['pos_embed'] = resample_abs_pos_embed_nhwc(state_dict['pos_embed'], model.pos_embed.shape[1:3])
    return state_dict


def _create_vision_mega(variant: str, pretrained: bool = False, **kwargs) -> VisionMega:
    # the last (up to) 3 blocks: timm reads an int as the last N, which must exist for feature_cls='fx'
    out_indices = kwargs.pop('out_indices', min(3, kwargs.get('depth', 12)))
    return build_model_with_cfg(
        VisionMega,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        pretrained_strict=kwargs.pop('pretrained_strict', True),
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


# ---- configs and registrations -------------------------------------------------------------------------


# the same paper, data sets and weight-loading convention as the ViT/Swin 2-D SSM models: ssm2d_cfg, CIFAR100_CFG
# and TINY_IMAGENET_CFG come from models/ssm2d.py
# LRA Image: CIFAR-10 in grayscale, pixels normalised with 0.48 / 0.24 (Mega's --pixel-normalization)
# pool_size: the token grid of forward_features (image size / patch size), as timm's configs give it
_lra_image = dict(num_classes=10, input_size=(1, 32, 32), pool_size=(32, 32), crop_pct=1.0, mean=(0.48,),
                  std=(0.24,))
_cifar_p4 = dict(CIFAR100_CFG, pool_size=(8, 8))
_tiny_imagenet_p8 = dict(TINY_IMAGENET_CFG, pool_size=(8, 8))
_imagenet_p16 = dict(pool_size=(14, 14))

default_cfgs = generate_default_cfgs({
    'mega_cifar_patch4_32': ssm2d_cfg(**_cifar_p4),
    'mega_cifar_patch4_32_ablate': ssm2d_cfg(**_cifar_p4),
    'mega_cifar_patch4_32_s4nd': ssm2d_cfg(**_cifar_p4),
    'mega_cifar_patch4_32_ssm2d': ssm2d_cfg(**_cifar_p4),
    'mega_tinyimagenet_patch8_64': ssm2d_cfg(**_tiny_imagenet_p8),
    'mega_tinyimagenet_patch8_64_ablate': ssm2d_cfg(**_tiny_imagenet_p8),
    'mega_tinyimagenet_patch8_64_s4nd': ssm2d_cfg(**_tiny_imagenet_p8),
    'mega_tinyimagenet_patch8_64_ssm2d': ssm2d_cfg(**_tiny_imagenet_p8),
    'mega_tiny_patch16_224': ssm2d_cfg(**_imagenet_p16),
    'mega_tiny_patch16_224_ablate': ssm2d_cfg(**_imagenet_p16),
    'mega_tiny_patch16_224_ssm2d': ssm2d_cfg(**_imagenet_p16),
    'mega_iso_lra_cifar10': ssm2d_cfg(**_lra_image),
    'mega_iso_lra_cifar10_ablate': ssm2d_cfg(**_lra_image),
    'mega_iso_lra_cifar10_ssm2d': ssm2d_cfg(**_lra_image),
})

# Small-dataset Mega (code-v1 ``create_model('mega')``, docs/2d-ssm.md, 'Backbone configurations'): 9 layers,
# embed = hidden = z = FFN = 192, EMA / SSM N = 16; code-v1 passes no dropout or stochastic depth to it.
_mega_small_datasets = dict(embed_dim=192, depth=9, hidden_dim=192, ffn_hidden_dim=192, zdim=192, ssm_d_state=16)
# Mega ViT-T (XuezheMax/mega-image ``mega_tiny_patch16_224``; the recipe of the 2-D SSM paper's Figure 5).
_mega_tiny = dict(patch_size=16, embed_dim=192, depth=12, hidden_dim=384, ffn_hidden_dim=384, zdim=64, ssm_d_state=16)


# Mega-ISO (paper Sec. 5, App. F; docs/2d-ssm.md, 'Mega ImageNet and LRA recipes'): Mega's ``mega_lra_cifar10``
# on the 1024 raw grayscale pixels (isotropic, no patches): 8 layers, embed 160, hidden = FFN 320, z 96, EMA N 16,
# laplace attention, BatchNorm, pre-norm, mean pool, classifier 160 -> 320 (GELU) -> 10, dropout 0. The pixel
# embedding x * w + b is a 1x1 patch embedding.
_mega_iso = dict(img_size=32, patch_size=1, in_chans=1, num_classes=10, embed_dim=160, depth=8, hidden_dim=320,
                 ffn_hidden_dim=320, zdim=96, ssm_d_state=16, norm_layer='batchnorm', head_hidden_dim=320)


def _cifar_mega(variant: str, spatial_mixer: str, pretrained: bool, kwargs) -> VisionMega:
    model_args = dict(img_size=32, patch_size=4, num_classes=100, spatial_mixer=spatial_mixer, **_mega_small_datasets)
    return _create_vision_mega(variant, pretrained, **dict(model_args, **kwargs))


def _tinyimagenet_mega(variant: str, spatial_mixer: str, pretrained: bool, kwargs) -> VisionMega:
    model_args = dict(img_size=64, patch_size=8, num_classes=200, spatial_mixer=spatial_mixer, **_mega_small_datasets)
    return _create_vision_mega(variant, pretrained, **dict(model_args, **kwargs))


def _imagenet_mega(variant: str, spatial_mixer: str, pretrained: bool, kwargs) -> VisionMega:
    model_args = dict(img_size=224, num_classes=1000, spatial_mixer=spatial_mixer, **_mega_tiny)
    return _create_vision_mega(variant, pretrained, **dict(model_args, **kwargs))


@register_model
def mega_cifar_patch4_32(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega (EMA) for CIFAR-100, 32 px, patch 4 (8x8 tokens) (Table 1 "Mega", 2.98M)."""
    return _cifar_mega('mega_cifar_patch4_32', 'ema', pretrained, kwargs)


@register_model
def mega_cifar_patch4_32_ablate(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega-ablate (no spatial layer) for CIFAR-100 (Table 1 "Mega-ablate", 2.75M)."""
    return _cifar_mega('mega_cifar_patch4_32_ablate', 'none', pretrained, kwargs)


@register_model
def mega_cifar_patch4_32_s4nd(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega with S4ND instead of the EMA for CIFAR-100 (Table 1 "Mega w/ S4ND", 2.80M)."""
    return _cifar_mega('mega_cifar_patch4_32_s4nd', 's4nd', pretrained, kwargs)


@register_model
def mega_cifar_patch4_32_ssm2d(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega with the 2-D SSM instead of the EMA for CIFAR-100 (Table 1 "Mega 2-D SSM-r" 2.80M;
    ``ssm_complex=True``: "SSM-c" 2.84M)."""
    return _cifar_mega('mega_cifar_patch4_32_ssm2d', 'ssm2d', pretrained, kwargs)


@register_model
def mega_tinyimagenet_patch8_64(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega (EMA) for Tiny-ImageNet, 64 px, patch 8 (8x8 tokens) (Table 1 "Mega")."""
    return _tinyimagenet_mega('mega_tinyimagenet_patch8_64', 'ema', pretrained, kwargs)


@register_model
def mega_tinyimagenet_patch8_64_ablate(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega-ablate for Tiny-ImageNet (Table 1 "Mega-ablate")."""
    return _tinyimagenet_mega('mega_tinyimagenet_patch8_64_ablate', 'none', pretrained, kwargs)


@register_model
def mega_tinyimagenet_patch8_64_s4nd(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega w/ S4ND for Tiny-ImageNet (Table 1 "Mega w/ S4ND")."""
    return _tinyimagenet_mega('mega_tinyimagenet_patch8_64_s4nd', 's4nd', pretrained, kwargs)


@register_model
def mega_tinyimagenet_patch8_64_ssm2d(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega 2-D SSM for Tiny-ImageNet (Table 1 "Mega 2-D SSM-r"; ``ssm_complex=True``: "SSM-c")."""
    return _tinyimagenet_mega('mega_tinyimagenet_patch8_64_ssm2d', 'ssm2d', pretrained, kwargs)


@register_model
def mega_tiny_patch16_224(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega ViT-T (EMA) for ImageNet-1K (Figure 5 "EMA", 6.21M)."""
    return _imagenet_mega('mega_tiny_patch16_224', 'ema', pretrained, kwargs)


@register_model
def mega_tiny_patch16_224_ablate(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega ViT-T without a spatial layer for ImageNet-1K (Figure 5 "MEGA-ablate", 5.91M)."""
    return _imagenet_mega('mega_tiny_patch16_224_ablate', 'none', pretrained, kwargs)


@register_model
def mega_tiny_patch16_224_ssm2d(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega ViT-T with the 2-D SSM for ImageNet-1K (Figure 5 "2D-SSM-r", 5.96M)."""
    return _imagenet_mega('mega_tiny_patch16_224_ssm2d', 'ssm2d', pretrained, kwargs)


def _iso_mega(variant: str, spatial_mixer: str, pretrained: bool, kwargs) -> VisionMega:
    model_args = dict(spatial_mixer=spatial_mixer, **_mega_iso)
    if spatial_mixer == 'ssm2d':  # the official 2-D SSM LRA command: --n_ssm 2 --n-dim 1 --directions_amount 2
        model_args.update(ssm_n_ssm=2, ssm_d_state=1, ssm_directions=2)
    return _create_vision_mega(variant, pretrained, **dict(model_args, **kwargs))


@register_model
def mega_iso_lra_cifar10(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega-ISO (EMA) on LRA Image, 32x32 grayscale pixels as 1024 tokens (Figure 4 "Mega" 90.44)."""
    return _iso_mega('mega_iso_lra_cifar10', 'ema', pretrained, kwargs)


@register_model
def mega_iso_lra_cifar10_ablate(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega-ISO without the EMA on LRA Image (Figure 4 "Mega Ablate" 81.00)."""
    return _iso_mega('mega_iso_lra_cifar10_ablate', 'none', pretrained, kwargs)


@register_model
def mega_iso_lra_cifar10_ssm2d(pretrained: bool = False, **kwargs) -> VisionMega:
    """Mega-ISO with the 2-D SSM on the 32x32 pixel grid (Figure 4 "Mega 2-D SSM" 91.31; n_ssm 2, N 1,
    2 directions as the official LRA command)."""
    return _iso_mega('mega_iso_lra_cifar10_ssm2d', 'ssm2d', pretrained, kwargs)
