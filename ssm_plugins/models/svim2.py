"""SViM2 / SViQS: the plain MambaMixer / QSMixer sequence backbones of Table 1 (MambaMixer paper, arXiv:2403.19888
v2, App. G, App. H.1) as timm models; [D] marks our defaults, docs/mambamixer.md, 'Plain sequence backbones'.

No Switch of Scans, no class token, no multi-resolution conv branch: a patch (or pixel) embedding, an optional
learnable position embedding, ``depth`` generic MambaMixer / QSMixer blocks (``ssm_plugins.layers``: Selective
Token Mixer with the multi-resolution 1-D gate, QS channel mixer) on the row-major token sequence, final norm,
mean pool, linear head.

Registered variants:
  * ``svim2_b16`` / ``sviqs_b16`` — ImageNet column: "match the layers with ViT-base" [P2 App. G]: 12 layers,
    D 768, patch 16; "intermediate projection 3072" read as the token mixer's inner width (expand 4) [D];
    non-causal token mixers (``s6_bi`` / ``qs``) on the fixed row-major order [D].
  * ``svim2_scifar`` / ``sviqs_scifar`` — sCIFAR column: the 1024 RGB pixels as a sequence (patch 1, no position
    embedding, inputs scaled to [-1, 1] by the pretrained_cfg's mean/std 0.5), depth 6, D 512 [D, S5's
    sCIFAR size], 10 classes, dropout 0.25 before the head (Table 7). MambaMixer is the causal 1-D model
    (``s6``, left-padded convs); QS is non-causal by construction, so SViQS uses ``qs``. The channel mixer reads
    every token (its selection weights act on the token axis), so neither model is causal end to end.
The paper reports no parameter or FLOP counts for these models (benchmarks/models_vim2.py prints ours).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_function, register_notrace_module
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint

from ..layers._common import make_mixer_norm
from ..layers.mambamixer import MambaMixerBlock
from ._common import check_image, local_weights_cfg, new_head, no_weight_decay_names
from .vim2 import grid_of, resample_pos_embed, resample_token_grid

__all__ = ["SequenceMambaMixer"]

# torch.fx (timm's notrace registry): the blocks and the shape-dependent steps are opaque calls; public names
# because torch.fx autowraps no function whose name starts with '_'
register_notrace_module(MambaMixerBlock)
torch.fx.wrap("grid_of")


@torch.fx.wrap
@register_notrace_function
def check_seq_img(img, in_chans: int, patch_size: int):
    check_image(img, in_chans, "img")
    if img.shape[-2] % patch_size or img.shape[-1] % patch_size or min(img.shape[-2:]) == 0:
        raise ValueError(f"img height and width must be positive multiples of patch_size {patch_size}, "
                         f"got {tuple(img.shape[-2:])}")
    return img


@torch.fx.wrap
@register_notrace_function
def resize_grid_pos_embed(pos, grid, base_grid):
    """(1, h0*w0, D) position embedding at the token grid ``grid`` (bicubic when it differs from h0 x w0)."""
    if tuple(grid) == tuple(base_grid):
        return pos
    maps = pos.reshape(1, *base_grid, -1).permute(0, 3, 1, 2)
    return F.interpolate(maps, size=tuple(grid), mode="bicubic", align_corners=False).flatten(2).transpose(1, 2)


@torch.fx.wrap
@register_notrace_function
def nlc_to_grid(y, grid):
    return y.transpose(1, 2).reshape(y.shape[0], -1, *grid)


class SequenceMambaMixer(nn.Module):
    """Plain MambaMixer / QSMixer sequence classifier over the row-major patch (or pixel) tokens of an image.

    Args ([D] = a default of ours, docs/mambamixer.md, with its default):
        img_size [224], patch_size [16] (1 = pixel sequence), in_chans [3], num_classes [1000],
        embed_dim [768], depth [12], token_mixer: 's6' (causal), 's6_bi' or 'qs' [D: 's6_bi'],
        expand: token-mixer inner width / D [D: 4], d_state [16], headdim ('qs') [64],
        gate_kernels: the Selective Token Mixer's multi-resolution gate [D: (3, 5, 7)],
        pos_embed: learnable position embedding (resampled bicubically for other grids) [True],
        channel_mixer: QS channel mixer (False: token mixers only) [True],
        drop_rate: dropout before the head, drop_path_rate: linear stochastic depth,
        norm: 'layernorm' | 'rmsnorm' [D: 'layernorm'], global_pool: 'avg' | '' [D: 'avg'].
    Input: (batch, in_chans, H, W) with H and W multiples of patch_size; the channel mixers' token-axis weights
    are resampled for grids other than the training one (docs/mambamixer.md, 'Channel mixer at other token
    counts').
    """

    def __init__(self, img_size=224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 768, depth: int = 12, token_mixer: str = "s6_bi", expand: int = 4,
                 d_state: int = 16, headdim: int = 64, gate_kernels=(3, 5, 7), pos_embed: bool = True,
                 channel_mixer: bool = True, drop_rate: float = 0.0, drop_path_rate: float = 0.0,
                 norm: str = "layernorm", global_pool: str = "avg", device=None, dtype=None):
        super().__init__()
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        if img_size[0] % patch_size or img_size[1] % patch_size:
            raise ValueError(f"img_size {img_size} must be a multiple of patch_size {patch_size}")
        if global_pool not in ("avg", ""):
            raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
        self.num_classes, self.global_pool = num_classes, global_pool
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.in_chans, self.patch_size = in_chans, patch_size
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.grad_checkpointing = False
        num_tokens = self.grid_size[0] * self.grid_size[1]
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(in_chans, embed_dim, patch_size, patch_size)
        self.pos_embed = nn.Parameter(torch.zeros(1, num_tokens, embed_dim)) if pos_embed else None
        dpr = torch.linspace(0, drop_path_rate, depth, device='cpu').tolist()
        self.blocks = nn.ModuleList(
            MambaMixerBlock(embed_dim, num_tokens, drop_path=dpr[i], norm=norm, token_mixer=token_mixer,
                            channel_mixer=channel_mixer, d_state=d_state, token_grid=self.grid_size,
                            expand=expand, headdim=headdim, gate_kernels=gate_kernels)
            for i in range(depth))
        self.norm = make_mixer_norm(norm, embed_dim)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self.feature_info = [dict(num_chs=embed_dim, reduction=patch_size, module=f"blocks.{i}")
                             for i in range(depth)]
        if self.pos_embed is not None:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if isinstance(self.head, nn.Linear):
            nn.init.trunc_normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return no_weight_decay_names(self, params=("pos_embed",))

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r"^patch_embed|^pos_embed", blocks=[(r"^blocks\.(\d+)", None), (r"^norm", (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        self.num_classes = num_classes
        if global_pool is not None:
            if global_pool not in ("avg", ""):
                raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
            self.global_pool = global_pool
        self.head = new_head(self.patch_embed.proj.weight, self.embed_dim, num_classes, training=self.training)

    def _embed(self, img) -> Tuple[torch.Tensor, Tuple[int, int]]:
        x = self.patch_embed.proj(check_seq_img(img, self.in_chans, self.patch_size))
        grid = grid_of(x)
        x = x.flatten(2).transpose(1, 2)  # row-major tokens
        if self.pos_embed is not None:
            x = x + resize_grid_pos_embed(self.pos_embed, grid, self.grid_size)
        return x, grid

    def _block(self, block, x, grid):
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x, grid)
        return block(x, grid)

    def forward_intermediates(self, x: torch.Tensor, indices: Optional[Union[int, List[int]]] = None,
                              norm: bool = False, stop_early: bool = False, output_fmt: str = "NCHW",
                              intermediates_only: bool = False):
        """Block outputs (``norm``: through the final norm), NCHW on the token grid or NLC."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        x, grid = self._embed(x)
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        intermediates = []
        for i, block in enumerate(blocks):
            x = self._block(block, x, grid)
            if i in take_indices:
                y = self.norm(x) if norm else x
                if output_fmt == "NCHW":
                    y = nlc_to_grid(y, grid)
                intermediates.append(y)
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, "")
        return take_indices

    def forward_features(self, img: torch.Tensor) -> torch.Tensor:
        x, grid = self._embed(img)
        for block in self.blocks:
            x = self._block(block, x, grid)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == "avg":
            x = x.mean(dim=1)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(img))


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: SequenceMambaMixer) -> Dict[str, torch.Tensor]:
    """Unwrap training checkpoints; a checkpoint from another (square) grid is adapted by ViM2's rules
    (docs/mambamixer.md, 'Channel mixer at other token counts'): position embedding bicubic, channel-mixer
    token-axis weights resampled with area rescaling."""
    state_dict = state_dict.get("state_dict", state_dict.get("model", state_dict))
    out = {}
    grid = model.grid_size
    num_tokens = grid[0] * grid[1]
    for key, value in state_dict.items():
        if key == "pos_embed" and model.pos_embed is not None and value.shape != model.pos_embed.shape:
            value = resample_pos_embed(value, 0, grid)
        elif key.endswith("x_proj.weight") and ".channel_mixer." in key and value.shape[1] != num_tokens:
            value = resample_token_grid(value, 0, grid)
        out[key] = value
    return out


def _create(variant: str, pretrained: bool = False, **kwargs) -> SequenceMambaMixer:
    out_indices = kwargs.pop("out_indices", min(4, kwargs.get("depth", 12)))  # the last (up to) 4 blocks
    return build_model_with_cfg(SequenceMambaMixer, variant, pretrained, pretrained_filter_fn=checkpoint_filter_fn,
                                feature_cfg=dict(out_indices=out_indices, feature_cls="getter"), **kwargs)


_PAPER = "MambaMixer: Efficient Selective State Space Models with Dual Token and Channel Selection (v2), Table 1"
default_cfgs = generate_default_cfgs({
    "svim2_b16": local_weights_cfg(first_conv="patch_embed.proj", paper_name=_PAPER),
    "sviqs_b16": local_weights_cfg(first_conv="patch_embed.proj", paper_name=_PAPER),
    # sCIFAR: pixels in [0, 1] -> [-1, 1] (App. G), the whole 32x32 image
    **{name: local_weights_cfg(first_conv="patch_embed.proj", paper_name=_PAPER, num_classes=10,
                               input_size=(3, 32, 32), crop_pct=1.0, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
       for name in ("svim2_scifar", "sviqs_scifar")},
})

_IMAGENET = dict(img_size=224, patch_size=16, embed_dim=768, depth=12, expand=4, drop_path_rate=0.1)
_SCIFAR = dict(img_size=32, patch_size=1, embed_dim=512, depth=6, expand=2, pos_embed=False, num_classes=10,
               drop_rate=0.25)


@register_model
def svim2_b16(pretrained: bool = False, **kwargs) -> SequenceMambaMixer:
    """SViM2-B/16 (Table 1 ImageNet, MambaMixer): ViT-base layout, 12 x D 768, inner 3072, f+b S6 tokens."""
    return _create("svim2_b16", pretrained, **dict(_IMAGENET, token_mixer="s6_bi") | kwargs)


@register_model
def sviqs_b16(pretrained: bool = False, **kwargs) -> SequenceMambaMixer:
    """SViQS-B/16 (Table 1 ImageNet, QSMixer): ViT-base layout, 12 x D 768, inner 3072, QS tokens."""
    return _create("sviqs_b16", pretrained, **dict(_IMAGENET, token_mixer="qs") | kwargs)


@register_model
def svim2_scifar(pretrained: bool = False, **kwargs) -> SequenceMambaMixer:
    """SViM2 on sCIFAR (Table 1: 92.3%): 1024-pixel sequence, 6 x D 512, causal S6 token mixer [D]."""
    return _create("svim2_scifar", pretrained, **dict(_SCIFAR, token_mixer="s6") | kwargs)


@register_model
def sviqs_scifar(pretrained: bool = False, **kwargs) -> SequenceMambaMixer:
    """SViQS on sCIFAR (Table 1: 91.8%): 1024-pixel sequence, 6 x D 512, QS token mixer [D]."""
    return _create("sviqs_scifar", pretrained, **dict(_SCIFAR, token_mixer="qs") | kwargs)
