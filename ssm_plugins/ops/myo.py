"""Myosotis tree solve x = T⁻¹u (Myosotis, arXiv 2509.20503, Sec. 3.2-3.3, App. A; docs/myosotis.md), backed by
ssm_plugins._C."""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from torch.utils.flop_counter import register_flop_formula

from . import _backend, _validate
from .reference import myo as reference

_OP = "myo_solve_fwd"
_BWD = "myo_solve_bwd"
_COMPILED = hasattr(torch.ops.ssm_plugins, _OP) and hasattr(torch.ops.ssm_plugins, _BWD)
_COMPLEX_DTYPES = (torch.complex64, torch.complex128)
_COUPLINGS = ("hermitian", "skew")
_VIRTUAL = ("persistent", "transient")
_LEVEL_KINDS = ("kary1d", "quad2d")  # trees stored level by level: reference.myo_solve_levels applies
class MyoTree(NamedTuple):
    """A rooted tree (or forest) stored level-major: leaves (level 1) first, the root(s) last; every
    node's parent comes after it. Build one with ``myo_tree``, ``myo_quadtree`` or ``myo_tree_from_parent``."""

    kind: str  # "kary1d" | "quad2d" | "general"
    arity: int  # k (kary1d), 4 (quad2d), the largest child count (general): k_max of docs/myosotis.md, 'Edge weights'
    level_sizes: tuple  # n_1 (leaves) … n_D
    parent: torch.Tensor  # (N,) int64, -1 at roots
    level: torch.Tensor  # (N,) int64, 0-based level (0 = leaves, D-1 = top): a node's parent is one level up
    grid_sizes: tuple  # quad2d: (H_ℓ, W_ℓ) of each level, raster order within a level; else ()


def _from_levels(kind, arity: int, parent: torch.Tensor, sizes, grid_sizes=(), device=None) -> MyoTree:
    """The tree from its parent index and its level sizes (Python ints); the index tensors move to ``device``
    (default: stay)."""
    sizes = tuple(int(n) for n in sizes)
    level = torch.cat([torch.full((n,), i, dtype=torch.long, device=parent.device) for i, n in enumerate(sizes)])
    if device is not None:
        parent, level = parent.to(device), level.to(device)
    return MyoTree(kind, arity, sizes, parent, level, tuple(grid_sizes))


# The k-ary and quadtree builders make their integer index tensors on the CPU explicitly (device='cpu'), so a
# model built under ``with torch.device('meta')`` (timm's low-memory construction) still gets a real tree. They
# read no tensor values (level sizes are Python ints, every tensor has a static size), so torch.compile traces
# them with fullgraph=True; eager calls are cached per (size, device).
_CPU = torch.device("cpu")


def _build_kary_tree(num_leaves: int, arity: int, device: torch.device) -> MyoTree:
    sizes = reference.kary_level_sizes(num_leaves, arity)
    parents = [offset + sizes[level] + torch.arange(n, device=_CPU) // arity  # node j of level ℓ -> ⌊j/k⌋ above
               for level, (n, offset) in enumerate(zip(sizes[:-1], _offsets(sizes)))]
    parent = torch.cat(parents + [torch.full((1,), -1, dtype=torch.long, device=_CPU)])
    return _from_levels("kary1d", arity, parent, sizes, device=device)


def _build_quadtree(height: int, width: int, device: torch.device) -> MyoTree:
    grids = reference.quad_grid_sizes(height, width)
    parents, offset = [], 0
    for (rows, cols), (up_rows, up_cols) in zip(grids, grids[1:]):  # (i, j) -> (⌊i/2⌋, ⌊j/2⌋) one level up
        i = torch.arange(rows, device=_CPU)[:, None] // 2
        j = torch.arange(cols, device=_CPU)[None, :] // 2
        parents.append((offset + rows * cols + i * up_cols + j).flatten())
        offset += rows * cols
    parent = torch.cat(parents + [torch.full((1,), -1, dtype=torch.long, device=_CPU)])
    return _from_levels("quad2d", 4, parent, [r * c for r, c in grids], grids, device=device)


def _offsets(sizes):
    """Start index of every level in level-major storage."""
    out = [0]
    for n in sizes[:-1]:
        out.append(out[-1] + n)
    return out


_kary_tree = functools.lru_cache(maxsize=64)(_build_kary_tree)
_quadtree = functools.lru_cache(maxsize=64)(_build_quadtree)


def _tree(build, cached, *sizes, device):
    """``build(*sizes, device)``: traced under torch.compile; in eager code from its cache, filled with normal
    tensors even under inference_mode (later calls may be recorded by autograd)."""
    device = torch.device(device if device is not None else "cpu")
    if torch.compiler.is_compiling():
        return build(*sizes, device)
    with _backend.normal_tensors():
        return cached(*sizes, device)


def myo_tree(num_leaves: int, arity: int, device=None) -> MyoTree:
    """Ceil k-ary 1-D tree over ``num_leaves`` consecutive leaves (docs/myosotis.md, 'Ceil trees'): n_{ℓ+1} = ⌈n_ℓ/k⌉,
    node j of level ℓ has parent ⌊j/k⌋ of level ℓ+1. Any L >= 1 (the last node of a level may have
    fewer than k children). N = sum(level_sizes) is the node dimension of u in persistent mode."""
    if not isinstance(num_leaves, int) or num_leaves < 1:
        raise ValueError(f"num_leaves must be a positive int, got {num_leaves!r}")
    if not isinstance(arity, int) or isinstance(arity, bool) or arity < 2:
        raise ValueError(f"arity must be an int >= 2, got {arity!r}")
    return _tree(_build_kary_tree, _kary_tree, num_leaves, arity, device=device)


def myo_quadtree(height: int, width: int, device=None) -> MyoTree:
    """Ceil quadtree over an H×W grid (docs/myosotis.md, 'Ceil trees' and 'Level-shared fast path'): each level
    is a grid stored in raster order, (⌈H/2⌉, ⌈W/2⌉) above (H, W), down to a 1×1 root. Leaves are the pixels in
    raster order, so a (batch, H, W, channels) map flattened to (batch, H·W, channels) is the leaf level."""
    height, width = _validate.traced_int(height), _validate.traced_int(width)
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return _tree(_build_quadtree, _quadtree, height, width, device=device)


def myo_tree_from_parent(parent: torch.Tensor) -> MyoTree:
    """Any tree or forest given by parent indices in level-major storage: parent[v] > v, -1 at roots.
    Levels count down from the top (roots of the deepest tree are level D, a node's parent is one level
    up; docs/myosotis.md, 'Storage order'); level-shared b then has one weight per (channel, level)."""
    if not isinstance(parent, torch.Tensor) or parent.dim() != 1 or parent.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"parent must be an int64 tensor of shape (N,), got "
                         f"{tuple(parent.shape) if isinstance(parent, torch.Tensor) else type(parent).__name__}")
    if parent.numel() == 0:
        raise ValueError("parent must hold at least one node")
    parent = parent.long()
    num_nodes = parent.numel()
    node = torch.arange(num_nodes, device=parent.device)
    if not bool(((parent == -1) | ((parent > node) & (parent < num_nodes))).all()):
        raise ValueError("parent must be level-major: parent[v] > v (children before parents, roots last) "
                         "or -1 at roots")
    depth, has_parent = torch.zeros_like(parent), parent >= 0
    while True:  # settles after (tree height + 1) passes
        deeper = torch.where(has_parent, depth[parent.clamp(min=0)] + 1, 0)
        if torch.equal(deeper, depth):
            break
        depth = deeper
    level = depth.max() - depth
    children = torch.bincount(parent[has_parent], minlength=num_nodes) if bool(has_parent.any()) else depth
    return MyoTree("general", int(children.max()), tuple(torch.bincount(level).tolist()), parent, level, ())


def _tensor(name: str, value, ndims: tuple, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {what}, got {type(value).__name__}")
    if value.dim() not in ndims:
        raise ValueError(f"{name} must have shape {what}, got {tuple(value.shape)}")
    if value.dtype not in _validate.FLOAT_DTYPES + _COMPLEX_DTYPES:
        raise ValueError(f"{name} must be float32, float64, float16, bfloat16, complex64 or complex128, "
                         f"got {value.dtype}")
    return value


def _append_zero_nodes(u: torch.Tensor, count: int) -> torch.Tensor:
    """u (batch, N, channels) with ``count`` zero nodes appended; complex u through its real view (an exported
    ONNX graph holds complex values as real pairs and has no complex zeros)."""
    if u.is_complex():
        return torch.view_as_complex(torch.nn.functional.pad(torch.view_as_real(u), (0, 0, 0, 0, 0, count)))
    return torch.nn.functional.pad(u, (0, 0, 0, count))


def _extend_leaf_mask(leaf_mask: torch.Tensor, tree: MyoTree) -> torch.Tensor:
    """A virtual node is valid when its span holds at least one valid leaf (docs/myosotis.md, 'Readout')."""
    virtual = leaf_mask.new_zeros(leaf_mask.shape[0], tree.parent.numel() - leaf_mask.shape[1])
    valid = torch.cat([leaf_mask, virtual], dim=1).to(torch.uint8)
    offsets = _offsets(tree.level_sizes)
    for level in range(len(tree.level_sizes) - 1):  # children before parents
        if tree.kind == "general":  # levels need not be contiguous
            child = torch.nonzero((tree.level == level) & (tree.parent >= 0)).flatten()
        else:  # contiguous levels: a static slice (traceable)
            child = slice(offsets[level], offsets[level] + tree.level_sizes[level])
        valid = valid.scatter_reduce(1, tree.parent[child].expand(valid.shape[0], -1), valid[:, child], "amax")
    return valid.bool()


def _resolve_tree(tree, u: torch.Tensor, virtual: str) -> MyoTree:
    nodes_in = u.shape[1]
    if isinstance(tree, MyoTree):
        expected = tree.level_sizes[0] if virtual == "transient" else tree.parent.numel()
        if nodes_in != expected:
            what = "leaves" if virtual == "transient" else "nodes"
            raise ValueError(f"u must have the tree's {expected} {what} at dim 1 (virtual={virtual!r}), "
                             f"got {nodes_in}")
        if tree.parent.device != u.device:
            tree = tree._replace(parent=tree.parent.to(u.device), level=tree.level.to(u.device))
        return tree
    if not isinstance(tree, int) or isinstance(tree, bool) or tree < 2:
        raise ValueError(f"tree must be an arity k >= 2 (ceil k-ary 1-D tree) or a MyoTree, got {tree!r}")
    if virtual == "transient":
        return myo_tree(nodes_in, tree, u.device)
    try:
        num_leaves = reference.kary_num_leaves(nodes_in, tree)
    except ValueError:
        raise ValueError(f"u has {nodes_in} nodes, which is not the node count of a ceil {tree}-ary tree "
                         "(see myo_tree(L, k)); pass virtual='transient' for leaves only") from None
    return myo_tree(num_leaves, tree, u.device)


def _normalise(u, b, tree, node_mask, coupling, virtual):
    """Validate user input (ValueError naming the argument) and bring it to the raw op's contract:
    (u (batch, N, C), b (1 or batch, Nb, C), parent (N,), b_index (N,) or None, skew), plus the tree and
    the level-shared b that the reference pyramids take."""
    if coupling not in _COUPLINGS:
        raise ValueError(f"coupling must be one of {_COUPLINGS}, got {coupling!r}")
    if virtual not in _VIRTUAL:
        raise ValueError(f"virtual must be one of {_VIRTUAL}, got {virtual!r}")
    u = _tensor("u", u, (3,), "(batch, N, channels) (persistent) or (batch, L, channels) (transient)")
    batch, nodes_in, channels = u.shape
    if nodes_in == 0:
        raise ValueError("u must hold at least one node (dim 1 of (batch, N, channels) is 0)")
    tree = _resolve_tree(tree, u, virtual)
    num_nodes, depth = tree.parent.numel(), len(tree.level_sizes)
    leaves_first = tree.kind != "general" or bool((tree.level[:tree.level_sizes[0]] == 0).all())

    b = _tensor("b", b, (2, 3), "(channels, D-1) level-shared or (batch or 1, N, channels) per node")
    level_shared = b.dim() == 2
    if level_shared and tuple(b.shape) != (channels, depth - 1):
        raise ValueError(f"b must have shape (channels, D-1) = ({channels}, {depth - 1}) for this tree, "
                         f"got {tuple(b.shape)}")
    if not level_shared and (b.shape[0] not in (1, batch) or b.shape[1:] != (num_nodes, channels)):
        raise ValueError(f"b must have shape (batch or 1, N, channels) with batch={batch}, N={num_nodes}, "
                         f"channels={channels}, got {tuple(b.shape)}")
    _validate.same_device(u=u, b=b)

    double = u.dtype in (torch.float64, torch.complex128)
    if u.is_complex() or b.is_complex():
        u = u.to(torch.complex128 if double else torch.complex64)
        b = b.to(u.dtype)
    else:
        b = b.to(torch.float64 if double else torch.float32)

    if virtual == "transient" and not leaves_first:
        raise ValueError("virtual='transient' needs a tree whose first level_sizes[0] nodes are its level-1 leaves")
    if virtual == "transient":  # virtual inputs are 0; the caller drops their outputs
        u = _append_zero_nodes(u, num_nodes - nodes_in)

    pyramid_b = b if level_shared else None
    if level_shared:  # row ℓ of b_rows weights every edge from level ℓ+1 up; the top row is unused
        b_rows, b_index = torch.cat([b.transpose(0, 1), b.new_zeros(1, channels)]).unsqueeze(0), tree.level
    else:
        b_rows, b_index = b, None

    if node_mask is not None:
        leaves = tree.level_sizes[0]
        if not isinstance(node_mask, torch.Tensor) or node_mask.dtype != torch.bool or node_mask.dim() != 2:
            raise ValueError(f"node_mask must be a bool tensor of shape (batch, N) or (batch, L) (leaves), got "
                             f"{node_mask.dtype if isinstance(node_mask, torch.Tensor) else type(node_mask).__name__}")
        if tuple(node_mask.shape) == (batch, num_nodes):
            mask = node_mask.to(u.device)
        elif tuple(node_mask.shape) == (batch, leaves) and leaves_first:
            mask = _extend_leaf_mask(node_mask.to(u.device), tree)
        else:
            raise ValueError(f"node_mask must have shape (batch, N) = ({batch}, {num_nodes}) or (batch, L) = "
                             f"({batch}, {leaves}), got {tuple(node_mask.shape)}")
        # Invalid nodes leave the tree: input 0 and both edges to parent and children cut, so their output is 0.
        connected = mask & mask[:, tree.parent.clamp(min=0)]
        b_node = b_rows if b_index is None else b_rows[:, b_index]
        b_rows, b_index, pyramid_b = b_node * connected[..., None], None, None
        u = u * mask[..., None]
    return u, b_rows, b_index, coupling == "skew", tree, pyramid_b


def myo_solve(u, b, tree, *, node_mask=None, coupling="hermitian", virtual="persistent"):
    """Myosotis layer solve x = T⁻¹u on a tree (paper Sec. 3.2-3.3, Eqs. 8-12), linear in the node count.

    T is the scalar, gauge-fixed tree matrix of the paper's experiments (Sec. 3.5, Sec. 4): 1 on the diagonal,
    b_v at (v, parent v) and C_v at (parent v, v), with C_v = conj(b_v) (``coupling="hermitian"``, T Hermitian)
    or C_v = -conj(b_v) (``coupling="skew"``, ablation; docs/myosotis.md, 'Coupling sign'). Up-sweep leaves → root,
    down-sweep back.
    Nodes are stored level-major: leaves first, then each virtual level, the root last.

    Args:
        u: (batch, N, channels) inputs on all N nodes (``virtual="persistent"``), or (batch, L, channels)
            on the leaves only (``virtual="transient"``: virtual inputs are 0 and only the leaves' outputs
            are returned). Real float32/float64/float16/bfloat16 or complex64/complex128. Channels
            (heads) are independent.
        b: edge weights, coupling each node to its parent. Selected by shape:
            (channels, D-1): level-shared ("pyramid") form: b[c, ℓ-1] weights every edge from level ℓ
                to ℓ+1 (levels 1 = leaves … D = root, D = len(tree.level_sizes)).
            (batch or 1, N, channels): general per-node form: b[:, v] weights edge (v, parent v); root
                entries are ignored; batch 1 is shared by the batch.
            For a stable solve keep |b| <= 1/(k_max + 1) (strict diagonal dominance, docs/myosotis.md,
            'Numerical stability').
        tree: an int k >= 2 for the ceil k-ary 1-D tree over consecutive leaves (``myo_tree(L, k)``, any
            L >= 1; L is read from u), or a MyoTree: ``myo_tree(L, k)``, ``myo_quadtree(H, W)`` (pixels in
            raster order, levels stored as grids) or ``myo_tree_from_parent(parent)`` (any tree or forest).
        node_mask: (batch, N) bool, or (batch, L) over the leaves (a virtual node is valid if a valid leaf
            lies under it). Invalid nodes get input 0, are cut from the tree and output 0.
        coupling: "hermitian" (default, the paper) or "skew".
        virtual: "persistent" (default) or "transient", see u.
    Returns:
        x with u's shape; u's dtype for real u and b, else complex64 (complex128 for float64/complex128 u).
        Accumulates in float32 (float64 for double input).

    The backward pass is one more solve (docs/myosotis.md, 'Backward pass'): grad_u = T⁻ᴴ grad_x, which for
    Hermitian T is the same solve, and grad_b_v = -(grad_u_v conj(x_par v) + s conj(grad_u_par v) x_v)
    (s = -1 for skew).
    """
    u, b_rows, b_index, skew, tree, pyramid_b = _normalise(u, b, tree, node_mask, coupling, virtual)
    # Under torch.export (hence torch.onnx.export) a ceil k-ary tree or quadtree is solved as standard aten ops
    # scheduled by its level sizes (Python ints at trace time, complex values as real pairs): the op's own arguments
    # hold the tree only as parent's values, which a traced graph cannot read. Not under torch.compile: dynamo
    # reports is_exporting() too, and a compiled model must run the op with its autograd formula.
    exporting = torch.compiler.is_exporting() and not torch.compiler.is_dynamo_compiling()
    if exporting and tree.kind in _LEVEL_KINDS:
        x = reference.myo_solve_levels(u, b_rows, tree.parent, tree.level_sizes, b_index, skew=skew)
    elif _backend.use_kernel(_OP, u) and _COMPILED:
        x = torch.ops.ssm_plugins.myo_solve_fwd(u, b_rows, tree.parent, b_index, skew)
    elif pyramid_b is not None and tree.kind == "kary1d":
        x = reference.myo_solve_pyramid(u, pyramid_b, tree.arity, skew=skew)
    elif pyramid_b is not None and tree.kind == "quad2d":
        x = reference.myo_solve_pyramid2d(u, pyramid_b, tree.grid_sizes, skew=skew)
    else:
        x = reference.myo_solve(u, b_rows, tree.parent, b_index, skew=skew)
    leaves = tree.level_sizes[0]
    return x[:, :leaves] if virtual == "transient" and leaves < x.shape[1] else x  # a 1-node tree: x as is


def myo_solve_flops(batch: int, nodes: int, channels: int, is_complex: bool, backward: bool = False) -> int:
    """Real flops of the compiled solve, per (batch, node, channel): 10 real / 26 complex for the two sweeps
    (pivot inverse, y, pivot and RHS messages, down-sweep update); the backward adds the edge gradient
    (4 real / 16 complex)."""
    per_node = (26 + (16 if backward else 0)) if is_complex else (10 + (4 if backward else 0))
    return per_node * batch * nodes * channels


# ---- autograd, fake (meta) kernels and FLOP counts for the compiled ops -----------------------------
# Registered only when both ops exist (the extension may be missing).
if _COMPILED:

    @torch.library.register_fake(f"ssm_plugins::{_OP}")
    def _fwd_fake(u, b, parent, b_index, skew):
        return u.new_empty(u.shape)  # contiguous whatever u's layout: the kernel solves a contiguous copy

    @torch.library.register_fake(f"ssm_plugins::{_BWD}")
    def _bwd_fake(grad_x, x, b, parent, b_index, skew):
        return grad_x.new_empty(grad_x.shape), b.new_empty((grad_x.shape[0], b.shape[1], b.shape[2]))

    def _setup_context(ctx, inputs, output):
        u, b, parent, b_index, skew = inputs
        ctx.save_for_backward(output, b, parent, b_index)
        ctx.skew = skew

    def _backward(ctx, grad_x):
        # The adjoint solve (docs/myosotis.md, 'Backward pass') in the compiled myo_solve_bwd: grad_u = T⁻ᴴ grad_x
        # plus grad_b.
        x, b, parent, b_index = ctx.saved_tensors
        grad_u, grad_b = getattr(torch.ops.ssm_plugins, _BWD)(grad_x, x, b, parent, b_index, ctx.skew)
        if grad_b.shape[0] != b.shape[0]:  # b shared by the batch
            grad_b = grad_b.sum(0, keepdim=True)
        return grad_u, grad_b, None, None, None

    torch.library.register_autograd(f"ssm_plugins::{_OP}", _backward, setup_context=_setup_context)

    @register_flop_formula(getattr(torch.ops.ssm_plugins, _OP), get_raw=True)
    def _fwd_flops(u, b, parent, b_index, skew, out_val=None, **kwargs):
        return myo_solve_flops(*u.shape, u.is_complex())

    @register_flop_formula(getattr(torch.ops.ssm_plugins, _BWD), get_raw=True)
    def _bwd_flops(grad_x, x, b, parent, b_index, skew, out_val=None, **kwargs):
        return myo_solve_flops(*grad_x.shape, grad_x.is_complex(), backward=True)
