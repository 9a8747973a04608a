""" Myosotis (Myo) image models

A PyTorch impl of the image models of:
  * `Myosotis: structured computation for attention like layer` (E. Egorov, H. Ackermann, M. Nagel, H. Cai),
    spec ``myosotis.md`` §3, §4.3, §7.

  * ``myopix_zcifar`` (§7.3, the paper's zCIFAR model): the S5 architecture with Myo blocks. Pixels are the
    leaves of a ceil quadtree (raster order; the grid pyramid equals Morton-ordered leaves, §2.3), virtual
    nodes are persistent tokens (learned per-level inputs, initialised to 0, A7), 6 x ``MyoBlock`` with
    H = 512, P = 384, J = 3, readout = mean over the top ``readout_levels`` levels (default all, A8) + linear.
  * ``myonet_tiny / small / base`` (§7.3, [X], no paper numbers): 4-stage hierarchical backbones (stem 4x4/4 conv
    + LN, 2x2/2 conv + LN downsampling, blocks ``x += DropPath(MyoMixer2d(LN(x))); x += DropPath(MLP(LN(x)))``),
    feature maps at reductions 4 / 8 / 16 / 32.

Any input size >= 1 px works (ceil quadtrees; the backbones pad the right / bottom border to the conv strides).
No pretrained weights exist; load a local checkpoint with ``pretrained=True, pretrained_cfg_overlay=dict(file=path)``.
"""
import contextlib
import math
from functools import partial
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from timm.layers import DropPath, LayerNorm, Mlp, trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint, checkpoint_seq

from .. import ops
from ._common import local_weights_cfg, stage_intermediates
from ..layers.myo import MyoBlock, MyoMixer2d, MyoSSM, quadtree

__all__ = ['MyoPix', 'MyoNet', 'MyoNetBlock', 'MyoNetStage']

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)  # S5 loader (spec §4.2)
CIFAR10_STD = (0.247, 0.243, 0.261)

_VIRTUAL_INITS = ('embed', 'zero', 'mean')
_SSM_KWARGS = ('C_init', 'dt_min', 'dt_max', 'conj_sym', 'level_step', 'real', 'coupling')


def _check_image(x: torch.Tensor, in_chans: int) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[1] != in_chans:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f'x must have shape (B, {in_chans}, H, W), got {got}')
    if min(x.shape[-2:]) < 1:
        raise ValueError(f'input size {tuple(x.shape[-2:])} must be at least (1, 1)')


def _myo_no_weight_decay(model: nn.Module) -> Set[str]:
    """S5's "ssm" group (spec §4.3): Λ^re, Λ^im, log Δ of every Myo layer, and all norm parameters."""
    names = set()
    for module_name, module in model.named_modules():
        prefix = f'{module_name}.' if module_name else ''
        if isinstance(module, MyoSSM):
            names.update(prefix + p for p in module.no_weight_decay_names)
        elif isinstance(module, (nn.BatchNorm1d, nn.LayerNorm)):
            names.update(prefix + p for p, _ in module.named_parameters(recurse=False))
    return names


def _lecun_linear(layer: nn.Linear) -> nn.Linear:
    """flax Dense initialisation: LeCun normal weights, zero bias (spec §3 porting notes)."""
    std = 1.0 / math.sqrt(layer.in_features) / 0.87962566103423978
    trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
    nn.init.zeros_(layer.bias)
    return layer


# ---- the paper's pixel model ------------------------------------------------------------------------------


class MyoPix(nn.Module):
    """S5 classifier with Myo blocks on a pixel quadtree (spec §3 ``MyoClassifier``, §7.3 ``myopix_zcifar``).

    Args:
        img_size: the input size the level embeddings are sized for; larger inputs whose quadtree has more
            levels raise a ValueError with ``virtual_init="embed"``, smaller / other sizes work.
        embed_dim: H. depth: number of MyoBlocks. state_size: P (P_c = P/2 complex heads). blocks: J.
        dropout: S5 channel dropout inside the blocks. drop_rate: dropout before the classifier.
        virtual_init: layer-1 inputs of the virtual nodes: "embed" (learned per level, zero init), "zero" or
            "mean" (mean of the encoded leaves under the node) [D: "embed", A7].
        readout_levels: k_read, average the top k_read levels (1 = root only) [D: None = all levels, A8].
        norm, bn_momentum, glu: MyoBlock options [D: "batch", 0.05, "half_glu1"].
        C_init, dt_min, dt_max, conj_sym, level_step, real, coupling: MyoSSM options (spec §2.6).
    """

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 32,
            in_chans: int = 3,
            num_classes: int = 10,
            embed_dim: int = 512,
            depth: int = 6,
            state_size: int = 384,
            blocks: int = 3,
            dropout: float = 0.1,
            drop_rate: float = 0.,
            global_pool: str = 'readout',
            virtual_init: str = 'embed',
            readout_levels: Optional[int] = None,
            norm: str = 'batch',
            bn_momentum: float = 0.05,
            glu: str = 'half_glu1',
            C_init: str = 'lecun_normal',
            dt_min: float = 1e-3,
            dt_max: float = 1e-1,
            conj_sym: bool = True,
            level_step: str = 'span',
            real: bool = False,
            coupling: str = 'hermitian',
            device=None,
            dtype=None,
    ):
        super().__init__()
        if virtual_init not in _VIRTUAL_INITS:
            raise ValueError(f'virtual_init must be one of {_VIRTUAL_INITS}, got {virtual_init!r}')
        if readout_levels is not None and (not isinstance(readout_levels, int) or readout_levels < 1):
            raise ValueError(f'readout_levels must be None (all levels) or an int >= 1, got {readout_levels!r}')
        self._check_pool(global_pool)
        dd = {'device': device, 'dtype': dtype}
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.global_pool = global_pool
        self.virtual_init = virtual_init
        self.readout_levels = readout_levels
        self.grad_checkpointing = False
        self._grid: Optional[Tuple[int, int]] = None  # (H, W) of the last forward_features, for the readout

        self.encoder = _lecun_linear(nn.Linear(in_chans, embed_dim, **dd))
        num_virtual = len(ops.myo_quadtree(*self.img_size).level_sizes) - 1
        self.level_embed = nn.Parameter(torch.zeros(num_virtual, embed_dim, **dd)) if virtual_init == 'embed' else None
        ssm_kwargs = dict(C_init=C_init, dt_min=dt_min, dt_max=dt_max, conj_sym=conj_sym, level_step=level_step,
                          real=real, coupling=coupling)
        self.blocks = nn.ModuleList([
            MyoBlock(embed_dim, state_size, blocks, norm=norm, bn_momentum=bn_momentum, glu=glu, dropout=dropout,
                     **ssm_kwargs, **dd)
            for _ in range(depth)])
        self.feature_info = [dict(num_chs=embed_dim, reduction=1, module=f'blocks.{i}') for i in range(depth)]
        self.head_drop = nn.Dropout(drop_rate)
        self.head = _lecun_linear(nn.Linear(embed_dim, num_classes, **dd)) if num_classes > 0 else nn.Identity()

    @staticmethod
    def _check_pool(global_pool: str) -> None:
        if global_pool not in ('readout', ''):
            raise ValueError(f"global_pool must be 'readout' (top-level mean) or '' (none), got {global_pool!r}")

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return _myo_no_weight_decay(self) | ({'level_embed'} if self.level_embed is not None else set())

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r'^encoder|^level_embed', blocks=r'^blocks\.(\d+)')

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        self.num_classes = num_classes
        if global_pool is not None:
            self._check_pool(global_pool)
            self.global_pool = global_pool
        self.head = _lecun_linear(nn.Linear(self.embed_dim, num_classes)) if num_classes > 0 else nn.Identity()

    # ---- tree inputs and readout -------------------------------------------------------------------------

    def _embed(self, x: torch.Tensor) -> Tuple[torch.Tensor, ops.MyoTree]:
        """Pixels -> encoded leaves + layer-1 virtual inputs: (B, N, H) node features and the quadtree."""
        _check_image(x, self.in_chans)
        batch, _, height, width = x.shape
        tree = quadtree(height, width, device=x.device)
        num_virtual = len(tree.level_sizes) - 1
        if self.level_embed is not None and num_virtual > self.level_embed.shape[0]:
            raise ValueError(
                f'input size {(height, width)} has a {num_virtual + 1}-level quadtree, but the level embeddings '
                f'cover {self.level_embed.shape[0] + 1} levels (img_size {self.img_size}); build the model with a '
                f'larger img_size or virtual_init="zero"/"mean"')
        leaves = self.encoder(x.flatten(2).transpose(1, 2))  # (B, H*W, dim), raster order
        if self.virtual_init == 'embed':
            counts = torch.tensor(tree.level_sizes[1:], device=x.device)
            virtual = torch.repeat_interleave(self.level_embed[:num_virtual], counts, dim=0)
            virtual = virtual.to(leaves.dtype).expand(batch, -1, -1)
        elif self.virtual_init == 'zero':
            virtual = leaves.new_zeros(batch, tree.parent.numel() - height * width, self.embed_dim)
        else:
            virtual = self._span_means(leaves.transpose(1, 2).reshape(batch, -1, height, width), tree.grid_sizes)
        self._grid = (height, width)
        return torch.cat([leaves, virtual], dim=1), tree

    @staticmethod
    def _span_means(leaf_map: torch.Tensor, grid_sizes) -> torch.Tensor:
        """Mean of the leaves under every virtual node of a ceil quadtree: (B, N - L, dim)."""
        sums, counts = leaf_map, torch.ones_like(leaf_map[:1, :1])
        out = []
        for rows, cols in grid_sizes[1:]:
            pad = (0, 2 * cols - sums.shape[-1], 0, 2 * rows - sums.shape[-2])
            sums = F.pad(sums, pad).unflatten(-1, (cols, 2)).unflatten(-3, (rows, 2)).sum((-3, -1))
            counts = F.pad(counts, pad).unflatten(-1, (cols, 2)).unflatten(-3, (rows, 2)).sum((-3, -1))
            out.append((sums / counts).flatten(2).transpose(1, 2))
        return torch.cat(out, dim=1)

    def readout(self, x: torch.Tensor, grid: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        """Mean of the node features over the top ``readout_levels`` levels (spec §2.7): (B, N, H) -> (B, H)."""
        grid = grid or self._grid
        if grid is None:
            raise ValueError('readout needs the image grid: call forward_features first or pass grid=(H, W)')
        tree = quadtree(*grid, device=x.device)
        if x.dim() != 3 or x.shape[1] != tree.parent.numel():
            raise ValueError(f'x must have shape (B, N, dim) with N={tree.parent.numel()} nodes of the {grid} '
                             f'quadtree, got {tuple(x.shape)}')
        depth = len(tree.level_sizes)
        keep = depth if self.readout_levels is None else min(self.readout_levels, depth)
        first = sum(tree.level_sizes[:depth - keep])  # level-major: the top levels are the last nodes
        return x[:, first:].mean(1)

    # ---- forward -----------------------------------------------------------------------------------------

    def _run_block(self, block: nn.Module, x: torch.Tensor, tree) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x, tree)
        return block(x, tree)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Node features (B, N, H) of all quadtree nodes, leaves (raster order) first, the root last."""
        x, tree = self._embed(x)
        for block in self.blocks:
            x = self._run_block(block, x, tree)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'readout':
            x = self.readout(x)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Block outputs on the leaves as (B, H, img_H, img_W) maps (reduction 1); the model has no final norm."""
        assert output_fmt in ('NCHW', 'NHWC'), 'Output format must be NCHW or NHWC.'
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        batch, _, height, width = x.shape if isinstance(x, torch.Tensor) and x.dim() == 4 else (0, 0, 0, 0)
        x, tree = self._embed(x)
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        intermediates = []
        for i, block in enumerate(blocks):
            x = self._run_block(block, x, tree)
            if i in take_indices:
                leaf_map = x[:, :height * width].reshape(batch, height, width, -1)
                intermediates.append(leaf_map.permute(0, 3, 1, 2).contiguous() if output_fmt == 'NCHW' else leaf_map)
        if intermediates_only:
            return intermediates
        return x, intermediates

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_head:
            self.reset_classifier(0, '')
        return take_indices


# ---- hierarchical backbone ---------------------------------------------------------------------------------


def _pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Zero-pad an NCHW map on the right / bottom to a multiple of the conv stride (ceil output size)."""
    pad_h, pad_w = -x.shape[-2] % multiple, -x.shape[-1] % multiple
    return F.pad(x, (0, pad_w, 0, pad_h)) if pad_h or pad_w else x


class MyoNetBlock(nn.Module):
    """``x += DropPath(MyoMixer2d(LN(x))); x += DropPath(MLP(LN(x)))`` on channels-last maps (spec §7.3)."""

    def __init__(self, dim: int, mlp_ratio: float = 4., drop_path: float = 0., norm_layer=LayerNorm,
                 mixer_kwargs: Optional[Dict[str, Any]] = None):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.mixer = MyoMixer2d(dim, **(mixer_kwargs or {}))
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.mixer(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


class MyoNetStage(nn.Module):
    """Optional 2x2/2 conv + LN downsampling, then MyoNet blocks; NHWC in and out."""

    def __init__(self, in_dim: int, dim: int, depth: int, downsample: bool, drop_path: List[float],
                 mlp_ratio: float = 4., norm_layer=LayerNorm, mixer_kwargs: Optional[Dict[str, Any]] = None,
                 shift: bool = False):
        super().__init__()
        self.downsample = nn.Conv2d(in_dim, dim, 2, stride=2) if downsample else None
        self.downsample_norm = norm_layer(dim) if downsample else nn.Identity()
        self.blocks = nn.Sequential(*[
            MyoNetBlock(dim, mlp_ratio, drop_path[i], norm_layer, dict(mixer_kwargs or {}, shift=shift and i % 2 == 1))
            for i in range(depth)])
        self.grad_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.downsample is not None:
            x = self.downsample(_pad_to_multiple(x.permute(0, 3, 1, 2), 2)).permute(0, 2, 3, 1)
            x = self.downsample_norm(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint_seq(self.blocks, x)
        return self.blocks(x)


class MyoNet(nn.Module):
    """Hierarchical Myo backbone (spec §7.3 ``myonet_*``, [X]): NCHW image -> 4 stages at strides 4/8/16/32.

    Args:
        dims, depths: stage widths and depths. mlp_ratio: MLP expansion [D: 4].
        drop_path_rate: stochastic depth, linear over blocks. drop_rate: dropout before the classifier.
        heads_ratio: complex Myo heads per channel, P_c = dim * heads_ratio [D: 0.5, §7.2 P_c = C // 2].
        ssm_blocks: HiPPO-N blocks J per mixer [D: 1]. dwconv: depthwise 3x3 conv in the mixer [D: True].
        shift: every odd block of a stage rolls its map before the solve (MyoMixer2d ``shift``) [D: False].
        C_init, dt_min, dt_max, conj_sym, level_step, real, coupling: MyoSSM options (spec §2.6)
            [D: "trunc_standard_normal" (S5 default), 1e-3, 1e-1, True, "span", False, "hermitian"].
    """

    def __init__(
            self,
            in_chans: int = 3,
            num_classes: int = 1000,
            global_pool: str = 'avg',
            dims: Tuple[int, ...] = (96, 192, 384, 768),
            depths: Tuple[int, ...] = (2, 2, 6, 2),
            mlp_ratio: float = 4.,
            drop_rate: float = 0.,
            drop_path_rate: float = 0.,
            heads_ratio: float = 0.5,
            ssm_blocks: int = 1,
            dwconv: bool = True,
            shift: bool = False,
            device=None,
            dtype=None,
            **ssm_kwargs,
    ):
        super().__init__()
        with torch.device(device) if device is not None else contextlib.nullcontext():
            self._build(in_chans, num_classes, global_pool, dims, depths, mlp_ratio, drop_rate, drop_path_rate,
                        heads_ratio, ssm_blocks, dwconv, shift, ssm_kwargs)
        if dtype is not None:
            self.to(dtype)

    def _build(self, in_chans, num_classes, global_pool, dims, depths, mlp_ratio, drop_rate, drop_path_rate,
               heads_ratio, ssm_blocks, dwconv, shift, ssm_kwargs) -> None:
        unknown = set(ssm_kwargs) - set(_SSM_KWARGS)
        if unknown:
            raise TypeError(f'MyoNet got unexpected arguments {sorted(unknown)}')
        if len(dims) != len(depths):
            raise ValueError(f'dims and depths must have the same length, got {dims} and {depths}')
        if global_pool not in ('avg', ''):
            raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = dims[-1]
        norm_layer = partial(LayerNorm, eps=1e-6)

        self.stem = nn.Conv2d(in_chans, dims[0], 4, stride=4)
        self.stem_norm = norm_layer(dims[0])
        rates = [r.tolist() for r in torch.linspace(0, drop_path_rate, sum(depths), device='cpu').split(list(depths))]
        stages, self.feature_info, in_dim = [], [], dims[0]
        for i, (dim, depth) in enumerate(zip(dims, depths)):
            mixer_kwargs = dict(heads=max(int(dim * heads_ratio), 1), blocks=ssm_blocks, dwconv=dwconv, **ssm_kwargs)
            stages.append(MyoNetStage(in_dim, dim, depth, i > 0, rates[i], mlp_ratio, norm_layer, mixer_kwargs,
                                      shift=shift))
            self.feature_info.append(dict(num_chs=dim, reduction=4 * 2 ** i, module=f'stages.{i}'))
            in_dim = dim
        self.stages = nn.Sequential(*stages)
        self.norm = norm_layer(dims[-1])
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(dims[-1], num_classes) if num_classes > 0 else nn.Identity()
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):  # MyoSSM keeps its own S5 initialisation
            trunc_normal_(module.weight, std=.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return _myo_no_weight_decay(self)

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r'^stem', blocks=r'^stages\.(\d+)' if coarse else [
            (r'^stages\.(\d+)\.downsample', (0,)), (r'^stages\.(\d+)\.blocks\.(\d+)', None), (r'^norm', (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        for stage in self.stages:
            stage.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        self.num_classes = num_classes
        if global_pool is not None:
            if global_pool not in ('avg', ''):
                raise ValueError(f"global_pool must be 'avg' or '', got {global_pool!r}")
            self.global_pool = global_pool
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        _check_image(x, self.in_chans)
        return self.stem_norm(self.stem(_pad_to_multiple(x, 4)).permute(0, 2, 3, 1))  # NHWC

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) -> normed last-stage map (B, ceil(H/32), ceil(W/32), C), channels last."""
        return self.norm(self.stages(self._stem(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'avg':
            x = x.mean((1, 2))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Stage outputs (NCHW by default); ``norm`` applies the final norm to the last stage only."""
        return stage_intermediates(self.stages, self.norm, self._stem(x), indices, norm, stop_early,
                                   output_fmt, intermediates_only)

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        self.stages = self.stages[:max_index + 1]
        if prune_norm or max_index < len(self.feature_info) - 1:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, '')
        return take_indices


# ---- builders, configs and registrations --------------------------------------------------------------------


def _create(cls, variant: str, pretrained: bool = False, **kwargs):
    num_stages = len(kwargs.get('depths', ())) or kwargs.get('depth', 6)
    out_indices = kwargs.pop('out_indices', tuple(range(num_stages)))
    return build_model_with_cfg(
        cls,
        variant,
        pretrained,
        pretrained_strict=kwargs.pop('pretrained_strict', True),
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


def _cfg(**kwargs) -> Dict[str, Any]:
    return local_weights_cfg(**{
        'pool_size': (7, 7),
        'first_conv': 'stem',
        'paper_name': 'Myosotis: structured computation for attention like layer',
        **kwargs,
    })


default_cfgs = generate_default_cfgs({
    'myopix_zcifar': _cfg(num_classes=10, input_size=(3, 32, 32), pool_size=None, crop_pct=1.0,
                          mean=CIFAR10_MEAN, std=CIFAR10_STD, first_conv='encoder'),
    'myonet_tiny': _cfg(),
    'myonet_small': _cfg(),
    'myonet_base': _cfg(),
})


@register_model
def myopix_zcifar(pretrained: bool = False, **kwargs) -> MyoPix:
    """The paper's zCIFAR model (Table 4: 93.4 %): S5 sCIFAR config (§4.3), quadtree over the 32x32 pixels."""
    model_args = dict(img_size=32, num_classes=10, embed_dim=512, depth=6, state_size=384, blocks=3, dropout=0.1,
                      C_init='lecun_normal', glu='half_glu1')
    return _create(MyoPix, 'myopix_zcifar', pretrained, **dict(model_args, **kwargs))


@register_model
def myonet_tiny(pretrained: bool = False, **kwargs) -> MyoNet:
    """MyoNet-T (§7.3, [X]): dims (96, 192, 384, 768), depths (2, 2, 6, 2), drop path 0.2."""
    model_args = dict(dims=(96, 192, 384, 768), depths=(2, 2, 6, 2), drop_path_rate=0.2)
    return _create(MyoNet, 'myonet_tiny', pretrained, **dict(model_args, **kwargs))


@register_model
def myonet_small(pretrained: bool = False, **kwargs) -> MyoNet:
    """MyoNet-S (§7.3, [X]): dims (96, 192, 384, 768), depths (2, 2, 18, 2), drop path 0.3."""
    model_args = dict(dims=(96, 192, 384, 768), depths=(2, 2, 18, 2), drop_path_rate=0.3)
    return _create(MyoNet, 'myonet_small', pretrained, **dict(model_args, **kwargs))


@register_model
def myonet_base(pretrained: bool = False, **kwargs) -> MyoNet:
    """MyoNet-B (§7.3, [X]): dims (128, 256, 512, 1024), depths (2, 2, 18, 2), drop path 0.5."""
    model_args = dict(dims=(128, 256, 512, 1024), depths=(2, 2, 18, 2), drop_path_rate=0.5)
    return _create(MyoNet, 'myonet_base', pretrained, **dict(model_args, **kwargs))
