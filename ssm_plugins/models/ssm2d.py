""" 2-D SSM inside ViT / DeiT / Swin blocks

A PyTorch impl of the backbones of:
  * `2-D SSM: A General Spatial Layer for Visual Transformers` (E. Baron, I. Zimerman, L. Wolf,
    arXiv:2306.06635 v1, June 2023), Sec. 5, Tables 1-3, App. F; readings of the official code and our defaults:
    ``docs/2d-ssm.md``.

The layer (``ssm_plugins.layers.SSM2D``) sits in the attention branch of every block, right after the
pre-attention norm, and its output feeds Q, K and V (docs/2d-ssm.md, 'Placement in the backbones'):
  * ViT / DeiT: on the patch tokens only, reshaped to the token grid; prefix (class / register) tokens
    bypass it unchanged.
  * Swin: on the whole stage feature map, before the cyclic shift and window partition.

The models subclass timm's ``VisionTransformer`` / ``Block`` and ``SwinTransformer`` / ``SwinTransformerBlock``
and reuse timm's builder, checkpoint filters and feature getter. The SSM kernels are global and
resolution-free, so any input size divisible by the patch size works (position embeddings are resampled).

Options for every model (timm kwargs): ``spatial_mixer`` selects the layer at the SSM's position, i.e. Table 1's
comparison rows (paper App. F): ``'ssm2d'`` (default, the paper's layer), ``'s4nd'`` ("w/ S4ND"), ``'ema'``
(Mega's multi-head EMA on the row-major flattened tokens, "Swin w/ EMA") and ``'none'`` (the plain ViT / Swin:
"ViT", "Swin-reprod."); the layer's options ``ssm_d_state``, ``ssm_n_ssm``, ``ssm_directions``, ``ssm_complex``,
``ssm_complex_param``, ``ssm_layernorm``, ``ssm_fused`` and ``mixer_kwargs`` (further layer arguments): their
defaults and which kind takes which are those of ``ssm_plugins.layers.SpatialMixerOptions`` (``ssm_<option>``
is its field ``<option>``). Also ``no_pos_embed`` (Table 3 ablation). No pretrained weights exist; load a local
checkpoint with ``pretrained=True, pretrained_cfg_overlay=dict(file=path)``.
"""
import math
from functools import partial
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.nn as nn

from timm.layers import register_notrace_function, register_notrace_module, resample_abs_pos_embed_nhwc, trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint
from timm.models.swin_transformer import SwinTransformer, SwinTransformerBlock, window_partition
from timm.models.swin_transformer import checkpoint_filter_fn as swin_checkpoint_filter_fn
from timm.models.vision_transformer import Block, VisionTransformer
from timm.models.vision_transformer import checkpoint_filter_fn as vit_checkpoint_filter_fn

from ._common import local_weights_cfg, no_weight_decay_names, stage_intermediates
from ..layers._common import shape_or_type
from ..layers.spatial_mixers import SpatialMixerOptions
from ..layers.ssm2d import SSM2D

__all__ = ['VisionTransformerSSM2D', 'SwinTransformerSSM2D', 'SSM2DBlock', 'SwinTransformerSSM2DBlock']

CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)


@torch.fx.wrap
@register_notrace_function  # torch.fx: an opaque call (public name: fx autowraps no '_' names)
def check_ssm2d_input(x: torch.Tensor, in_chans: int, patch_size: Tuple[int, int], pad: bool,
                      img_size: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[1] != in_chans:
        got = shape_or_type(x)
        raise ValueError(f'x must have shape (B, {in_chans}, H, W), got {got}')
    size = tuple(x.shape[-2:])
    if img_size is not None and size != tuple(img_size):
        raise ValueError(f'input size {size} must equal img_size {tuple(img_size)} (build the model with '
                         f'dynamic_img_size=True to accept other sizes)')
    if not pad and (size[0] % patch_size[0] or size[1] % patch_size[1] or min(size) < 1):
        raise ValueError(f'input size {size} must be a positive multiple of the patch size {tuple(patch_size)}')
    return x


torch.fx.wrap('resample_abs_pos_embed_nhwc')  # shape-dependent (timm leaves it to the tracer)


@torch.fx.wrap
@register_notrace_function
def nhwc_grid_of(x: torch.Tensor) -> Tuple[int, int]:
    return tuple(x.shape[1:3])


def _fill_missing_ssm(state_dict: Dict[str, torch.Tensor], model: nn.Module) -> Dict[str, torch.Tensor]:
    """Checkpoints of the plain timm backbone have no SSM weights: keep the model's own (fresh) ones."""
    for name, value in model.state_dict().items():
        if '.ssm.' in name and name not in state_dict:
            state_dict[name] = value
    return state_dict


# ---- ViT / DeiT ----------------------------------------------------------------------------------------


@register_notrace_module  # torch.fx: prefix tokens vs the grid_size are shape-dependent
class SSM2DBlock(Block):
    """timm ViT pre-norm block with the 2-D SSM on the patch tokens after norm1 (docs/2d-ssm.md, 'Placement in the
    backbones')."""

    def __init__(self, dim: int, *args, ssm_layer=SSM2D, **kwargs):
        super().__init__(dim, *args, **kwargs)
        self.ssm = ssm_layer(dim)

    def _norm_ssm(self, x: torch.Tensor, grid_size: Optional[Tuple[int, int]]) -> torch.Tensor:
        if grid_size is None:
            raise ValueError('grid_size=(H, W) of the patch tokens is required by SSM2DBlock')
        y = self.norm1(x)
        if isinstance(self.ssm, nn.Identity):  # spatial_mixer='none': the plain timm block
            return y
        batch, num_tokens, dim = y.shape
        height, width = grid_size
        num_prefix = num_tokens - height * width
        if num_prefix < 0:
            raise ValueError(f'x has {num_tokens} tokens, fewer than the grid_size {tuple(grid_size)} needs')
        patches = self.ssm(y[:, num_prefix:].reshape(batch, height, width, dim))
        # prefix tokens (class, distillation, registers) bypass the SSM unchanged
        return torch.cat([y[:, :num_prefix], patches.reshape(batch, height * width, dim)], dim=1)

    def forward(
            self,
            x: torch.Tensor,
            grid_size: Optional[Tuple[int, int]] = None,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> torch.Tensor:
        y = self._norm_ssm(x, grid_size)
        x = x + self.drop_path1(self.ls1(self.attn(y, attn_mask=attn_mask, is_causal=is_causal)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


class VisionTransformerSSM2D(VisionTransformer):
    """ViT / DeiT with a 2-D SSM in every block (paper Sec. 5; docs/2d-ssm.md, 'Placement in the backbones').

    Takes timm ``VisionTransformer`` kwargs plus ``spatial_mixer`` ('ssm2d' | 's4nd' | 'ema' | 'none': Table 1's
    ViT rows), ``mixer_kwargs`` and the ``ssm_*`` options (:class:`~ssm_plugins.layers.SpatialMixerOptions`), and
    ``no_pos_embed`` (drop the learned absolute position embedding). ``dynamic_img_size`` defaults to True so any
    input size divisible by the patch size is accepted.
    """

    def __init__(
            self,
            *args,
            no_pos_embed: bool = False,
            **kwargs,
    ):
        if kwargs.get('patch_drop_rate', 0.) > 0:
            raise ValueError('patch_drop_rate must be 0: the SSM needs the full token grid')
        if 'block_fn' in kwargs:
            raise ValueError('block_fn is fixed to SSM2DBlock in VisionTransformerSSM2D')
        if no_pos_embed:
            kwargs['pos_embed'] = 'none'
        kwargs.setdefault('dynamic_img_size', True)
        mixer = SpatialMixerOptions.pop_model_kwargs(kwargs, default_kind='ssm2d')
        ssm_layer = partial(mixer.build, device=kwargs.get('device'), dtype=kwargs.get('dtype'))
        super().__init__(*args, block_fn=partial(SSM2DBlock, ssm_layer=ssm_layer), **kwargs)
        self.spatial_mixer = mixer.kind

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return super().no_weight_decay() | no_weight_decay_names(self)

    def _embed(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """Patch + position embedding; returns the tokens and the patch grid size (H, W)."""
        x = check_ssm2d_input(x, self.in_chans, self.patch_embed.patch_size, self.patch_embed.dynamic_img_pad,
                              None if self.dynamic_img_size else self.patch_embed.img_size)
        x = self.patch_embed(x)
        grid_size = nhwc_grid_of(x) if self.dynamic_img_size else tuple(self.patch_embed.grid_size)
        x = self._pos_embed(x)
        x = self.patch_drop(x)
        x = self.norm_pre(x)
        return x, grid_size

    def _run_block(self, block: nn.Module, x: torch.Tensor, grid_size, attn_mask, is_causal) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x, grid_size, attn_mask, is_causal)
        return block(x, grid_size, attn_mask, is_causal)

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            return_prefix_tokens: bool = False,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
            output_dict: bool = False,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]], Dict[str, Any]]:
        """Forward features that returns intermediates (same contract as timm's ``VisionTransformer``)."""
        assert output_fmt in ('NCHW', 'NLC'), 'Output format must be one of NCHW or NLC.'
        intermediates = []
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)

        batch = x.shape[0]
        x, (height, width) = self._embed(x)
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        for i, blk in enumerate(blocks):
            x = self._run_block(blk, x, (height, width), attn_mask, is_causal)
            if i in take_indices:
                intermediates.append(self.norm(x) if norm else x)

        prefix_tokens = None
        if self.num_prefix_tokens:
            prefix_tokens = [y[:, :self.num_prefix_tokens] for y in intermediates]
            intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == 'NCHW':
            intermediates = [y.reshape(batch, height, width, -1).permute(0, 3, 1, 2).contiguous()
                             for y in intermediates]

        if output_dict:
            result = {'image_intermediates': intermediates}
            if prefix_tokens is not None and return_prefix_tokens:
                result['image_intermediates_prefix'] = prefix_tokens
            if not intermediates_only:
                result['image_features'] = self.norm(x)
            return result
        if return_prefix_tokens and prefix_tokens is not None:
            intermediates = list(zip(intermediates, prefix_tokens))
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def forward_features(
            self,
            x: torch.Tensor,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> torch.Tensor:
        x, grid_size = self._embed(x)
        for blk in self.blocks:
            x = self._run_block(blk, x, grid_size, attn_mask, is_causal)
        return self.norm(x)


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: VisionTransformerSSM2D) -> Dict[str, torch.Tensor]:
    """timm's ViT filter (patch embed / pos embed resampling); plain ViT/DeiT checkpoints keep the fresh SSMs."""
    return _fill_missing_ssm(vit_checkpoint_filter_fn(state_dict, model), model)


def _create_vision_transformer_ssm2d(variant: str, pretrained: bool = False, **kwargs) -> VisionTransformerSSM2D:
    out_indices = kwargs.pop('out_indices', min(3, kwargs.get('depth', 12)))  # the last (up to) 3 blocks
    return build_model_with_cfg(
        VisionTransformerSSM2D,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        pretrained_strict=kwargs.pop('pretrained_strict', True),
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


# ---- Swin ------------------------------------------------------------------------------------------------


@register_notrace_module  # torch.fx: the SSM and window shapes are shape-dependent, like timm's Swin block
class SwinTransformerSSM2DBlock(SwinTransformerBlock):
    """timm Swin block with the 2-D SSM on the whole stage map after norm1, before shift/windows (docs/2d-ssm.md,
    'Placement in the backbones')."""

    @classmethod
    def from_block(cls, block: SwinTransformerBlock, ssm: nn.Module) -> 'SwinTransformerSSM2DBlock':
        """Turn a built timm block into this class in place, keeping its submodules (and state_dict names)."""
        block.__class__ = cls
        block.ssm = ssm
        return block

    def get_attn_mask(self, x: Optional[torch.Tensor] = None, device: Optional[torch.device] = None,
                      dtype: Optional[torch.dtype] = None) -> Optional[torch.Tensor]:
        """timm's shifted-window mask (same values), with the 3 x 3 regions computed by index comparisons instead of
        slice assignments into a zero map: torch 2.11's inductor fails to compile timm's version in the per-forward
        (``dynamic_mask``) path, which timm takes without ``strict_img_size`` (our default), with a C++ error
        (``decltype(tmp)::blendv`` on a scalar); timm's own Swin fails the same way with ``strict_img_size=False``."""
        if not any(self.shift_size):
            return None
        if x is not None:
            (height, width), device, dtype = x.shape[1:3], x.device, x.dtype
        else:
            height, width = (math.ceil(n / w) * w for n, w in zip(self.input_resolution, self.window_size))

        def region(n: int, window: int, shift: int) -> torch.Tensor:
            # timm's slices (0, -window), (-window, -shift), (-shift, None) in order; with shift 0 the last one
            # covers every index
            index = torch.arange(n, device=device)
            if shift == 0:
                return torch.zeros_like(index)
            return (index >= n - window).long() + (index >= n - shift).long()

        regions = (3 * region(height, self.window_size[0], self.shift_size[0])[:, None]
                   + region(width, self.window_size[1], self.shift_size[1])[None, :])
        windows = window_partition(regions[None, :, :, None].to(dtype), self.window_size).view(-1, self.window_area)
        different = windows.unsqueeze(1) != windows.unsqueeze(2)
        return torch.zeros(different.shape, device=device, dtype=dtype).masked_fill(different, -100.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        x = x + self.drop_path1(self._attn(self.ssm(self.norm1(x))))
        x = x.reshape(B, -1, C)
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        x = x.reshape(B, H, W, C)
        return x


class SwinTransformerSSM2D(SwinTransformer):
    """Swin Transformer with a 2-D SSM in every block (paper Sec. 5; docs/2d-ssm.md, 'Placement in the backbones').

    Takes timm ``SwinTransformer`` kwargs plus ``spatial_mixer`` ('ssm2d' | 's4nd' | 'ema' | 'none': Table 1's
    Swin rows), ``mixer_kwargs`` and the ``ssm_*`` options (:class:`~ssm_plugins.layers.SpatialMixerOptions`),
    ``abs_pos_embed`` (learned absolute position embedding added after the patch embedding, as in the small-dataset
    Swin of Lee et al.) and
    ``no_pos_embed`` (remove it; the relative position bias stays, docs/2d-ssm.md, 'Removing the positional
    encoding'). ``strict_img_size`` defaults to False so any input size divisible by the patch size is accepted.
    """

    def __init__(
            self,
            *args,
            abs_pos_embed: bool = False,
            no_pos_embed: bool = False,
            **kwargs,
    ):
        kwargs.setdefault('strict_img_size', False)
        dd = {'device': kwargs.get('device'), 'dtype': kwargs.get('dtype')}
        mixer = SpatialMixerOptions.pop_model_kwargs(kwargs, default_kind='ssm2d')  # checked before anything is built
        super().__init__(*args, **kwargs)
        self.spatial_mixer = mixer.kind
        for stage in self.layers:
            for block in stage.blocks:
                SwinTransformerSSM2DBlock.from_block(block, mixer.build(block.dim, **dd))

        if abs_pos_embed and not no_pos_embed:
            grid = tuple(self.patch_embed.grid_size)
            self.absolute_pos_embed = nn.Parameter(torch.zeros(1, *grid, self.embed_dim, **dd))
            trunc_normal_(self.absolute_pos_embed, std=.02)
        else:
            self.absolute_pos_embed = None

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return super().no_weight_decay() | no_weight_decay_names(self, params=('absolute_pos_embed',))

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        matcher = super().group_matcher(coarse)
        matcher['stem'] = r'^patch_embed|^absolute_pos_embed'  # the position embedding belongs to the stem
        return matcher

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        x = check_ssm2d_input(x, self.in_chans, self.patch_embed.patch_size, self.patch_embed.dynamic_img_pad,
                              self.patch_embed.img_size if self.patch_embed.strict_img_size else None)
        x = self.patch_embed(x)  # (B, H, W, C)
        if self.absolute_pos_embed is not None:
            x = x + resample_abs_pos_embed_nhwc(self.absolute_pos_embed, x.shape[1:3]).to(x.dtype)
        return x

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Forward features that returns intermediates (same contract as timm's ``SwinTransformer``)."""
        return stage_intermediates(self.layers, self.norm, self._embed(x), indices, norm, stop_early,
                                   output_fmt, intermediates_only)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self._embed(x)
        x = self.layers(x)
        return self.norm(x)


def swin_ssm2d_checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: SwinTransformerSSM2D) -> Dict[str, torch.Tensor]:
    """timm's Swin filter; plain Swin checkpoints keep the fresh SSMs and position embedding."""
    state_dict = swin_checkpoint_filter_fn(state_dict, model)
    if model.absolute_pos_embed is not None and 'absolute_pos_embed' in state_dict:
        state_dict['absolute_pos_embed'] = resample_abs_pos_embed_nhwc(
            state_dict['absolute_pos_embed'], model.absolute_pos_embed.shape[1:3])
    return _fill_missing_ssm(state_dict, model)


def _create_swin_transformer_ssm2d(variant: str, pretrained: bool = False, **kwargs) -> SwinTransformerSSM2D:
    default_out_indices = tuple(i for i, _ in enumerate(kwargs.get('depths', (1, 1, 3, 1))))
    out_indices = kwargs.pop('out_indices', default_out_indices)
    return build_model_with_cfg(
        SwinTransformerSSM2D,
        variant,
        pretrained,
        pretrained_filter_fn=swin_ssm2d_checkpoint_filter_fn,
        pretrained_strict=kwargs.pop('pretrained_strict', True),
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


# ---- configs and registrations -------------------------------------------------------------------------


def ssm2d_cfg(**kwargs) -> Dict[str, Any]:
    return local_weights_cfg(
        first_conv='patch_embed.proj',
        paper_name='2-D SSM: A General Spatial Layer for Visual Transformers',
        **kwargs,
    )


CIFAR100_CFG = dict(num_classes=100, input_size=(3, 32, 32), crop_pct=1.0, mean=CIFAR100_MEAN, std=CIFAR100_STD)
TINY_IMAGENET_CFG = dict(num_classes=200, input_size=(3, 64, 64), crop_pct=1.0)

default_cfgs = generate_default_cfgs({
    'deit_tiny_patch16_224_ssm2d': ssm2d_cfg(),
    'deit_small_patch16_224_ssm2d': ssm2d_cfg(),
    'deit_base_patch16_224_ssm2d': ssm2d_cfg(),
    'vit_cifar_patch4_32_ssm2d': ssm2d_cfg(**CIFAR100_CFG),
    'vit_tinyimagenet_patch8_64_ssm2d': ssm2d_cfg(**TINY_IMAGENET_CFG),
    'swin_tiny_patch4_window7_224_ssm2d': ssm2d_cfg(pool_size=(7, 7), crop_pct=.9, classifier='head.fc'),
    'swin_cifar_patch2_window4_32_ssm2d': ssm2d_cfg(pool_size=(4, 4), classifier='head.fc', **CIFAR100_CFG),
    'swin_tinyimagenet_patch4_window4_64_ssm2d': ssm2d_cfg(
        pool_size=(4, 4), classifier='head.fc', **TINY_IMAGENET_CFG),
})


@register_model
def deit_tiny_patch16_224_ssm2d(pretrained: bool = False, **kwargs) -> VisionTransformerSSM2D:
    """DeiT-T (ViT-Ti/16) with a 2-D SSM in every block (paper Table 2)."""
    model_args = dict(patch_size=16, embed_dim=192, depth=12, num_heads=3)
    return _create_vision_transformer_ssm2d('deit_tiny_patch16_224_ssm2d', pretrained, **dict(model_args, **kwargs))


@register_model
def deit_small_patch16_224_ssm2d(pretrained: bool = False, **kwargs) -> VisionTransformerSSM2D:
    """DeiT-S (ViT-S/16) with a 2-D SSM in every block (paper Table 2)."""
    model_args = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6)
    return _create_vision_transformer_ssm2d('deit_small_patch16_224_ssm2d', pretrained, **dict(model_args, **kwargs))


@register_model
def deit_base_patch16_224_ssm2d(pretrained: bool = False, **kwargs) -> VisionTransformerSSM2D:
    """DeiT-B (ViT-B/16) with a 2-D SSM in every block (paper Table 2)."""
    model_args = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12)
    return _create_vision_transformer_ssm2d('deit_base_patch16_224_ssm2d', pretrained, **dict(model_args, **kwargs))


# The small-dataset ViT of Lee et al. 2021 (docs/2d-ssm.md, 'Backbone configurations'): depth 9, dim 192,
# 12 heads of 16, MLP ratio 2, class token, learned absolute position embedding, stochastic depth 0.1, no qkv bias.
_vit_small_datasets = dict(embed_dim=192, depth=9, num_heads=12, mlp_ratio=2., qkv_bias=False, drop_path_rate=0.1)


@register_model
def vit_cifar_patch4_32_ssm2d(pretrained: bool = False, **kwargs) -> VisionTransformerSSM2D:
    """Small-dataset ViT (Lee et al.) for CIFAR-100, 32 px, patch 4 (8x8 tokens), with 2-D SSM (Table 1)."""
    model_args = dict(img_size=32, patch_size=4, num_classes=100, **_vit_small_datasets)
    return _create_vision_transformer_ssm2d('vit_cifar_patch4_32_ssm2d', pretrained, **dict(model_args, **kwargs))


@register_model
def vit_tinyimagenet_patch8_64_ssm2d(pretrained: bool = False, **kwargs) -> VisionTransformerSSM2D:
    """Small-dataset ViT (Lee et al.) for Tiny-ImageNet, 64 px, patch 8 (8x8 tokens), with 2-D SSM (Table 1)."""
    model_args = dict(img_size=64, patch_size=8, num_classes=200, **_vit_small_datasets)
    return _create_vision_transformer_ssm2d(
        'vit_tinyimagenet_patch8_64_ssm2d', pretrained, **dict(model_args, **kwargs))


@register_model
def swin_tiny_patch4_window7_224_ssm2d(pretrained: bool = False, **kwargs) -> SwinTransformerSSM2D:
    """Swin-T with a 2-D SSM in every block (paper Table 2)."""
    model_args = dict(patch_size=4, window_size=7, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24))
    return _create_swin_transformer_ssm2d(
        'swin_tiny_patch4_window7_224_ssm2d', pretrained, **dict(model_args, **kwargs))


# The small-dataset Swin of Lee et al. 2021 (docs/2d-ssm.md, 'Backbone configurations'): embed 96,
# depths (2, 6, 4), heads (3, 6, 12), window 4, MLP ratio 2, absolute position embedding plus relative position
# bias.
_swin_small_datasets = dict(
    window_size=4, embed_dim=96, depths=(2, 6, 4), num_heads=(3, 6, 12), mlp_ratio=2., abs_pos_embed=True)


@register_model
def swin_cifar_patch2_window4_32_ssm2d(pretrained: bool = False, **kwargs) -> SwinTransformerSSM2D:
    """Small-dataset Swin (Lee et al.) for CIFAR-100, 32 px, patch 2 (16/8/4 maps), with 2-D SSM (Table 1)."""
    model_args = dict(img_size=32, patch_size=2, num_classes=100, **_swin_small_datasets)
    return _create_swin_transformer_ssm2d(
        'swin_cifar_patch2_window4_32_ssm2d', pretrained, **dict(model_args, **kwargs))


@register_model
def swin_tinyimagenet_patch4_window4_64_ssm2d(pretrained: bool = False, **kwargs) -> SwinTransformerSSM2D:
    """Small-dataset Swin (Lee et al.) for Tiny-ImageNet, 64 px, patch 4 (16/8/4 maps), with 2-D SSM (Table 1)."""
    model_args = dict(img_size=64, patch_size=4, num_classes=200, **_swin_small_datasets)
    return _create_swin_transformer_ssm2d(
        'swin_tinyimagenet_patch4_window4_64_ssm2d', pretrained, **dict(model_args, **kwargs))
