""" S5 sequence classifiers: the baseline of the Myosotis paper's Tables 2 / 4 (S5 on Morton-ordered pixels)

A PyTorch impl of the classifier of:
  * `Simplified State Space Layers for Sequence Modeling` (J. T. H. Smith, A. Warrington, S. W. Linderman),
    ICLR 2023, arXiv 2208.04933; code lindermanlab/S5 (``s5/seq_model.py``: encoder, ``n_layers`` x
    SequenceLayer, mean pooling, decoder).

  * ``S5Sequence``: encoder Linear(in_chans, H) -> ``depth`` x :class:`~ssm_plugins.layers.s5.S5Block` -> mean over
    the steps (padding masked) -> Linear(H, num_classes). Sequences (B, L, in_chans) are taken in the given order;
    images (B, in_chans, H, W) are flattened in ``order`` (``raster``, ``snake``, ``morton``: the pixel orders of
    ``ssm_plugins.data.seq_images``).
  * ``s5_zmnist`` / ``s5_zcifar``: the Myosotis paper's S5 rows (Table 4: zMNIST 99.5 %, zCIFAR 89.9 %): Morton-order
    pixels, S5's sMNIST / sCIFAR configurations (the same as ``myo_zmnist`` / ``myo_zcifar``, docs/myosotis.md
    'S5 settings'; training settings in ``PAPER_RECIPES``, optimiser groups ``myo_param_groups``).

The Myo models are this classifier with the recurrence replaced by a tree solve; the two share parameters and
initialisation (``S5SSM`` subclasses ``MyoSSM``), so a Myo / S5 comparison changes only the mixing along the input.
No pretrained weights exist; load a local checkpoint with ``pretrained=True, pretrained_cfg_overlay=dict(file=path)``.
"""
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.nn as nn

from timm.layers import register_notrace_function
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint

from ._common import lecun_linear, local_weights_cfg, new_head, no_weight_decay_names
from .essm import check_padding_mask, masked_mean
from .myo import CIFAR10_MEAN, CIFAR10_STD, S5_CIFAR, S5_MNIST
from ..data.seq_images import pixel_order
from ..layers._common import choice, shape_or_type
from ..layers.s5 import S5Block

__all__ = ['S5Sequence', 'PAPER_RECIPES']

_ORDERS = ('raster', 'snake', 'morton')
_SSM_KWARGS = ('C_init', 'dt_min', 'dt_max', 'conj_sym', 'bidirectional', 'clip_eigs')


def _order_index(height: int, width: int, order: str) -> torch.Tensor:
    """Row-major pixel index of each step of the sequence (CPU; moved to the input's device by the caller). Not
    cached: under torch.compile it is traced into the graph, and it costs one argsort of H x W codes."""
    return pixel_order(height, width, 'row' if order == 'raster' else order)


@torch.fx.wrap
@register_notrace_function  # torch.fx: the order's index depends on the input size
def s5_image_sequence(x: torch.Tensor, in_chans: int, order: str) -> Tuple[torch.Tensor, Optional[Tuple[int, int]]]:
    """Input -> ((B, L, in_chans) sequence, image grid or None): images (B, C, H, W) flattened in ``order``,
    sequences (B, L, C) as they are."""
    if isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[1] == in_chans:
        rows, cols = x.shape[-2:]
        if min(rows, cols) < 1:
            raise ValueError(f'input size {(rows, cols)} must be at least (1, 1)')
        grid = (rows, cols)
        x = x.flatten(2).transpose(1, 2)
        if order != 'raster':
            x = x[:, _order_index(rows, cols, order).to(x.device)]
    elif isinstance(x, torch.Tensor) and x.dim() == 3 and x.shape[2] == in_chans:
        grid = None
        if x.shape[1] < 1:
            raise ValueError(f'x must have at least one step, got shape {tuple(x.shape)}')
    else:
        raise ValueError(f'x must have shape (B, {in_chans}, H, W) or (B, L, {in_chans}), got {shape_or_type(x)}')
    if not x.is_floating_point():
        raise ValueError(f'x must be floating point (normalised pixels or features), got {x.dtype}')
    return x, grid


class S5Sequence(nn.Module):
    """S5 classifier (S5 ``s5/seq_model.py``, ``ClassificationModel`` with mean pooling): encoder -> ``depth`` x
    S5Block -> mean over the valid steps -> linear.

    Args:
        in_chans: features per step / image channels. num_classes: outputs (0: no head).
        order: how image input is flattened: "raster", "snake" or "morton" [D: "raster"].
        embed_dim: H. depth: blocks. state_size: P (P/2 complex states with conj_sym). blocks: J (HiPPO-N blocks).
        dropout: S5 channel dropout in the blocks. drop_rate: dropout before the classifier.
        norm, bn_momentum (PyTorch = 1 - flax), glu: S5Block options.
        C_init, dt_min, dt_max, conj_sym, bidirectional, clip_eigs: S5SSM options.
    ``forward(x, padding_mask=None)``: (B, L) bool, True at padded steps of sequence input (zeroed before every
    scan, left out of the mean).
    """

    def __init__(
            self,
            in_chans: int = 1,
            num_classes: int = 10,
            order: str = 'raster',
            embed_dim: int = 96,
            depth: int = 4,
            state_size: int = 128,
            blocks: int = 1,
            dropout: float = 0.1,
            drop_rate: float = 0.,
            global_pool: str = 'avg',
            norm: str = 'batch',
            bn_momentum: float = 0.05,
            glu: str = 'half_glu1',
            device=None,
            dtype=None,
            **ssm_kwargs,
    ):
        super().__init__()
        unknown = set(ssm_kwargs) - set(_SSM_KWARGS)
        if unknown:
            raise TypeError(f'S5Sequence got unexpected keyword arguments {sorted(unknown)}')
        choice('order', order, _ORDERS)
        self._check_pool(global_pool)
        dd = {'device': device, 'dtype': dtype}
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.order = order
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.grad_checkpointing = False
        self.encoder = lecun_linear(nn.Linear(in_chans, embed_dim, **dd))  # flax Dense (S5's encoder)
        self.blocks = nn.ModuleList([
            S5Block(embed_dim, state_size, blocks, norm=norm, bn_momentum=bn_momentum, glu=glu, dropout=dropout,
                    **ssm_kwargs, **dd)
            for _ in range(depth)])
        self.feature_info = [dict(num_chs=embed_dim, reduction=1, module=f'blocks.{i}') for i in range(depth)]
        self.head_drop = nn.Dropout(drop_rate)
        self.head = new_head(self.encoder.weight, embed_dim, num_classes, init=lecun_linear)

    @staticmethod
    def _check_pool(global_pool: str) -> None:
        if global_pool not in ('avg', ''):
            raise ValueError(f"global_pool must be 'avg' (mean over the steps) or '' (none), got {global_pool!r}")

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return no_weight_decay_names(self, norms=(nn.BatchNorm1d, nn.LayerNorm))  # S5's "ssm" group

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r'^encoder', blocks=r'^blocks\.(\d+)')

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
        self.head = new_head(self.encoder.weight, self.embed_dim, num_classes, init=lecun_linear,
                             training=self.training)

    def _embed(self, x: torch.Tensor) -> Tuple[torch.Tensor, Optional[Tuple[int, int]]]:
        x, grid = s5_image_sequence(x, self.in_chans, self.order)
        return self.encoder(x), grid

    def _run_block(self, block: nn.Module, x: torch.Tensor, padding_mask: Optional[torch.Tensor]) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x, padding_mask)
        return block(x, padding_mask)

    def _to_grid(self, x: torch.Tensor, grid: Tuple[int, int], output_fmt: str) -> torch.Tensor:
        """Step features (B, L, H) in ``order`` -> NCHW / NHWC maps on the image grid."""
        if self.order != 'raster':
            inverse = torch.argsort(_order_index(*grid, self.order)).to(x.device)
            x = x[:, inverse]
        x = x.unflatten(1, grid)
        return x.permute(0, 3, 1, 2).contiguous() if output_fmt == 'NCHW' else x

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
            padding_mask: Optional[torch.Tensor] = None,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]]]:
        """Block outputs: NCHW / NHWC maps on the image grid (pixels put back from ``order``) for image input, NLC
        (B, L, H) in the sequence's order for any input. The model has no final norm."""
        if output_fmt not in ('NCHW', 'NHWC', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW', 'NHWC' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        x, grid = self._embed(x)
        if output_fmt != 'NLC' and grid is None:
            raise ValueError(f"output_fmt={output_fmt!r} needs image input (B, C, H, W); use 'NLC' for sequences")
        padding_mask = check_padding_mask(padding_mask, x)
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        intermediates = []
        for i, block in enumerate(blocks):
            x = self._run_block(block, x, padding_mask)
            if i in take_indices:
                intermediates.append(x if output_fmt == 'NLC' else self._to_grid(x, grid, output_fmt))
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

    def forward_features(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Step features (B, L, H), in the order of the sequence the blocks saw."""
        x, _ = self._embed(x)
        padding_mask = check_padding_mask(padding_mask, x)
        for block in self.blocks:
            x = self._run_block(block, x, padding_mask)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False,
                     padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.global_pool == 'avg':
            x = masked_mean(x, check_padding_mask(padding_mask, x))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, padding_mask), padding_mask=padding_mask)


# ---- builders, configs and registrations --------------------------------------------------------------------


def _create(variant: str, pretrained: bool = False, **kwargs) -> S5Sequence:
    out_indices = kwargs.pop('out_indices', tuple(range(kwargs.get('depth', 4))))
    return build_model_with_cfg(S5Sequence, variant, pretrained, feature_cfg=dict(out_indices=out_indices,
                                                                                    feature_cls='getter'), **kwargs)


def _cfg(**kwargs) -> Dict[str, Any]:
    return local_weights_cfg(**{
        'num_classes': 10, 'pool_size': None, 'crop_pct': 1.0, 'first_conv': 'encoder', 'classifier': 'head',
        'paper_name': 'Simplified State Space Layers for Sequence Modeling', **kwargs})


default_cfgs = generate_default_cfgs({
    's5_zmnist': _cfg(input_size=(1, 28, 28), mean=(0.,), std=(1.,)),  # S4/S5 loaders: pixels in [0, 1]
    's5_zcifar': _cfg(input_size=(3, 32, 32), mean=CIFAR10_MEAN, std=CIFAR10_STD),
})

# The training settings: S5's per-task configurations, as for myo_zmnist / myo_zcifar (docs/myosotis.md 'S5
# settings'); paper figures: the Myosotis paper's S5 rows (test accuracy %, Table 4).
PAPER_RECIPES: Dict[str, Dict[str, Any]] = {
    's5_zmnist': dict(batch_size=50, epochs=150, lr=0.008, lr_ssm=0.002, weight_decay=0.01, opt_config='standard',
                      paper=99.5),
    's5_zcifar': dict(batch_size=50, epochs=250, lr=0.0045, lr_ssm=0.001, weight_decay=0.07,
                      opt_config='BfastandCdecay', paper=89.9),
}


@register_model
def s5_zmnist(pretrained: bool = False, **kwargs) -> S5Sequence:
    """S5 on zMNIST (Myosotis Table 4: 99.5 %): the 784 pixels in Morton order, S5's sMNIST configuration."""
    model_args = dict(in_chans=1, order='morton', **S5_MNIST)
    return _create('s5_zmnist', pretrained, **dict(model_args, **kwargs))


@register_model
def s5_zcifar(pretrained: bool = False, **kwargs) -> S5Sequence:
    """S5 on zCIFAR (Myosotis Table 4: 89.9 %): the 1024 RGB pixels in Morton order, S5's sCIFAR configuration."""
    model_args = dict(in_chans=3, order='morton', **S5_CIFAR)
    return _create('s5_zcifar', pretrained, **dict(model_args, **kwargs))
