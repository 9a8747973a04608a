"""Myosotis tree solve x = T⁻¹u (spec myosotis.md §2, §6.1), backed by ssm_plugins._C."""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from torch.utils.flop_counter import register_flop_formula

from . import _backend, _validate
from .reference import myo as reference

_OP = "myo_solve_fwd"
_COMPLEX_DTYPES = (torch.complex64, torch.complex128)
_COUPLINGS = ("hermitian", "skew")
_VIRTUAL = ("persistent", "transient")


class MyoTree(NamedTuple):
    """A ceil k-ary 1-D tree over consecutive leaves, stored level-major (leaves first, root last)."""

    level_sizes: tuple  # n_1 (leaves) … n_D = 1 (root); n_{ℓ+1} = ⌈n_ℓ / k⌉
    parent: torch.Tensor  # (N,) int64: node j of level ℓ has parent ⌊j/k⌋ of level ℓ+1; -1 at the root
    level: torch.Tensor  # (N,) int64: 0-based level of each node (0 = leaves, D-1 = root)


@functools.lru_cache(maxsize=64)
def _kary_tree(num_leaves: int, arity: int, device: torch.device) -> MyoTree:
    sizes = tuple(reference.kary_level_sizes(num_leaves, arity))
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    parent = torch.full((offsets[-1],), -1, dtype=torch.long)
    for level, n in enumerate(sizes[:-1]):
        parent[offsets[level]:offsets[level + 1]] = offsets[level + 1] + torch.arange(n) // arity
    level = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return MyoTree(sizes, parent.to(device), level.to(device))


def myo_tree(num_leaves: int, arity: int, device=None) -> MyoTree:
    """The ceil ``arity``-ary tree over ``num_leaves`` leaves that ``myo_solve(..., arity=k)`` uses.

    Its node count N = sum(level_sizes) is the node dimension of u and x in persistent mode.
    """
    if not isinstance(num_leaves, int) or num_leaves < 1:
        raise ValueError(f"num_leaves must be a positive int, got {num_leaves!r}")
    if not isinstance(arity, int) or isinstance(arity, bool) or arity < 2:
        raise ValueError(f"arity must be an int >= 2, got {arity!r}")
    return _kary_tree(num_leaves, arity, torch.device(device if device is not None else "cpu"))


def _tensor(name: str, value, ndims: tuple, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {what}, got {type(value).__name__}")
    if value.dim() not in ndims:
        raise ValueError(f"{name} must have shape {what}, got {tuple(value.shape)}")
    if value.dtype not in _validate.FLOAT_DTYPES + _COMPLEX_DTYPES:
        raise ValueError(f"{name} must be float32, float64, float16, bfloat16, complex64 or complex128, "
                         f"got {value.dtype}")
    return value


def _general_parent(parent, num_nodes: int, device) -> torch.Tensor:
    if not isinstance(parent, torch.Tensor) or parent.dim() != 1 or parent.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"parent must be an int64 tensor of shape (N,), got "
                         f"{tuple(parent.shape) if isinstance(parent, torch.Tensor) else type(parent).__name__}")
    if parent.numel() != num_nodes:
        raise ValueError(f"parent must have one entry per node of u (N={num_nodes}), got {parent.numel()}")
    parent = parent.to(device=device, dtype=torch.long)
    node = torch.arange(num_nodes, device=device)
    if not bool(((parent == -1) | ((parent > node) & (parent < num_nodes))).all()):
        raise ValueError("parent must be level-major: parent[v] > v (children before parents, root last) "
                         "or -1 at roots")
    return parent


def _extend_leaf_mask(leaf_mask: torch.Tensor, tree: MyoTree, arity: int) -> torch.Tensor:
    """A virtual node is valid when its span holds at least one valid leaf (spec §2.7)."""
    levels = [leaf_mask]
    for n_parent in tree.level_sizes[1:]:
        children = torch.nn.functional.pad(levels[-1], (0, n_parent * arity - levels[-1].shape[1]))
        levels.append(children.reshape(children.shape[0], n_parent, arity).any(-1))
    return torch.cat(levels, dim=1)


def _normalise(u, b, arity, parent, node_mask, coupling, virtual):
    """Validate user input (ValueError naming the argument) and bring it to the raw op's contract:
    (u (batch, N, C), b (1 or batch, Nb, C), parent (N,), b_index (N,) or None, skew) plus what the
    reference pyramid and the output slicing need."""
    if coupling not in _COUPLINGS:
        raise ValueError(f"coupling must be one of {_COUPLINGS}, got {coupling!r}")
    if virtual not in _VIRTUAL:
        raise ValueError(f"virtual must be one of {_VIRTUAL}, got {virtual!r}")
    u = _tensor("u", u, (3,), "(batch, N, channels) (persistent) or (batch, L, channels) (transient)")
    batch, nodes_in, channels = u.shape
    if nodes_in == 0:
        raise ValueError("u must hold at least one node (dim 1 of (batch, N, channels) is 0)")
    if (arity is None) == (parent is None):
        raise ValueError("give exactly one of arity (ceil k-ary tree) and parent (general tree)")
    tree = None
    if arity is not None:
        if not isinstance(arity, int) or isinstance(arity, bool) or arity < 2:
            raise ValueError(f"arity must be an int >= 2, got {arity!r}")
        if virtual == "transient":
            num_leaves = nodes_in
        else:
            try:
                num_leaves = reference.kary_num_leaves(nodes_in, arity)
            except ValueError:
                raise ValueError(f"u has {nodes_in} nodes, which is not the node count of a ceil {arity}-ary "
                                 "tree (see myo_tree(L, arity)); pass virtual='transient' for leaves only")
        tree = myo_tree(num_leaves, arity, u.device)
        parent = tree.parent
    else:
        if virtual == "transient":
            raise ValueError("virtual='transient' needs arity (a k-ary tree whose leaves come first)")
        parent = _general_parent(parent, nodes_in, u.device)
    num_nodes = parent.numel()

    b = _tensor("b", b, (2, 3), "(channels, D-1) level-shared or (batch or 1, N, channels) per node")
    level_shared = b.dim() == 2
    if level_shared:
        if tree is None:
            raise ValueError("b of shape (channels, D-1) (level-shared) needs arity; with parent, pass per-node "
                             "b of shape (batch or 1, N, channels)")
        depth = len(tree.level_sizes)
        if tuple(b.shape) != (channels, depth - 1):
            raise ValueError(f"b must have shape (channels, D-1) = ({channels}, {depth - 1}) for this tree, "
                             f"got {tuple(b.shape)}")
    elif b.shape[0] not in (1, batch) or b.shape[1] != num_nodes or b.shape[2] != channels:
        raise ValueError(f"b must have shape (batch or 1, N, channels) with batch={batch}, N={num_nodes}, "
                         f"channels={channels}, got {tuple(b.shape)}")
    _validate.same_device(u=u, b=b)

    double = u.dtype in (torch.float64, torch.complex128)
    if u.is_complex() or b.is_complex():
        u = u.to(torch.complex128 if double else torch.complex64)
        b = b.to(u.dtype)
    else:
        b = b.to(torch.float64 if double else torch.float32)

    if virtual == "transient":  # virtual inputs are 0; their outputs are dropped by the caller
        u = torch.cat([u, u.new_zeros(batch, num_nodes - nodes_in, channels)], dim=1)

    pyramid_b = b if level_shared else None
    if level_shared:  # row ℓ of b_rows weights every edge from level ℓ+1 up; the root row is unused
        b_rows, b_index = torch.cat([b.transpose(0, 1), b.new_zeros(1, channels)]).unsqueeze(0), tree.level
    else:
        b_rows, b_index = b, None

    if node_mask is not None:
        if not isinstance(node_mask, torch.Tensor) or node_mask.dtype != torch.bool or node_mask.dim() != 2:
            raise ValueError("node_mask must be a bool tensor of shape (batch, N) (or (batch, L) leaves with arity)")
        leaves = tree.level_sizes[0] if tree is not None else None
        if tuple(node_mask.shape) == (batch, num_nodes):
            mask = node_mask.to(u.device)
        elif tree is not None and tuple(node_mask.shape) == (batch, leaves):
            mask = _extend_leaf_mask(node_mask.to(u.device), tree, arity)
        else:
            raise ValueError(f"node_mask must have shape (batch, N) = ({batch}, {num_nodes})"
                             + (f" or (batch, L) = ({batch}, {leaves})" if tree is not None else "")
                             + f", got {tuple(node_mask.shape)}")
        # Invalid nodes leave the tree: input 0 and both edges to parent and children cut, so their output is 0.
        connected = mask & mask[:, parent.clamp(min=0)]
        b_node = b_rows if b_index is None else b_rows[:, b_index]
        b_rows, b_index, pyramid_b = b_node * connected[..., None], None, None
        u = u * mask[..., None]
    return u, b_rows, parent, b_index, coupling == "skew", pyramid_b, tree, nodes_in


def myo_solve(u, b, arity=None, *, parent=None, node_mask=None, coupling="hermitian", virtual="persistent"):
    """Myosotis layer solve x = T⁻¹u on a tree (spec myosotis.md §2.1–2.3, §6.1), linear in the node count.

    T is the scalar, gauge-fixed tree matrix of the paper's experiments: 1 on the diagonal, b_v at
    (v, parent v) and C_v at (parent v, v), with C_v = conj(b_v) (``coupling="hermitian"``, T Hermitian)
    or C_v = -conj(b_v) (``coupling="skew"``, ablation A4). Up-sweep leaves → root, down-sweep back.
    Nodes are stored level-major: leaves first, then each virtual level, the root last.

    Args:
        u: (batch, N, channels) inputs on all N nodes (``virtual="persistent"``), or (batch, L, channels)
            on the leaves only (``virtual="transient"``: virtual inputs are 0 and only leaves are returned;
            needs ``arity``). Real float32/float64/float16/bfloat16 or complex64/complex128. Channels are
            independent heads.
        b: edge weights, coupling each node to its parent. Selected by shape:
            (channels, D-1): level-shared "pyramid" form (needs ``arity``): b[c, ℓ-1] weights every edge
                from level ℓ to ℓ+1 (levels 1 = leaves … D = root, D = len(myo_tree(L, k).level_sizes)).
            (batch or 1, N, channels): general per-node form: b[:, v] weights edge (v, parent v); the
                root's entry is ignored. Batch 1 is shared by the batch.
            For a stable solve keep |b| <= 1/(k_max + 1) (strict diagonal dominance, spec §2.8).
        arity: k >= 2, for the ceil k-ary 1-D tree over consecutive leaves (myo_tree(L, k)); any L >= 1.
        parent: (N,) int64, instead of ``arity``, for any tree (or forest) stored level-major:
            parent[v] > v, -1 at roots. Needs per-node b.
        node_mask: (batch, N) bool, or (batch, L) leaf mask with ``arity`` (a virtual node is valid if a
            valid leaf lies under it). Invalid nodes get input 0, are cut from the tree and output 0.
        coupling: "hermitian" (default, the paper) or "skew".
        virtual: "persistent" (default) or "transient", see u.
    Returns:
        x with u's shape (batch, N or L, channels); u's dtype for real input and b, else complex64
        (complex128 for float64/complex128 u). Accumulates in float32 (float64 for double input).

    The backward pass is one more solve (spec §2.9): grad_u = T⁻ᴴ grad_x, which for the Hermitian T is
    the same solve, and grad_b_v = -(grad_u_v conj(x_par v) + s conj(grad_u_par v) x_v).
    """
    u, b_rows, parent, b_index, skew, pyramid_b, tree, nodes_in = _normalise(
        u, b, arity, parent, node_mask, coupling, virtual)
    if _backend.use_kernel(_OP, u):
        x = torch.ops.ssm_plugins.myo_solve_fwd(u, b_rows, parent, b_index, skew)
    elif pyramid_b is not None:
        x = reference.myo_solve_pyramid(u, pyramid_b, arity, skew=skew)
    else:
        x = reference.myo_solve(u, b_rows, parent, b_index, skew=skew)
    return x[:, :nodes_in] if virtual == "transient" else x


def myo_solve_flops(batch: int, nodes: int, channels: int, is_complex: bool, backward: bool = False) -> int:
    """Real flops of the compiled solve, per (batch, node, channel): 10 real / 26 complex for the two sweeps
    (pivot inverse, y, pivot and RHS messages, down-sweep update); the backward adds the edge gradient
    (4 real / 16 complex)."""
    per_node = (26 + (16 if backward else 0)) if is_complex else (10 + (4 if backward else 0))
    return per_node * batch * nodes * channels


# ---- autograd, fake (meta) kernels and FLOP counts for the compiled ops -----------------------------
# Registered only when the op exists (the extension may be missing).
if hasattr(torch.ops.ssm_plugins, _OP):

    @torch.library.register_fake(f"ssm_plugins::{_OP}")
    def _fwd_fake(u, b, parent, b_index, skew):
        return torch.empty_like(u)

    @torch.library.register_fake("ssm_plugins::myo_solve_bwd")
    def _bwd_fake(grad_x, x, b, parent, b_index, skew):
        return torch.empty_like(grad_x), b.new_empty((grad_x.shape[0], b.shape[1], b.shape[2]))

    def _setup_context(ctx, inputs, output):
        u, b, parent, b_index, skew = inputs
        ctx.save_for_backward(output, b, parent, b_index)
        ctx.skew = skew

    def _backward(ctx, grad_x):
        # The adjoint solve (spec §2.9) in the compiled myo_solve_bwd: grad_u = T⁻ᴴ grad_x plus grad_b.
        x, b, parent, b_index = ctx.saved_tensors
        grad_u, grad_b = torch.ops.ssm_plugins.myo_solve_bwd(grad_x, x, b, parent, b_index, ctx.skew)
        if grad_b.shape[0] != b.shape[0]:  # b shared by the batch
            grad_b = grad_b.sum(0, keepdim=True)
        return grad_u, grad_b, None, None, None

    torch.library.register_autograd(f"ssm_plugins::{_OP}", _backward, setup_context=_setup_context)

    @register_flop_formula(getattr(torch.ops.ssm_plugins, _OP), get_raw=True)
    def _fwd_flops(u, b, parent, b_index, skew, out_val=None, **kwargs):
        return myo_solve_flops(*u.shape, u.is_complex())

    @register_flop_formula(torch.ops.ssm_plugins.myo_solve_bwd, get_raw=True)
    def _bwd_flops(grad_x, x, b, parent, b_index, skew, out_val=None, **kwargs):
        return myo_solve_flops(*grad_x.shape, grad_x.is_complex(), backward=True)
