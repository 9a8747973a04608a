"""Myosotis tree solve x = T⁻¹u, level by level (Myosotis, arXiv 2509.20503, Sec. 3.2-3.3, App. A.2).

Storage is level-major (docs/myosotis.md, 'Storage order'): node arrays hold the leaves first and the root(s)
last, so every node's parent has a larger index (``parent[v] > v``, ``-1`` at roots). Row v of the system T x = u
reads

    A_v x_v + B_v x_par(v) + Σ_{c ∈ ch(v)} C_c x_c = u_v .

Oracles, each written like the equations they implement:
    myo_solve_general    any blocks A, B, C (paper Sec. 3.3, Eqs. 9-12, Algorithms 1-3): Schur-complement up-sweep,
                         back-substitution down-sweep
    myo_solve            scalar, gauge-fixed A = 1, C_v = ±conj(b_v) (paper Sec. 3.5; docs/myosotis.md, 'Scalar
                         Hermitian solve'), per-node weights
    myo_solve_pyramid    the same with weights shared per (channel, level) on a ceil k-ary tree: SumPool_k
                         going up, Up_k (nearest repeat) coming down (docs/myosotis.md, 'Level-shared fast path')
    myo_solve_pyramid2d  the same on a ceil quadtree stored as a pyramid of grids: 2×2 sum-pool going up,
                         2× nearest up-sampling coming down
    myo_solve_levels     ``myo_solve`` on a tree stored level by level, scheduled by the level sizes (Python
                         ints) in real arithmetic: the form torch.export and ONNX trace
"""
from __future__ import annotations

import torch


def tree_waves(parent: torch.Tensor) -> list[torch.Tensor]:
    """Node indices grouped by height (leaves = 1): every node's children lie in earlier waves.

    For the paper's trees and ours (all leaves on level 1) the waves are exactly the levels ℓ = 1..D.
    """
    n = parent.numel()
    height = torch.ones(n, dtype=torch.long, device=parent.device)
    has_parent = parent >= 0
    child, par = torch.nonzero(has_parent).flatten(), parent[has_parent]
    while True:  # at most D passes: a parent sits one above its highest child
        raised = height.scatter_reduce(0, par, height[child] + 1, reduce="amax")
        if torch.equal(raised, height):
            break
        height = raised
    return [torch.nonzero(height == h).flatten() for h in range(1, int(height.max()) + 1)] if n else []


def myo_solve_general(u, A, B, C, parent):
    """x = T⁻¹u for any tree-structured block matrix (paper Sec. 3.3, App. A.1-A.2), block size d, r right-hand sides.

    u: (..., N, d, r); A, B, C: (..., N, d, d) with A_v at (v, v), B_v at (v, par v), C_v at (par v, v)
    (B, C of roots are ignored); parent: (N,) long. Returns x: (..., N, d, r).
    """
    Ahat, ut = A, u  # updated diagonal blocks Â_v and reduced right-hand sides ũ_v
    F = torch.zeros_like(B)  # F_v = Â_v⁻¹ B_v
    y = torch.zeros_like(u)  # y_v = Â_v⁻¹ ũ_v
    waves = tree_waves(parent)
    for wave in waves:  # up-sweep: Â_p = A_p - Σ_c C_c F_c,  ũ_p = u_p - Σ_c C_c y_c
        y = y.index_copy(-3, wave, torch.linalg.solve(Ahat[..., wave, :, :], ut[..., wave, :, :]))
        F = F.index_copy(-3, wave, torch.linalg.solve(Ahat[..., wave, :, :], B[..., wave, :, :]))
        child = wave[parent[wave] >= 0]
        if child.numel():
            Cc = C[..., child, :, :]
            Ahat = Ahat.index_add(-3, parent[child], -(Cc @ F[..., child, :, :]))
            ut = ut.index_add(-3, parent[child], -(Cc @ y[..., child, :, :]))
    x = torch.zeros_like(u)
    for wave in reversed(waves):  # down-sweep: x_v = y_v - F_v x_par(v)  (x_root = y_root)
        par = parent[wave]
        x_par = x[..., par.clamp(min=0), :, :] * (par >= 0).to(u.dtype)[:, None, None]
        x = x.index_copy(-3, wave, y[..., wave, :, :] - F[..., wave, :, :] @ x_par)
    return x


def myo_solve(u, b, parent, b_index=None, skew=False):
    """Scalar gauge-fixed solve (docs/myosotis.md, 'Scalar Hermitian solve'): A_v = 1, B_v = b_v,
    C_v = s·conj(b_v), s = -1 if ``skew`` else 1.

    u: (batch, N, channels); b: (batch or 1, Nb, channels) with node v using row ``b_index[v]``
    (Nb = N and row v without ``b_index``); parent: (N,) long. Accumulates in float32 (float64 for
    double / complex128 input) and returns u's dtype (complex when b is complex).

        α_v = 1 - s Σ_c |b_c|²/α_c,   y_v = (u_v - s Σ_c conj(b_c) y_c)/α_v,   x_v = y_v - (b_v/α_v) x_par(v)
    """
    out_dtype, acc = _dtypes(u, b)
    sign = -1.0 if skew else 1.0
    u_acc = u.to(acc)
    b_node = (b if b_index is None else b[:, b_index]).to(acc).expand(u.shape[0], -1, -1)
    pivot = torch.ones(u.shape, dtype=u_acc.real.dtype, device=u.device)  # α (real: C F = s|b|²/α)
    rhs = u_acc  # ũ, turned into y wave by wave
    waves = tree_waves(parent)
    for wave in waves:  # up-sweep
        y = rhs[:, wave] / pivot[:, wave]
        rhs = rhs.index_copy(1, wave, y)
        child = wave[parent[wave] >= 0]
        if child.numel():
            b_c, alpha_c, p = b_node[:, child], pivot[:, child], parent[child]
            pivot = pivot.index_add(1, p, -sign * _abs2(b_c) / alpha_c)
            rhs = rhs.index_add(1, p, -sign * b_c.conj() * rhs[:, child])
    x = rhs
    for wave in reversed(waves):  # down-sweep
        par = parent[wave]
        x_par = x[:, par.clamp(min=0)] * (par >= 0).to(acc)[:, None]
        x = x.index_copy(1, wave, x[:, wave] - b_node[:, wave] / pivot[:, wave] * x_par)
    return x.to(out_dtype)


def myo_solve_levels(u, b, parent, level_sizes, b_index=None, skew=False):
    """``myo_solve`` on a tree stored level by level (``myo_tree``, ``myo_quadtree``: the nodes of level ℓ are
    contiguous, every node below the top has its parent one level up) with a schedule fixed by the level sizes
    (Python ints) instead of one read from ``parent``'s values: traceable by torch.export, and onnxruntime runs it.

    Children's sums reach their parents by ``index_add`` and the parents' solutions come down by ``index_select``,
    both indexed by ``parent`` (any values); complex values travel as (re, im) pairs in a trailing dim (ONNX has no
    complex tensors). Same arguments, equations and dtypes as ``myo_solve``, plus level_sizes (n_1 … n_D).
    """
    out_dtype, acc = _dtypes(u, b)
    sign = -1.0 if skew else 1.0
    pairs = acc.is_complex
    u_acc, b_acc = u.to(acc), b.to(acc)
    if pairs:
        u_acc, b_acc = torch.view_as_real(u_acc), torch.view_as_real(b_acc)
    b_node = b_acc if b_index is None else b_acc[:, b_index]  # (1 or batch, N, channels[, 2])

    def times(w, z, conj=False):  # w·z, or conj(w)·z; pairs multiply as complex numbers
        if not pairs:
            return w * z
        w_re, w_im = w.unbind(-1)
        z_re, z_im = z.unbind(-1)
        w_im = -w_im if conj else w_im
        return torch.stack((w_re * z_re - w_im * z_im, w_re * z_im + w_im * z_re), dim=-1)

    def per_node(real):  # a real (…, channels) factor against a (…, channels[, 2]) value
        return real[..., None] if pairs else real

    sizes = [int(n) for n in level_sizes]
    starts = [0]
    for n in sizes[:-1]:
        starts.append(starts[-1] + n)
    u_levels, b_levels = torch.split(u_acc, sizes, dim=1), torch.split(b_node, sizes, dim=1)
    # position of each node's parent inside the level above (level ℓ+1 starts at starts[ℓ+1])
    up = [parent[start:start + n] - starts[level + 1]
          for level, (start, n) in enumerate(zip(starts[:-1], sizes[:-1]))]
    b_abs2 = [(b_l ** 2).sum(-1) if pairs else b_l ** 2 for b_l in b_levels]
    pivot = [torch.ones_like(b_abs2[0])]  # α: real, depends on b only
    y = [u_levels[0]]
    for level in range(len(sizes) - 1):  # up-sweep: α_p = 1 - s Σ_c |b_c|²/α_c,  y_p = (u_p - s Σ_c conj(b_c) y_c)/α_p
        b_c, n_up = b_levels[level], sizes[level + 1]
        pivot_sum = b_abs2[level].new_zeros(b_c.shape[0], n_up, b_c.shape[2])
        pivot.append(1 - sign * pivot_sum.index_add(1, up[level], b_abs2[level] / pivot[level]))
        message = times(b_c, y[level], conj=True)
        rhs_sum = message.new_zeros(message.shape[0], n_up, *message.shape[2:])
        y.append((u_levels[level + 1] - sign * rhs_sum.index_add(1, up[level], message)) / per_node(pivot[-1]))
    x = [y[-1]]
    for level in reversed(range(len(sizes) - 1)):  # down-sweep: x_v = y_v - (b_v/α_v) x_par(v)
        x_parent = x[0].index_select(1, up[level])
        x.insert(0, y[level] - times(b_levels[level] / per_node(pivot[level]), x_parent))
    x = torch.cat(x, dim=1)
    return torch.view_as_complex(x.contiguous()) if pairs else x.to(out_dtype)  # complex: out_dtype is acc


def kary_level_sizes(num_leaves: int, arity: int) -> list[int]:
    """Level sizes n_1 = L, n_{ℓ+1} = ⌈n_ℓ / k⌉ down to the single root (ceil k-ary tree, docs/myosotis.md,
    'Ceil trees')."""
    sizes = [num_leaves]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // arity))
    return sizes


def myo_solve_pyramid(u, b, arity, skew=False):
    """Level-shared solve on a ceil k-ary 1-D tree (docs/myosotis.md, 'Level-shared fast path'): the same system
    as ``myo_solve`` with every edge from level ℓ to ℓ+1 weighted b[:, ℓ-1]. u: (batch, N, channels) level-major;
    b: (channels, D-1). SumPool_k sums each group of k consecutive children (zero-padding a ragged end),
    Up_k repeats each parent k times (truncated to the child count)."""
    sizes = kary_level_sizes(kary_num_leaves(u.shape[1], arity), arity)

    def sum_pool(t, n_parent):
        t = torch.nn.functional.pad(t, (0, 0, 0, n_parent * arity - t.shape[1]))
        return t.reshape(t.shape[0], n_parent, arity, t.shape[-1]).sum(2)

    def up(t, n_child):
        return t.repeat_interleave(arity, dim=1)[:, :n_child]

    levels = list(torch.split(u, sizes, dim=1))
    return torch.cat(_pyramid(levels, b, sizes, sum_pool, up, skew), dim=1)


def myo_solve_pyramid2d(u, b, grid_sizes, skew=False):
    """Level-shared solve on a ceil quadtree (docs/myosotis.md, 'Level-shared fast path'): level ℓ is a grid
    (H_ℓ, W_ℓ) stored in raster order, H_{ℓ+1} = ⌈H_ℓ/2⌉, W_{ℓ+1} = ⌈W_ℓ/2⌉. SumPool_4 is a 2×2 sum-pool (zero-padded at
    odd borders), Up_4 a 2× nearest up-sampling. u: (batch, N, channels); b: (channels, D-1)."""

    def sum_pool(t, grid):
        rows, cols = grid
        t = torch.nn.functional.pad(t, (0, 0, 0, 2 * cols - t.shape[2], 0, 2 * rows - t.shape[1]))
        return t.reshape(t.shape[0], rows, 2, cols, 2, t.shape[-1]).sum((2, 4))

    def up(t, grid):
        return t.repeat_interleave(2, dim=1)[:, :grid[0]].repeat_interleave(2, dim=2)[:, :, :grid[1]]

    sizes = [rows * cols for rows, cols in grid_sizes]
    levels = [t.reshape(t.shape[0], *grid, t.shape[-1])
              for t, grid in zip(torch.split(u, sizes, dim=1), grid_sizes)]
    x = _pyramid(levels, b, list(grid_sizes), sum_pool, up, skew)
    return torch.cat([t.flatten(1, 2) for t in x], dim=1)


def _pyramid(u_levels, b, shapes, sum_pool, up, skew):
    """The level-shared recursion on level tensors (batch, *shape_ℓ, channels), s = -1 if ``skew``:

        α_1 = 1,  α_{ℓ+1} = 1 - s|b_ℓ|² SumPool(1/α_ℓ)
        y_1 = u_1,  y_{ℓ+1} = (u_{ℓ+1} - s conj(b_ℓ) SumPool(y_ℓ)) / α_{ℓ+1}
        x_D = y_D,  x_ℓ = y_ℓ - (b_ℓ/α_ℓ) Up(x_{ℓ+1})
    """
    out_dtype, acc = _dtypes(u_levels[0], b)
    sign = -1.0 if skew else 1.0
    u_levels = [t.to(acc) for t in u_levels]
    b = b.to(acc)
    b_abs2 = _abs2(b)
    alpha = [torch.ones_like(u_levels[0][:1], dtype=b_abs2.dtype)]
    y = [u_levels[0]]
    for level in range(len(shapes) - 1):
        alpha.append(1 - sign * b_abs2[:, level] * sum_pool(1 / alpha[level], shapes[level + 1]))
        y.append((u_levels[level + 1] - sign * b[:, level].conj() * sum_pool(y[level], shapes[level + 1]))
                 / alpha[level + 1])
    x = [y[-1]]
    for level in reversed(range(len(shapes) - 1)):
        x.insert(0, y[level] - b[:, level] / alpha[level] * up(x[0], shapes[level]))
    return [t.to(out_dtype) for t in x]


def quad_grid_sizes(height: int, width: int) -> list[tuple[int, int]]:
    """Grid of every quadtree level, leaves first: (H, W), (⌈H/2⌉, ⌈W/2⌉), … down to the (1, 1) root."""
    grids = [(height, width)]
    while grids[-1] != (1, 1):
        grids.append((-(-grids[-1][0] // 2), -(-grids[-1][1] // 2)))
    return grids


def kary_num_leaves(num_nodes: int, arity: int) -> int:
    """Leaf count L of the ceil k-ary tree with ``num_nodes`` nodes (the node count grows with L)."""
    low, high = 1, max(num_nodes, 1)
    while low < high:
        mid = (low + high) // 2
        if sum(kary_level_sizes(mid, arity)) < num_nodes:
            low = mid + 1
        else:
            high = mid
    if sum(kary_level_sizes(low, arity)) != num_nodes:
        raise ValueError(f"{num_nodes} nodes is not the size of any ceil {arity}-ary tree")
    return low


def _abs2(t):
    """|t|² as re² + im² (real for complex t; docs/myosotis.md, 'Numerical stability': never via a square root)."""
    return t.real ** 2 + t.imag ** 2 if t.is_complex() else t ** 2


def _dtypes(u, b):
    """(output dtype, accumulation dtype): complex if u or b is; float64 only for double input."""
    double = u.dtype in (torch.float64, torch.complex128)
    if u.is_complex() or b.is_complex():
        acc = torch.complex128 if double else torch.complex64
        return acc, acc
    return u.dtype, torch.float64 if double else torch.float32
