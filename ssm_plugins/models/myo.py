""" Myosotis (Myo) sequence and image models

A PyTorch impl of the models of:
  * `Myosotis: structured computation for attention like layer` (E. Egorov, H. Ackermann, M. Nagel, H. Cai),
    arXiv 2509.20503; our own choices are documented in ``docs/myosotis.md``.

  * ``MyoSequence`` (paper Sec. 4): the S5 architecture with Myo blocks on a tree over the input: encoder (Linear,
    or nn.Embedding for tokens) on the leaves, virtual nodes as persistent tokens (learned per-level inputs,
    initialised to 0, docs/myosotis.md 'Virtual-node inputs'), ``depth`` x ``MyoBlock``, readout = mean over the top
    ``readout_levels`` levels (default all, docs/myosotis.md 'Readout'; padding masked) + linear. Perfect trees pad
    as the paper does (784 -> 1024, 2000 -> 2048, 28 x 28 -> 32 x 32), ``tree="ceil"`` needs no padding. The paper's
    tasks, with S5's per-task configs (docs/myosotis.md 'S5 settings'; training settings in ``PAPER_RECIPES``,
    optimizer groups ``myo_param_groups``): ``myo_smnist`` / ``myo_scifar`` (snake order, 4-ary), ``myo_zmnist`` /
    ``myo_zcifar`` (Morton order = quadtree), ``myo_listops`` (tokens, binary), ``myo_pathfinder`` / ``myo_pathx``
    (row-major pixels, binary).
  * ``myopix_zcifar`` (docs/myosotis.md 'Backbones', the paper's zCIFAR model as a pixel model): ``MyoPix``, a
    MyoSequence on the ceil quadtree of any image size (raster-ordered pixels; the grid pyramid equals
    Morton-ordered leaves, docs/myosotis.md 'Level-shared fast path'), H = 512, P = 384, J = 3.
  * ``myonet_tiny / small / base`` (docs/myosotis.md 'Backbones', [X], no paper numbers): 4-stage hierarchical
    backbones (stem 4x4/4 conv + LN, 2x2/2 conv + LN downsampling, blocks
    ``x += DropPath(MyoMixer2d(LN(x))); x += DropPath(MLP(LN(x)))``), feature maps at reductions 4 / 8 / 16 / 32;
    ``forward_features`` NCHW (``output_fmt='NHWC'``: channels last).

Any input size >= 1 px works (ceil quadtrees; the backbones pad the right / bottom border to the conv strides).
The trees are built from Python ints (no tensor values read), so every model compiles with
``torch.compile(fullgraph=True)``; the tree solve runs in float32 / complex64 under bf16 autocast or bf16 weights.
No pretrained weights exist; load a local checkpoint with ``pretrained=True, pretrained_cfg_overlay=dict(file=path)``.
"""
import contextlib
import math
from functools import partial
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from timm.layers import DropPath, LayerNorm, Mlp, register_notrace_function, register_notrace_module, trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint, checkpoint_seq

from .. import ops
from ..ops import myo as myo_ops
from ..ops.reference import myo as myo_reference
from ._common import lecun_linear, local_weights_cfg, new_head, no_weight_decay_names, param_groups, stage_intermediates
from ..layers._common import choice, is_positive_int, shape_or_type
from ..layers.myo import MyoBlock, MyoMixer2d, MyoSSM

__all__ = ['MyoSequence', 'MyoPix', 'MyoNet', 'MyoNetBlock', 'MyoNetStage', 'PAPER_RECIPES', 'myo_param_groups']

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)  # S5 loader (docs/myosotis.md, 'S5 settings')
CIFAR10_STD = (0.247, 0.243, 0.261)

_VIRTUAL_INITS = ('embed', 'zero', 'mean')
_TREES = ('perfect', 'ceil')
_ORDERS = ('raster', 'snake', 'morton')
_SSM_KWARGS = ('C_init', 'dt_min', 'dt_max', 'conj_sym', 'level_step', 'real', 'coupling')


# torch.fx: an opaque call, so the check runs on the real input (a public name: fx autowraps no '_' function)
@torch.fx.wrap
@register_notrace_function
def check_myo_image(x: torch.Tensor, in_chans: int) -> torch.Tensor:
    """MyoNet's input: a floating-point (B, in_chans, H, W) batch with H, W >= 1; returns x."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[1] != in_chans:
        got = shape_or_type(x)
        raise ValueError(f'x must have shape (B, {in_chans}, H, W), got {got}')
    if min(x.shape[-2:]) < 1:
        raise ValueError(f'input size {tuple(x.shape[-2:])} must be at least (1, 1)')
    if not x.is_floating_point():
        raise ValueError(f'x must be a floating-point image batch (normalised by the data pipeline), got {x.dtype}')
    return x


def _myo_no_weight_decay(model: nn.Module, params: Tuple[str, ...] = ()) -> Set[str]:
    """S5's "ssm" group (docs/myosotis.md, 'S5 settings'): Λ^re, Λ^im, log Δ of every Myo layer, and all norm
    parameters (and ``params`` of the model's own, where it has them)."""
    return no_weight_decay_names(model, params=params, norms=(nn.BatchNorm1d, nn.LayerNorm))


# ---- the paper's S5 classifier with Myo blocks: sequences and pixel images -----------------------------------


class _Layout(NamedTuple):
    """How the input was laid on the tree, for the readout and for mapping leaves back to the input."""
    tree: ops.MyoTree
    node_valid: Optional[torch.Tensor]  # (B, N) bool: nodes the readout averages (None: all)
    num_leaves: int  # real leaves before the perfect-tree padding
    grid: Optional[Tuple[int, int]]  # (H, W) of image input, else None
    offset: Tuple[int, int]  # quadtree: (top, left) of the image in the padded grid


def _perfect_size(n: int, arity: int) -> int:
    """Smallest power of ``arity`` >= n (the leaves of a perfect tree)."""
    size = 1
    while size < n:
        size *= arity
    return size


def _snake(x: torch.Tensor) -> torch.Tensor:
    """Row boustrophedon of (B, C, H, W) (S4/S5 ``snake_permutation``, docs/myosotis.md 'Input orders'): odd rows
    reversed. Its own inverse."""
    odd = torch.arange(x.shape[-2], device=x.device)[:, None] % 2 == 1
    return torch.where(odd, x.flip(-1), x)


# ---- torch.fx: the tree is built from the input's shape, so laying the input on it, the virtual nodes' inputs and
# the readout are opaque calls (timm's notrace registry), as is the Myo solve (MyoSSM / MyoMixer2d); the encoder,
# block norms, gates and head are traced. timm's FX feature extraction and test suite pass the registry to the
# tracer (``timm.models.get_notrace_modules()`` / ``get_notrace_functions()``; with torchvision's
# create_feature_extractor pass them as ``tracer_kwargs``). Public names: torch.fx autowraps no '_' function.
register_notrace_module(MyoSSM)
register_notrace_module(MyoMixer2d)


class MyoInputSpec(NamedTuple):
    """A MyoSequence's settings for laying its input on a tree, as plain values (an argument of the opaque calls)."""
    in_chans: int
    vocab_size: Optional[int]
    pad_token_id: int
    unflatten_sequences: bool
    img_size: Optional[Tuple[int, int]]
    seq_len: Optional[int]
    arity: int
    tree: str
    order: str
    virtual_init: str
    pos_grid: Optional[Tuple[int, int]]  # leaf grid of a Morton model's position embeddings, else None


def _leaf_inputs(x: torch.Tensor, padding_mask: Optional[torch.Tensor], spec: MyoInputSpec):
    """Input -> (raw leaf sequence (B, L_tree[, C]), tree, leaf validity (B, L_tree) or None, layout parts)."""
    shape = shape_or_type(x)
    if spec.vocab_size is not None:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in (torch.int32, torch.int64):
            raise ValueError(f'x must have shape (B, L) of int64 token ids, got {shape}'
                             f'{" " + str(x.dtype) if isinstance(x, torch.Tensor) else ""}')
        if x.shape[1] < 1:
            raise ValueError(f'x must have at least one token, got shape {shape}')
        if not torch.compiler.is_compiling() and bool(((x < 0) | (x >= spec.vocab_size)).any()):
            raise ValueError(f'x must hold token ids in [0, vocab_size={spec.vocab_size}), got '
                             f'[{int(x.min())}, {int(x.max())}]')
        return _sequence_leaves(x, padding_mask, spec)
    if isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[1] == spec.in_chans:
        if min(x.shape[-2:]) < 1:
            raise ValueError(f'input size {tuple(x.shape[-2:])} must be at least (1, 1)')
        if padding_mask is not None:
            raise ValueError('padding_mask is for token / sequence input (B, L); images are never padded by '
                             'the caller')
        return _image_leaves(x, spec)
    if isinstance(x, torch.Tensor) and x.dim() == 3 and x.shape[2] == spec.in_chans:
        if x.shape[1] < 1:
            raise ValueError(f'x must have at least one step, got shape {shape}')
        if spec.unflatten_sequences:
            if x.shape[1] != math.prod(spec.img_size) or padding_mask is not None:
                raise ValueError(f'with unflatten_sequences=True, x must be (B, H*W, C) raster pixels of img_size '
                                 f'{spec.img_size} without padding_mask, got {shape}')
            return _image_leaves(x.transpose(1, 2).unflatten(2, spec.img_size), spec)
        return _sequence_leaves(x, padding_mask, spec)
    raise ValueError(f'x must have shape (B, {spec.in_chans}, H, W) or (B, L, {spec.in_chans}), got {shape}')


def _sequence_leaves(x: torch.Tensor, padding_mask: Optional[torch.Tensor], spec: MyoInputSpec):
    batch, length = x.shape[:2]
    leaves = _perfect_size(length, spec.arity) if spec.tree == 'perfect' else length
    valid = None
    if padding_mask is not None:
        if not isinstance(padding_mask, torch.Tensor) or tuple(padding_mask.shape) != (batch, length):
            got = shape_or_type(padding_mask)
            raise ValueError(f'padding_mask must have shape (B, L) = {(batch, length)}, got {got}')
        valid = ~padding_mask.to(device=x.device, dtype=torch.bool)
    if leaves > length:
        pad = (0, leaves - length) if x.dim() == 2 else (0, 0, 0, leaves - length)
        x = F.pad(x, pad, value=spec.pad_token_id if x.dim() == 2 else 0.)
        if valid is None:
            valid = torch.ones(batch, length, dtype=torch.bool, device=x.device)
        valid = F.pad(valid, (0, leaves - length), value=False)
    return x, ops.myo_tree(leaves, spec.arity, device=x.device), valid, length, None, (0, 0)


def _image_leaves(x: torch.Tensor, spec: MyoInputSpec):
    batch, _, rows, cols = x.shape
    if spec.order != 'morton':
        x = (_snake(x) if spec.order == 'snake' else x).flatten(2).transpose(1, 2)
        x, tree, valid, length, _, _ = _sequence_leaves(x, None, spec)
        return x, tree, valid, length, (rows, cols), (0, 0)
    side_r, side_c, top, left = rows, cols, 0, 0
    if spec.tree == 'perfect':  # centred zero padding to a power-of-two square (zMNIST: 2 px a side)
        side_r = side_c = _perfect_size(max(rows, cols), 2)
        top, left = (side_r - rows) // 2, (side_c - cols) // 2
        x = F.pad(x, (left, side_c - cols - left, top, side_r - rows - top))
    valid = None
    if (side_r, side_c) != (rows, cols):
        valid = F.pad(torch.ones(rows, cols, dtype=torch.bool, device=x.device),
                      (left, side_c - cols - left, top, side_r - rows - top), value=False)
        valid = valid.flatten().expand(batch, -1)
    tree = ops.myo_quadtree(side_r, side_c, device=x.device)  # raster-order pixels = Morton leaves (docs/myosotis.md)
    return x.flatten(2).transpose(1, 2), tree, valid, rows * cols, (rows, cols), (top, left)


@torch.fx.wrap
@register_notrace_function
def myo_layout(x: torch.Tensor, padding_mask: Optional[torch.Tensor],
               spec: MyoInputSpec) -> Tuple[torch.Tensor, _Layout]:
    """Input -> (raw leaf inputs (B, L_tree) token ids or (B, L_tree, C) features for the encoder, the layout)."""
    raw, tree, leaf_valid, length, grid, offset = _leaf_inputs(x, padding_mask, spec)
    node_valid = None if leaf_valid is None else myo_ops._extend_leaf_mask(leaf_valid, tree)
    return raw, _Layout(tree, node_valid, length, grid, offset)


def _leaf_positions(pos_embed: torch.Tensor, tree: ops.MyoTree, spec: MyoInputSpec) -> torch.Tensor:
    """The position embeddings of this input's leaves: a crop of the designed grid (quadtree) or the first
    L_tree positions (1-D trees)."""
    if (tree.kind == 'quad2d') != (spec.pos_grid is not None):
        raise ValueError('pos_embed of a Morton model needs image input (or unflatten_sequences=True); a 1-D '
                         'model needs sequence or non-Morton image input')
    if tree.kind == 'quad2d':
        rows, cols = tree.grid_sizes[0]
        if rows > spec.pos_grid[0] or cols > spec.pos_grid[1]:
            raise ValueError(f'input leaf grid {(rows, cols)} is larger than the position embeddings '
                             f'{spec.pos_grid} (img_size {spec.img_size})')
        return pos_embed.unflatten(1, spec.pos_grid)[:, :rows, :cols].flatten(1, 2)
    if tree.level_sizes[0] > pos_embed.shape[1]:
        raise ValueError(f'input has {tree.level_sizes[0]} leaves, more than the {pos_embed.shape[1]} '
                         f'position embeddings (seq_len {spec.seq_len})')
    return pos_embed[:, :tree.level_sizes[0]]


@torch.fx.wrap
@register_notrace_function
def myo_node_inputs(leaves: torch.Tensor, layout: _Layout, level_embed: Optional[torch.Tensor],
                    pos_embed: Optional[torch.Tensor], spec: MyoInputSpec) -> torch.Tensor:
    """Encoded leaves (B, L_tree, H) -> layer-1 inputs of all N nodes (B, N, H): the leaves (plus their position
    embeddings), then the virtual nodes' inputs (``spec.virtual_init``)."""
    tree = layout.tree
    batch = leaves.shape[0]
    num_virtual = len(tree.level_sizes) - 1
    if level_embed is not None and num_virtual > level_embed.shape[0]:
        what = f'size {layout.grid}' if layout.grid is not None else f'length {layout.num_leaves}'
        kind = 'quadtree' if tree.kind == 'quad2d' else f'{spec.arity}-ary tree'
        raise ValueError(
            f'input {what} has a {num_virtual + 1}-level {kind}, but the level embeddings cover '
            f'{level_embed.shape[0] + 1} levels (seq_len {spec.seq_len}, img_size {spec.img_size}); build '
            f'the model for a longer input or with virtual_init="zero"/"mean"')
    if pos_embed is not None:
        leaves = leaves + _leaf_positions(pos_embed, tree, spec).to(leaves.dtype)
    if spec.virtual_init == 'embed':
        virtual = torch.cat([level_embed[i].expand(n, -1) for i, n in enumerate(tree.level_sizes[1:])])
        virtual = virtual.to(leaves.dtype).expand(batch, -1, -1)
    elif spec.virtual_init == 'zero':
        virtual = leaves.new_zeros(batch, tree.parent.numel() - leaves.shape[1], leaves.shape[2])
    else:
        virtual = _span_means(leaves, tree)
    return torch.cat([leaves, virtual], dim=1)


@torch.fx.wrap
@register_notrace_function
def myo_readout(x: torch.Tensor, layout: _Layout, readout_levels: Optional[int]) -> torch.Tensor:
    """Mean of the node features (B, N, H) over the top ``readout_levels`` levels (None: all), over the nodes with
    a real leaf under them (docs/myosotis.md, 'Readout') -> (B, H)."""
    tree = layout.tree
    if x.dim() != 3 or x.shape[1] != tree.parent.numel():
        raise ValueError(f'x must have shape (B, N, dim) with N={tree.parent.numel()} nodes of the input tree, '
                         f'got {tuple(x.shape)}')
    depth = len(tree.level_sizes)
    keep = depth if readout_levels is None else min(readout_levels, depth)
    first = sum(tree.level_sizes[:depth - keep])  # level-major: the top levels are the last nodes
    if layout.node_valid is None:
        return x[:, first:].mean(1)
    weight = layout.node_valid[:, first:, None].to(x.dtype)
    return (x[:, first:] * weight).sum(1) / weight.sum(1).clamp(min=1)


class MyoSequence(nn.Module):
    """S5 classifier with Myo blocks on a tree over the input (paper Sec. 4; docs/myosotis.md, 'S5 settings'):
    encoder on the leaves -> ``depth`` x MyoBlock on all N tree nodes (virtual nodes are persistent tokens) ->
    mean over the top ``readout_levels`` levels (padding masked) -> linear.

    Inputs:
        tokens (B, L) int64 (``vocab_size`` set: nn.Embedding encoder, ListOps), sequences (B, L, in_chans)
        float (taken in the given order), or images (B, in_chans, H, W), flattened in ``order``.
    Trees:
        ``order="raster"|"snake"``: the pixel sequence on a 1-D ``arity``-ary tree over consecutive leaves.
        ``order="morton"`` (images): the quadtree (arity 4), stored as a grid pyramid: equal to a 4-ary tree over
        Morton-ordered pixels (docs/myosotis.md 'Level-shared fast path', verified in tests/ops/test_myo.py).
        ``tree="perfect"`` pads as the paper does (Sec. 4; docs/myosotis.md, 'Padding'): a sequence at its end to the
        next power of k (784 -> 1024, 2000 -> 2048), an image (Morton) on every side to the next power-of-two square
        (28 -> 32, 2 px a side); padding is processed as data (zeros, or ``pad_token_id``) and masked in the readout.
        ``tree="ceil"`` needs no padding: ceil trees (nodes have 1..k children).

    Args:
        in_chans: features per step / image channels (1 for token input). num_classes: outputs (0: no head).
        seq_len: the designed number of leaves (before padding), sizes the level embeddings; img_size: the
            designed image size (Morton models size their quadtree from it).
        vocab_size: token vocabulary (None: float input). pad_token_id: token used for perfect-tree padding.
        unflatten_sequences: (B, L, in_chans) input with L = H * W of ``img_size`` is a raster-flattened image
            (a recipe's row order): it gets the image path (``order``, centred padding, masked readout) [D: False].
        arity: k of the 1-D tree [4 for images, 2 for LRA, paper Sec. 4]. tree: "perfect" | "ceil".
        order: image flattening: "raster", "snake" or "morton".
        embed_dim: H. depth: blocks. state_size: P (P/2 complex heads). blocks: J.
        dropout: S5 channel dropout in the blocks. drop_rate: dropout before the classifier.
        virtual_init: layer-1 inputs of virtual nodes: "embed" (learned per level, zero init), "zero", "mean"
            (docs/myosotis.md, 'Virtual-node inputs').
        pos_embed: a learned embedding of every leaf position of the designed input, added to the encoded leaves
            [X] [D: False]. Without it the model is invariant to swapping sibling subtrees (level-shared weights, a
            per-node encoder, mean readout: every tree automorphism is a symmetry, e.g. a mirrored image gives the
            same logits); the paper does not say how its model breaks that symmetry (docs/myosotis.md, 'Edge weights').
        readout_levels: average the top k levels (1 = root) [D: None = all levels; docs/myosotis.md, 'Readout'].
        norm, bn_momentum (PyTorch = 1 - flax), glu: MyoBlock options.
        C_init, dt_min, dt_max, conj_sym, level_step, real, coupling: MyoSSM options (docs/myosotis.md, 'Edge weights').
    ``forward(x, padding_mask=None)``: (B, L) bool, True at padded steps of token / sequence input (readout only).
    """

    def __init__(
            self,
            in_chans: int = 1,
            num_classes: int = 10,
            seq_len: Optional[int] = None,
            img_size: Optional[Union[int, Tuple[int, int]]] = None,
            vocab_size: Optional[int] = None,
            pad_token_id: int = 0,
            unflatten_sequences: bool = False,
            pos_embed: bool = False,
            arity: int = 4,
            tree: str = 'perfect',
            order: str = 'raster',
            embed_dim: int = 96,
            depth: int = 4,
            state_size: int = 128,
            blocks: int = 1,
            dropout: float = 0.1,
            drop_rate: float = 0.,
            global_pool: str = 'readout',
            virtual_init: str = 'embed',
            readout_levels: Optional[int] = None,
            norm: str = 'batch',
            bn_momentum: float = 0.05,
            glu: str = 'half_glu1',
            C_init: str = 'trunc_standard_normal',
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
        for name, value, allowed in (('virtual_init', virtual_init, _VIRTUAL_INITS), ('tree', tree, _TREES),
                                     ('order', order, _ORDERS)):
            choice(name, value, allowed)
        if readout_levels is not None and not is_positive_int(readout_levels):
            raise ValueError(f'readout_levels must be None (all levels) or an int >= 1, got {readout_levels!r}')
        if not is_positive_int(arity, minimum=2):
            raise ValueError(f'arity must be an int >= 2, got {arity!r}')
        if order == 'morton' and arity != 4:
            raise ValueError(f"order='morton' lays pixels on a quadtree: arity must be 4, got {arity}")
        if vocab_size is not None and not is_positive_int(vocab_size):
            raise ValueError(f'vocab_size must be None (float input) or a positive int, got {vocab_size!r}')
        self._check_pool(global_pool)
        dd = {'device': device, 'dtype': dtype}
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else (tuple(img_size) if img_size else None)
        self.seq_len = seq_len if seq_len is not None else (math.prod(self.img_size) if self.img_size else None)
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.vocab_size = vocab_size
        self.pad_token_id = pad_token_id
        self.unflatten_sequences = bool(unflatten_sequences)
        if self.unflatten_sequences and self.img_size is None:
            raise ValueError('unflatten_sequences=True reads (B, H*W, C) sequences as images: pass img_size')
        self.arity = arity
        self.tree = tree
        self.order = order
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.global_pool = global_pool
        self.virtual_init = virtual_init
        self.readout_levels = readout_levels
        self.grad_checkpointing = False
        self._layout: Optional[_Layout] = None  # of the last forward_features, for a separate forward_head

        if vocab_size is not None:  # S5: one-hot tokens -> Dense (LeCun normal, fan_in = vocab) = an embedding
            self.encoder = nn.Embedding(vocab_size, embed_dim, **dd)
            std = 1.0 / math.sqrt(vocab_size) / 0.87962566103423978
            trunc_normal_(self.encoder.weight, std=std, a=-2 * std, b=2 * std)
        else:
            self.encoder = lecun_linear(nn.Linear(in_chans, embed_dim, **dd))
        self.level_embed = None
        if virtual_init == 'embed':
            if self.seq_len is None:
                raise ValueError("virtual_init='embed' sizes its level embeddings from seq_len or img_size: pass one")
            self.level_embed = nn.Parameter(torch.zeros(self._designed_depth() - 1, embed_dim, **dd))
        self.pos_embed = None
        self._pos_grid = None  # leaf grid of a Morton model's position embeddings
        if pos_embed:
            if self.seq_len is None:
                raise ValueError('pos_embed=True sizes its leaf embeddings from seq_len or img_size: pass one')
            self._pos_grid = self._designed_grid()
            leaves = math.prod(self._pos_grid) if self._pos_grid else (
                _perfect_size(self.seq_len, arity) if tree == 'perfect' else self.seq_len)
            self.pos_embed = nn.Parameter(torch.empty(1, leaves, embed_dim, **dd))
            if self.pos_embed.device.type != 'meta':
                trunc_normal_(self.pos_embed, std=.02)
        ssm_kwargs = dict(C_init=C_init, dt_min=dt_min, dt_max=dt_max, conj_sym=conj_sym, level_step=level_step,
                          real=real, coupling=coupling)
        self.blocks = nn.ModuleList([
            MyoBlock(embed_dim, state_size, blocks, norm=norm, bn_momentum=bn_momentum, glu=glu, dropout=dropout,
                     **ssm_kwargs, **dd)
            for _ in range(depth)])
        self.feature_info = [dict(num_chs=embed_dim, reduction=1, module=f'blocks.{i}') for i in range(depth)]
        self.head_drop = nn.Dropout(drop_rate)
        self.head = new_head(self.encoder.weight, embed_dim, num_classes, init=lecun_linear)

    def _designed_grid(self) -> Optional[Tuple[int, int]]:
        """Leaf grid of a Morton model's designed image (padded for perfect trees), else None."""
        if self.order != 'morton' or self.img_size is None:
            return None
        rows, cols = self.img_size
        if self.tree == 'perfect':
            rows = cols = _perfect_size(max(rows, cols), 2)
        return rows, cols

    def _designed_depth(self) -> int:
        """Levels of the tree of the designed input (seq_len / img_size)."""
        grid = self._designed_grid()
        if grid is not None:
            return len(myo_reference.quad_grid_sizes(*grid))
        leaves = _perfect_size(self.seq_len, self.arity) if self.tree == 'perfect' else self.seq_len
        return len(myo_reference.kary_level_sizes(leaves, self.arity))

    @staticmethod
    def _check_pool(global_pool: str) -> None:
        if global_pool not in ('readout', ''):
            raise ValueError(f"global_pool must be 'readout' (top-level mean) or '' (none), got {global_pool!r}")

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return _myo_no_weight_decay(self, params=('level_embed', 'pos_embed'))

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r'^encoder|^level_embed|^pos_embed', blocks=r'^blocks\.(\d+)')

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
        like = self.blocks[0].ssm.D if len(self.blocks) else None
        self.head = new_head(like, self.embed_dim, num_classes, init=lecun_linear, training=self.training)

    # ---- tree inputs and readout -------------------------------------------------------------------------

    def _input_spec(self) -> 'MyoInputSpec':
        return MyoInputSpec(self.in_chans, self.vocab_size, self.pad_token_id, self.unflatten_sequences, self.img_size,
                            self.seq_len, self.arity, self.tree, self.order, self.virtual_init, self._pos_grid)

    def _embed(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, _Layout]:
        """Input -> encoded leaves + layer-1 virtual inputs: (B, N, H) node features, and the layout."""
        spec = self._input_spec()
        raw, layout = myo_layout(x, padding_mask, spec)
        return myo_node_inputs(self.encoder(raw), layout, self.level_embed, self.pos_embed, spec), layout

    def readout(self, x: torch.Tensor, layout: Optional[_Layout] = None) -> torch.Tensor:
        """Mean of the node features over the top ``readout_levels`` levels (docs/myosotis.md, 'Readout'), over the
        nodes with a real leaf under them: (B, N, H) -> (B, H). ``layout``: from ``_embed`` (default: the last
        forward_features)."""
        layout = layout if layout is not None else self._layout
        if layout is None:
            raise ValueError('readout needs the input layout: call forward_features first')
        return myo_readout(x, layout, self.readout_levels)

    def leaf_map(self, x: torch.Tensor, layout: _Layout, output_fmt: str = 'NCHW') -> torch.Tensor:
        """Leaf features back in the input's layout: (B, H, img_H, img_W) for image input ('NCHW' / 'NHWC'),
        or (B, L, H) in the input's order, padding cropped ('NLC')."""
        leaves = x[:, :layout.tree.level_sizes[0]]
        if layout.grid is None:
            if output_fmt != 'NLC':
                raise ValueError(f"output_fmt={output_fmt!r} needs image input (B, C, H, W); use 'NLC' for sequences")
            return leaves[:, :layout.num_leaves]
        rows, cols = layout.grid
        if layout.tree.kind == 'quad2d':
            top, left = layout.offset
            grid = leaves.unflatten(1, layout.tree.grid_sizes[0])[:, top:top + rows, left:left + cols]
        else:
            grid = leaves[:, :rows * cols].unflatten(1, (rows, cols))
            if self.order == 'snake':
                grid = _snake(grid.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        if output_fmt == 'NLC':
            return grid.flatten(1, 2)
        return grid.permute(0, 3, 1, 2).contiguous() if output_fmt == 'NCHW' else grid

    # ---- forward -----------------------------------------------------------------------------------------

    def _run_block(self, block: nn.Module, x: torch.Tensor, tree) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x, tree)
        return block(x, tree)

    def _features(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, _Layout]:
        x, layout = self._embed(x, padding_mask)
        for block in self.blocks:
            x = self._run_block(block, x, layout.tree)
        return x, layout

    def _head(self, x: torch.Tensor, layout: Optional[_Layout], pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'readout':
            x = self.readout(x, layout)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward_features(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Node features (B, N, H) of all tree nodes, leaves first (the input's order), the root last."""
        x, self._layout = self._features(x, padding_mask)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Readout over the layout of the last ``forward_features`` call (its padding masked), then the head."""
        return self._head(x, None, pre_logits)

    def forward(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x, layout = self._features(x, padding_mask)
        return self._head(x, layout)

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
        """Block outputs on the leaves, in the input's layout (``leaf_map``): NCHW / NHWC maps at reduction 1 for
        image input, NLC for any input. The model has no final norm. The final output is forward_features'."""
        if output_fmt not in ('NCHW', 'NHWC', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW', 'NHWC' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        x, layout = self._embed(x, padding_mask)
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        intermediates = []
        for i, block in enumerate(blocks):
            x = self._run_block(block, x, layout.tree)
            if i in take_indices:
                intermediates.append(self.leaf_map(x, layout, output_fmt))
        if intermediates_only:
            return intermediates
        self._layout = layout
        return x, intermediates

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_head:
            self.reset_classifier(0, '')
        return take_indices


def _span_means(leaves: torch.Tensor, tree: ops.MyoTree) -> torch.Tensor:
    """Mean of the leaves under every virtual node: (B, L, dim) -> (B, N - L, dim). 1-D trees pool groups of k
    consecutive nodes, quadtrees 2x2 blocks of the grid; ragged ends count their real children only."""
    sums, counts, out = leaves, torch.ones_like(leaves[:1, :, :1]), []
    if tree.kind == 'quad2d':
        sums = sums.unflatten(1, tree.grid_sizes[0])
        counts = counts.unflatten(1, tree.grid_sizes[0])

    def pool(t, size):
        if tree.kind == 'quad2d':
            rows, cols = size
            t = F.pad(t, (0, 0, 0, 2 * cols - t.shape[2], 0, 2 * rows - t.shape[1]))
            return t.unflatten(2, (cols, 2)).unflatten(1, (rows, 2)).sum((2, 4))
        t = F.pad(t, (0, 0, 0, size * tree.arity - t.shape[1]))
        return t.unflatten(1, (size, tree.arity)).sum(2)

    for size in (tree.grid_sizes[1:] if tree.kind == 'quad2d' else tree.level_sizes[1:]):
        sums, counts = pool(sums, size), pool(counts, size)
        mean = sums / counts
        out.append(mean.flatten(1, 2) if tree.kind == 'quad2d' else mean)
    return torch.cat(out, dim=1)


class MyoPix(MyoSequence):
    """The paper's pixel model on a ceil quadtree (docs/myosotis.md, 'Backbones'):
    :class:`MyoSequence` with ``order="morton"``, ``tree="ceil"`` (no padding: any H x W works) and
    ``img_size`` for the level embeddings; the S5 sCIFAR defaults (H 512, depth 6, P 384, J 3, lecun_normal C).
    """

    def __init__(self, img_size: Union[int, Tuple[int, int]] = 32, in_chans: int = 3, num_classes: int = 10,
                 embed_dim: int = 512, depth: int = 6, state_size: int = 384, blocks: int = 3, dropout: float = 0.1,
                 C_init: str = 'lecun_normal', tree: str = 'ceil', **kwargs):
        for name in ('order', 'arity', 'vocab_size', 'seq_len'):
            if name in kwargs:
                raise TypeError(f'MyoPix fixes {name} (a quadtree over the pixels); use MyoSequence to change it')
        super().__init__(in_chans=in_chans, num_classes=num_classes, img_size=img_size, arity=4, tree=tree,
                         order='morton', embed_dim=embed_dim, depth=depth, state_size=state_size, blocks=blocks,
                         dropout=dropout, C_init=C_init, **kwargs)


# ---- S5 optimizer groups ---------------------------------------------------------------------------------------


_OPT_CONFIGS = ('standard', 'BandCdecay', 'BfastandCdecay', 'noBCdecay')


def myo_param_groups(
        model: nn.Module,
        lr: float,
        lr_ssm: float,
        weight_decay: float = 0.,
        opt_config: str = 'standard',
) -> List[Dict[str, Any]]:
    """S5's optimizer groups (docs/myosotis.md 'S5 settings', S5 ``train_helpers.create_train_state``), any Myo model:

        "ssm"       lr_ssm, no weight decay: Λ^re, Λ^im, log Δ of every MyoSSM and all norm parameters, plus
                    B̃ under ``standard`` and B̃, C̃, D under ``noBCdecay``;
        "ssm_decay" lr_ssm with weight decay: B̃ under ``BandCdecay``;
        "regular"   lr with weight decay: everything else (C̃, D, encoder, GLU, head, level embeddings; B̃ under
                    ``BfastandCdecay``). As in S5 (optax adamw), biases decay too.

    Same output as ``essm_param_groups``: a list of ``dict(params, lr, weight_decay, name)``, empty groups left out,
    for ``torch.optim.AdamW`` (Adam on the "ssm" group is AdamW with weight decay 0).
    """
    choice('opt_config', opt_config, _OPT_CONFIGS)
    ssm_extra = {'standard': ('B',), 'noBCdecay': ('B', 'C', 'D')}.get(opt_config, ())
    role = {}
    for module_name, module in model.named_modules():
        prefix = f'{module_name}.' if module_name else ''
        if isinstance(module, MyoSSM):
            for p in module.no_weight_decay_names + ssm_extra:
                role[prefix + p] = 'ssm'
            if opt_config == 'BandCdecay':
                role[prefix + 'B'] = 'ssm_decay'
        elif isinstance(module, (nn.BatchNorm1d, nn.LayerNorm)):
            for p, _ in module.named_parameters(recurse=False):
                role[prefix + p] = 'ssm'
    settings = {'ssm': (lr_ssm, 0.), 'ssm_decay': (lr_ssm, weight_decay), 'regular': (lr, weight_decay)}
    return param_groups(model, lambda name, _: role.get(name, 'regular'), settings)


# ---- hierarchical backbone ---------------------------------------------------------------------------------


@torch.fx.wrap
@register_notrace_function  # torch.fx: the padding depends on the input size
def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Zero-pad an NCHW map on the right / bottom to a multiple of the conv stride (ceil output size)."""
    pad_h, pad_w = -x.shape[-2] % multiple, -x.shape[-1] % multiple
    return F.pad(x, (0, pad_w, 0, pad_h)) if pad_h or pad_w else x


class MyoNetBlock(nn.Module):
    """``x += DropPath(MyoMixer2d(LN(x))); x += DropPath(MLP(LN(x)))`` on channels-last maps (docs/myosotis.md,
    'Backbones')."""

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
            x = self.downsample(pad_to_multiple(x.permute(0, 3, 1, 2), 2)).permute(0, 2, 3, 1)
            x = self.downsample_norm(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint_seq(self.blocks, x)
        return self.blocks(x)


class MyoNet(nn.Module):
    """Hierarchical Myo backbone (docs/myosotis.md 'Backbones', [X]): NCHW image -> 4 stages at strides 4/8/16/32.

    Args:
        dims, depths: stage widths and depths. mlp_ratio: MLP expansion [D: 4].
        drop_path_rate: stochastic depth, linear over blocks. drop_rate: dropout before the classifier.
        heads_ratio: complex Myo heads per channel, P_c = dim * heads_ratio [D: 0.5, P_c = C // 2 as in MyoMixer2d].
        ssm_blocks: HiPPO-N blocks J per mixer [D: 1]. dwconv: depthwise 3x3 conv in the mixer [D: True].
        shift: every odd block of a stage rolls its map before the solve (MyoMixer2d ``shift``) [D: False].
        output_fmt: layout of ``forward_features`` (and what ``forward_head`` takes): "NCHW" (timm's default for
            CNN-like models, as ConvNeXt) or "NHWC" (channels last, the stages' own layout, as timm's MambaOut)
            [D: "NCHW"]. ``forward_intermediates`` takes its own ``output_fmt``.
        C_init, dt_min, dt_max, conj_sym, level_step, real, coupling: MyoSSM options (docs/myosotis.md, 'Edge weights')
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
            output_fmt: str = 'NCHW',
            device=None,
            dtype=None,
            **ssm_kwargs,
    ):
        super().__init__()
        if output_fmt not in ('NCHW', 'NHWC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        self.output_fmt = output_fmt
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
        self.head = new_head(None, dims[-1], num_classes)
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
        self.head = new_head(self.stem.weight, self.num_features, num_classes, init=self._init_weights,
                             training=self.training)

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        x = pad_to_multiple(check_myo_image(x, self.in_chans), 4)
        return self.stem_norm(self.stem(x).permute(0, 2, 3, 1))  # NHWC

    def _to_output_fmt(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2) if self.output_fmt == 'NCHW' else x

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) -> normed last-stage map, (B, C, ceil(H/32), ceil(W/32)) (``output_fmt`` NCHW) or
        (B, ceil(H/32), ceil(W/32), C) (NHWC)."""
        return self._to_output_fmt(self.norm(self.stages(self._stem(x))))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Takes ``forward_features``' layout (``output_fmt``)."""
        if self.global_pool == 'avg':
            x = x.mean((2, 3) if self.output_fmt == 'NCHW' else (1, 2))
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
        """Stage outputs (NCHW by default); ``norm`` applies the final norm to the last stage only. The final
        output is ``forward_features``' (in the model's ``output_fmt``)."""
        out = stage_intermediates(self.stages, self.norm, self._stem(x), indices, norm, stop_early,
                                  output_fmt, intermediates_only)
        return out if intermediates_only else (self._to_output_fmt(out[0]), out[1])

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


_mnist = dict(num_classes=10, input_size=(1, 28, 28), pool_size=None, crop_pct=1.0, mean=(0.,), std=(1.,),
              first_conv='encoder')  # S4/S5 loaders: pixels in [0, 1]
_cifar = dict(num_classes=10, input_size=(3, 32, 32), pool_size=None, crop_pct=1.0, mean=CIFAR10_MEAN,
              std=CIFAR10_STD, first_conv='encoder')
_pathfinder = dict(num_classes=2, pool_size=None, crop_pct=1.0, mean=(0.,), std=(1.,), first_conv='encoder')

default_cfgs = generate_default_cfgs({
    'myopix_zcifar': _cfg(**_cifar),
    'myo_smnist': _cfg(**_mnist),
    'myo_zmnist': _cfg(**_mnist),
    'myo_scifar': _cfg(**_cifar),
    'myo_zcifar': _cfg(**_cifar),
    # token ids (B, 2000): timm's input_size must be (C, H, W), hence a 1 x 2000 "image" of one channel
    'myo_listops': _cfg(num_classes=10, input_size=(1, 1, 2000), pool_size=None, crop_pct=1.0, mean=None, std=None,
                        first_conv='encoder'),
    'myo_pathfinder': _cfg(input_size=(1, 32, 32), **_pathfinder),
    'myo_pathx': _cfg(input_size=(1, 128, 128), **_pathfinder),
    'myonet_tiny': _cfg(),
    'myonet_small': _cfg(),
    'myonet_base': _cfg(),
})

# The training settings of the sequence models: S5's per-task configurations (docs/myosotis.md 'S5 settings'; the
# Myo paper gives none), for the recipes: batch, epochs, lr / lr_ssm / weight_decay / opt_config for
# ``myo_param_groups``, and the schedule (1 warm-up epoch, then per-step cosine decay to 0). Paper figures (test
# accuracy %, Tables 3-4).
_S5_SCHEDULE = 'linear warm-up 1 epoch, then per-step cosine to 0'
PAPER_RECIPES: Dict[str, Dict[str, Any]] = {
    'myo_smnist': dict(batch_size=50, epochs=150, lr=0.008, lr_ssm=0.002, weight_decay=0.01, opt_config='standard',
                       schedule=_S5_SCHEDULE, paper=99.2),
    'myo_zmnist': dict(batch_size=50, epochs=150, lr=0.008, lr_ssm=0.002, weight_decay=0.01, opt_config='standard',
                       schedule=_S5_SCHEDULE, paper=99.7),
    'myo_scifar': dict(batch_size=50, epochs=250, lr=0.0045, lr_ssm=0.001, weight_decay=0.07,
                       opt_config='BfastandCdecay', schedule=_S5_SCHEDULE, paper=92.6),
    'myo_zcifar': dict(batch_size=50, epochs=250, lr=0.0045, lr_ssm=0.001, weight_decay=0.07,
                       opt_config='BfastandCdecay', schedule=_S5_SCHEDULE, paper=93.4),
    'myo_listops': dict(batch_size=50, epochs=40, lr=0.003, lr_ssm=0.001, weight_decay=0.04,
                        opt_config='BfastandCdecay', schedule=_S5_SCHEDULE, paper=59.5),
    'myo_pathfinder': dict(batch_size=64, epochs=200, lr=0.0045, lr_ssm=0.0009, weight_decay=0.03,
                           opt_config='standard', schedule=_S5_SCHEDULE, paper=86.1),
    'myo_pathx': dict(batch_size=32, epochs=75, lr=0.0018, lr_ssm=0.0006, weight_decay=0.06, opt_config='BandCdecay',
                      schedule=_S5_SCHEDULE, paper=85.7),
}


@register_model
def myopix_zcifar(pretrained: bool = False, **kwargs) -> MyoPix:
    """The paper's zCIFAR model (Table 4: 93.4 %): S5 sCIFAR config (docs/myosotis.md, 'S5 settings'), ceil quadtree
    over the pixels (any size)."""
    model_args = dict(img_size=32, num_classes=10, embed_dim=512, depth=6, state_size=384, blocks=3, dropout=0.1,
                      C_init='lecun_normal', glu='half_glu1')
    return _create(MyoPix, 'myopix_zcifar', pretrained, **dict(model_args, **kwargs))


# S5 per-task architectures (docs/myosotis.md, 'S5 settings'): depth, H, P, J, dropout, C_init, GLU, BatchNorm
# momentum (PyTorch), dt_min
S5_MNIST = dict(depth=4, embed_dim=96, state_size=128, blocks=1, dropout=0.1, C_init='trunc_standard_normal',
                 glu='half_glu1', bn_momentum=0.05)
S5_CIFAR = dict(depth=6, embed_dim=512, state_size=384, blocks=3, dropout=0.1, C_init='lecun_normal',
                 glu='half_glu1', bn_momentum=0.05)


def _sequence(variant: str, pretrained: bool, model_args: Dict[str, Any], kwargs: Dict[str, Any]) -> MyoSequence:
    return _create(MyoSequence, variant, pretrained, **dict(model_args, **kwargs))


@register_model
def myo_smnist(pretrained: bool = False, **kwargs) -> MyoSequence:
    """sMNIST (Table 4: 99.2 %): snake-order pixels, perfect 4-ary tree (784 -> 1024 leaves, 1365 nodes)."""
    model_args = dict(in_chans=1, img_size=28, arity=4, order='snake', **S5_MNIST)
    return _sequence('myo_smnist', pretrained, model_args, kwargs)


@register_model
def myo_zmnist(pretrained: bool = False, **kwargs) -> MyoSequence:
    """zMNIST (Table 4: 99.7 %): Morton-order pixels = quadtree, image zero-padded to 32 x 32 (2 px a side)."""
    model_args = dict(in_chans=1, img_size=28, arity=4, order='morton', **S5_MNIST)
    return _sequence('myo_zmnist', pretrained, model_args, kwargs)


@register_model
def myo_scifar(pretrained: bool = False, **kwargs) -> MyoSequence:
    """sCIFAR (Table 4: 92.6 %): snake-order RGB pixels, perfect 4-ary tree over 1024 leaves."""
    model_args = dict(in_chans=3, img_size=32, arity=4, order='snake', **S5_CIFAR)
    return _sequence('myo_scifar', pretrained, model_args, kwargs)


@register_model
def myo_zcifar(pretrained: bool = False, **kwargs) -> MyoSequence:
    """zCIFAR (Table 4: 93.4 %): Morton-order pixels = quadtree over 32 x 32 (the ``myopix_zcifar`` network with
    the perfect-tree option; on 32 x 32 inputs the two are the same function)."""
    model_args = dict(in_chans=3, img_size=32, arity=4, order='morton', **S5_CIFAR)
    return _sequence('myo_zcifar', pretrained, model_args, kwargs)


@register_model
def myo_listops(pretrained: bool = False, **kwargs) -> MyoSequence:
    """ListOps (Table 3: 59.5 %): token ids (S5 in_dim 20) -> nn.Embedding, binary tree, 2000 -> 2048 leaves
    (docs/myosotis.md, 'Padding'); depth 8, H 128, P 16, J 8, half_glu2, lecun_normal C, no dropout."""
    model_args = dict(in_chans=1, vocab_size=20, seq_len=2000, arity=2, depth=8, embed_dim=128, state_size=16,
                      blocks=8, dropout=0.0, C_init='lecun_normal', glu='half_glu2', bn_momentum=0.05)
    return _sequence('myo_listops', pretrained, model_args, kwargs)


@register_model
def myo_pathfinder(pretrained: bool = False, **kwargs) -> MyoSequence:
    """Pathfinder (Table 3: 86.1 %): 32 x 32 grey pixels in LRA's row-major order (docs/myosotis.md, 'Input
    orders'), binary tree over 1024 leaves; depth 6, H 192, P 256, J 8, dropout 0.05, BatchNorm momentum 0.1
    (flax 0.9)."""
    model_args = dict(in_chans=1, img_size=32, arity=2, order='raster', depth=6, embed_dim=192, state_size=256,
                      blocks=8, dropout=0.05, C_init='trunc_standard_normal', glu='half_glu1', bn_momentum=0.1)
    return _sequence('myo_pathfinder', pretrained, model_args, kwargs)


@register_model
def myo_pathx(pretrained: bool = False, **kwargs) -> MyoSequence:
    """Path-X (Table 3: 85.7 %): 128 x 128 grey pixels, row-major, binary tree over 16384 leaves (32767 nodes);
    depth 6, H 128, P 256, J 16, complex_normal C, dt_min 1e-4, BatchNorm momentum 0.1."""
    model_args = dict(in_chans=1, img_size=128, arity=2, order='raster', depth=6, embed_dim=128, state_size=256,
                      blocks=16, dropout=0.0, C_init='complex_normal', glu='half_glu1', bn_momentum=0.1, dt_min=1e-4)
    return _sequence('myo_pathx', pretrained, model_args, kwargs)


@register_model
def myonet_tiny(pretrained: bool = False, **kwargs) -> MyoNet:
    """MyoNet-T (docs/myosotis.md 'Backbones', [X]): dims (96, 192, 384, 768), depths (2, 2, 6, 2), drop path 0.2."""
    model_args = dict(dims=(96, 192, 384, 768), depths=(2, 2, 6, 2), drop_path_rate=0.2)
    return _create(MyoNet, 'myonet_tiny', pretrained, **dict(model_args, **kwargs))


@register_model
def myonet_small(pretrained: bool = False, **kwargs) -> MyoNet:
    """MyoNet-S (docs/myosotis.md 'Backbones', [X]): dims (96, 192, 384, 768), depths (2, 2, 18, 2), drop path 0.3."""
    model_args = dict(dims=(96, 192, 384, 768), depths=(2, 2, 18, 2), drop_path_rate=0.3)
    return _create(MyoNet, 'myonet_small', pretrained, **dict(model_args, **kwargs))


@register_model
def myonet_base(pretrained: bool = False, **kwargs) -> MyoNet:
    """MyoNet-B (docs/myosotis.md 'Backbones', [X]): dims (128, 256, 512, 1024), depths (2, 2, 18, 2), drop path 0.5."""
    model_args = dict(dims=(128, 256, 512, 1024), depths=(2, 2, 18, 2), drop_path_rate=0.5)
    return _create(MyoNet, 'myonet_base', pretrained, **dict(model_args, **kwargs))
