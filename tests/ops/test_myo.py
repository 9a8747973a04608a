"""Myosotis tree solve (Myosotis, arXiv 2509.20503, Sec. 3.2-3.5; test plan T1-T10 of docs/myosotis.md, 'Test plan'):
oracles vs a dense solve, kernel vs oracle, gradients, bad input, FLOP count."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ssm_plugins.ops import _backend, myo_quadtree, myo_solve, myo_tree, myo_tree_from_parent
from ssm_plugins.ops.myo import myo_solve_flops
from ssm_plugins.ops.reference import myo as ref

HAS_KERNEL = _backend.has_kernel("myo_solve_fwd", "cpu")
needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="ssm_plugins._C without the myo kernel")


@pytest.fixture(params=["kernel", "reference"])
def backend(request, monkeypatch):
    if request.param == "reference":
        monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    elif not HAS_KERNEL:
        pytest.skip("ssm_plugins._C without the myo kernel")
    return request.param


# ---- the naive definition: the tree matrix written out densely --------------------------------------------
def dense_tree_matrix(b_node, parent, skew=False):
    """T with 1 on the diagonal, b_v at (v, parent v) and ±conj(b_v) at (parent v, v) (paper Sec. 3.2, Sec. 3.5)."""
    n = parent.numel()
    T = torch.eye(n, dtype=b_node.dtype)
    child = torch.nonzero(parent >= 0).flatten()
    T[child, parent[child]] = b_node[child]
    T[parent[child], child] = (-1 if skew else 1) * b_node[child].conj()
    return T


def dense_solve(u, b_node, parent, skew=False):
    """u: (batch, N, C); b_node: (batch or 1, N, C). Column-by-column torch.linalg.solve."""
    b_node = b_node.expand(u.shape[0], -1, -1)
    x = torch.empty_like(u, dtype=torch.promote_types(u.dtype, b_node.dtype))
    for i in range(u.shape[0]):
        for c in range(u.shape[2]):
            x[i, :, c] = torch.linalg.solve(dense_tree_matrix(b_node[i, :, c], parent, skew), u[i, :, c].to(x.dtype))
    return x


def level_shared_to_nodes(b, tree):
    """(C, D-1) level-shared weights -> (1, N, C) per node (the root's entry is unused: 0)."""
    rows = torch.cat([b.transpose(0, 1), b.new_zeros(1, b.shape[0])])
    return rows[tree.level].unsqueeze(0)


def random_weights(shape, dtype, arity, generator=None):
    """Edge weights in the stable regime |b| <= 1/(k+1) (docs/myosotis.md, 'Edge weights', 'Numerical stability')."""
    scale = 1.0 / (arity + 1)
    if dtype.is_complex:
        rho = torch.rand(shape, dtype=torch.float64, generator=generator)
        phase = 2 * torch.pi * torch.rand(shape, dtype=torch.float64, generator=generator)
        return (-scale * rho * torch.exp(1j * phase)).to(dtype)
    return (scale * (2 * torch.rand(shape, dtype=torch.float64, generator=generator) - 1)).to(dtype)


def random_level_major_tree(n, generator):
    """A random forest with children stored before parents (parent[v] > v); levels may interleave."""
    parent = torch.full((n,), -1, dtype=torch.long)
    for v in range(n - 1):
        if torch.rand((), generator=generator) < 0.9:
            parent[v] = int(torch.randint(v + 1, n, (), generator=generator))
    return parent


TREES = [(1, 2), (2, 2), (7, 2), (16, 2), (13, 3), (50, 4), (64, 4)]  # L=1, ceil borders, several depths


# ---- oracles vs the dense solve --------------------------------------------------------------------------
@pytest.mark.parametrize("num_leaves,arity", TREES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("coupling", ["hermitian", "skew"])
def test_both_forms_equal_dense_solve(backend, num_leaves, arity, dtype, coupling):
    g = torch.Generator().manual_seed(num_leaves)
    tree = myo_tree(num_leaves, arity)
    n, depth = tree.parent.numel(), len(tree.level_sizes)
    u = torch.randn(2, n, 3, dtype=dtype, generator=g)
    skew = coupling == "skew"
    b_node = random_weights((2, n, 3), dtype, arity, g)
    want = dense_solve(u, b_node, tree.parent, skew)
    torch.testing.assert_close(myo_solve(u, b_node, arity, coupling=coupling), want, rtol=1e-10, atol=1e-12)
    b_level = random_weights((3, depth - 1), dtype, arity, g)
    want = dense_solve(u, level_shared_to_nodes(b_level, tree), tree.parent, skew)
    torch.testing.assert_close(myo_solve(u, b_level, arity, coupling=coupling), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_general_tree_and_forest_equal_dense_solve(backend, seed):
    g = torch.Generator().manual_seed(seed)
    tree = myo_tree_from_parent(random_level_major_tree(23, g))
    u = torch.randn(1, 23, 2, dtype=torch.complex128, generator=g)
    b = random_weights((1, 23, 2), torch.complex128, tree.arity, g)
    want = dense_solve(u, b, tree.parent)
    torch.testing.assert_close(myo_solve(u, b, tree), want, rtol=1e-10, atol=1e-12)
    b_level = random_weights((2, len(tree.level_sizes) - 1), torch.complex128, tree.arity, g)
    want = dense_solve(u, level_shared_to_nodes(b_level, tree), tree.parent)
    torch.testing.assert_close(myo_solve(u, b_level, tree), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("height,width", [(7, 13), (16, 16), (1, 5), (1, 1)])
def test_quadtree_equals_dense_solve(backend, height, width):
    g = torch.Generator().manual_seed(height * width)
    tree = myo_quadtree(height, width)
    n = tree.parent.numel()
    assert tree.level_sizes[0] == height * width and tree.grid_sizes[0] == (height, width)
    u = torch.randn(1, n, 2, dtype=torch.complex128, generator=g)
    b_node = random_weights((1, n, 2), torch.complex128, 4, g)
    torch.testing.assert_close(myo_solve(u, b_node, tree), dense_solve(u, b_node, tree.parent),
                               rtol=1e-10, atol=1e-12)
    b_level = random_weights((2, len(tree.level_sizes) - 1), torch.complex128, 4, g)
    want = dense_solve(u, level_shared_to_nodes(b_level, tree), tree.parent)
    torch.testing.assert_close(myo_solve(u, b_level, tree), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make_tree", [lambda: myo_tree(11, 3), lambda: myo_quadtree(5, 6)], ids=["kary", "quad"])
def test_trees_made_under_inference_mode_serve_autograd(make_tree):
    """The trees are cached per size: one first made under torch.inference_mode must still serve a later solve that
    autograd records (inference tensors cannot be saved for backward)."""
    from ssm_plugins.ops import myo as myo_ops

    for cache in (myo_ops._kary_tree, myo_ops._quadtree):  # empty, so the inference_mode call below fills them
        cache.cache_clear()
    with torch.inference_mode():
        assert not make_tree().parent.is_inference()
    tree = make_tree()  # from the cache
    u = torch.randn(2, tree.parent.numel(), 3, dtype=torch.complex128, requires_grad=True)
    b = torch.full((1, tree.parent.numel(), 3), 0.3, dtype=torch.complex128, requires_grad=True)
    myo_solve(u, b, tree).abs().sum().backward()
    assert u.grad is not None and b.grad is not None


def test_quadtree_equals_4ary_tree_on_morton_order():
    # T3: on a 2^m × 2^m grid the quadtree pyramid is the 1-D 4-ary tree over Morton-ordered pixels.
    side = 8
    quad, chain = myo_quadtree(side, side), myo_tree(side * side, 4)
    order = []  # raster index of each 1-D node, level by level
    offset = 0
    for rows, cols in quad.grid_sizes:
        morton = torch.zeros(rows * cols, dtype=torch.long)
        for i in range(rows):
            for j in range(cols):
                code = sum(((i >> bit) & 1) << (2 * bit + 1) | ((j >> bit) & 1) << (2 * bit) for bit in range(3))
                morton[code] = offset + i * cols + j
        order.append(morton)
        offset += rows * cols
    order = torch.cat(order)
    u = torch.randn(2, order.numel(), 3, dtype=torch.complex128)
    b = random_weights((3, len(quad.level_sizes) - 1), torch.complex128, 4)
    x_quad = ref.myo_solve_pyramid2d(u, b, quad.grid_sizes)
    x_chain = ref.myo_solve_pyramid(u[:, order], b, 4)
    torch.testing.assert_close(x_chain, x_quad[:, order], rtol=0, atol=1e-13)
    assert len(chain.level_sizes) == len(quad.level_sizes)


@pytest.mark.parametrize("block", [1, 2, 3])
@pytest.mark.parametrize("num_leaves,arity", [(50, 4), (13, 3), (1, 2)])
def test_general_block_oracle_equals_dense_solve(block, num_leaves, arity):
    # T1: random complex non-Hermitian blocks A, B, C (reference path only, docs/myosotis.md 'General blocks').
    g = torch.Generator().manual_seed(block)
    parent = myo_tree(num_leaves, arity).parent
    n, d, r = parent.numel(), block, 2
    cplx = lambda *s: torch.complex(torch.randn(*s, dtype=torch.float64, generator=g),
                                    torch.randn(*s, dtype=torch.float64, generator=g))
    A = cplx(n, d, d) + 4 * torch.eye(d)
    B, C, u = 0.3 * cplx(n, d, d), 0.3 * cplx(n, d, d), cplx(n, d, r)
    T = torch.zeros(n * d, n * d, dtype=torch.complex128)
    for v in range(n):
        T[v * d:(v + 1) * d, v * d:(v + 1) * d] = A[v]
        p = int(parent[v])
        if p >= 0:
            T[v * d:(v + 1) * d, p * d:(p + 1) * d] = B[v]
            T[p * d:(p + 1) * d, v * d:(v + 1) * d] = C[v]
    want = torch.linalg.solve(T, u.reshape(n * d, r)).reshape(n, d, r)
    torch.testing.assert_close(ref.myo_solve_general(u, A, B, C, parent), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("num_leaves,arity", [(50, 4), (1000, 4), (784, 4), (37, 2)])
def test_pyramid_equals_general_level_loop(num_leaves, arity):
    # T2: the level-shared fast path (SumPool_k / Up_k) equals the general per-node solver.
    g = torch.Generator().manual_seed(num_leaves)
    tree = myo_tree(num_leaves, arity)
    u = torch.randn(2, tree.parent.numel(), 3, dtype=torch.complex128, generator=g)
    b = random_weights((3, len(tree.level_sizes) - 1), torch.complex128, arity, g)
    got = ref.myo_solve_pyramid(u, b, arity)
    torch.testing.assert_close(got, ref.myo_solve(u, level_shared_to_nodes(b, tree), tree.parent),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("height,width", [(7, 13), (28, 28), (5, 1)])
def test_pyramid2d_equals_general_level_loop(height, width):
    # T2 in 2-D: 2×2 sum-pool / 2× nearest up-sampling on the grid pyramid equals the per-node solver.
    tree = myo_quadtree(height, width)
    u = torch.randn(2, tree.parent.numel(), 3, dtype=torch.complex128)
    b = random_weights((3, len(tree.level_sizes) - 1), torch.complex128, 4)
    got = ref.myo_solve_pyramid2d(u, b, tree.grid_sizes)
    torch.testing.assert_close(got, ref.myo_solve(u, level_shared_to_nodes(b, tree), tree.parent),
                               rtol=0, atol=1e-12)


def test_causal_chain_is_the_s5_recurrence():
    # T4: chain with B = 0, C = -ρ: x_k = ρ x_{k-1} + u_k.
    n = 40
    rho = 0.9 * torch.exp(torch.tensor(0.3j, dtype=torch.complex128))
    parent = torch.cat([torch.arange(1, n), torch.tensor([-1])])
    u = torch.randn(n, 1, 1, dtype=torch.complex128)
    one = torch.ones(n, 1, 1, dtype=torch.complex128)
    x = ref.myo_solve_general(u, one, 0 * one, -rho * one, parent)
    want, state = [], 0
    for k in range(n):
        state = rho * state + u[k, 0, 0]
        want.append(state)
    torch.testing.assert_close(x[:, 0, 0], torch.stack(want), rtol=0, atol=1e-12)


def test_hermitian_chain_is_forward_then_backward_ssm():
    # T5: (1+|a|²) T = (I - aL)(I - conj(a) U) with A_1 = 1/(1+|a|²); T⁻¹u = (1+|a|²) SSM←(SSM→(u)).
    n, a = 30, 0.7 * torch.exp(torch.tensor(0.5j, dtype=torch.complex128))
    gain = 1 + abs(a) ** 2
    parent = torch.cat([torch.arange(1, n), torch.tensor([-1])])  # node k's parent is k+1
    u = torch.randn(n, dtype=torch.complex128)
    A = torch.ones(n, 1, 1, dtype=torch.complex128)
    A[0] = 1 / gain
    # Row k: T[k, k+1] = -conj(a)/gain (B_k), T[k+1, k] = -a/gain (C_k).
    B = torch.full((n, 1, 1), -a.conj() / gain, dtype=torch.complex128)
    C = torch.full((n, 1, 1), -a / gain, dtype=torch.complex128)
    x = ref.myo_solve_general(u[:, None, None], A, B, C, parent)[:, 0, 0]
    fwd, state = [], 0
    for k in range(n):
        state = a * state + u[k]
        fwd.append(state)
    bwd, state = [None] * n, 0
    for k in reversed(range(n)):
        state = a.conj() * state + fwd[k]
        bwd[k] = state
    torch.testing.assert_close(x, gain * torch.stack(bwd), rtol=0, atol=1e-12)


def test_default_parameterisation_is_stable(backend):
    # T6: b = -ρ/(k+1), |ρ| < 1: T positive definite and |T⁻¹| diag(margin) has row sums <= 1.
    arity, tree = 4, myo_tree(20, 4)
    n = tree.parent.numel()
    g = torch.Generator().manual_seed(6)
    b = random_weights((1, len(tree.level_sizes) - 1), torch.complex128, arity, g)
    b_node = level_shared_to_nodes(b, tree)[0, :, 0]
    T = dense_tree_matrix(b_node, tree.parent)
    assert torch.linalg.eigvalsh(T).min() > 0
    # The up-sweep pivots α_v are the Cholesky pivots of T in storage order (children first: no fill-in).
    pivots = torch.linalg.cholesky(T).diagonal().real ** 2
    assert pivots.min() >= arity / (arity + 1) - 1e-12
    margin = 1 - (T - torch.eye(n)).abs().sum(1)
    columns = torch.diag(margin).to(torch.complex128).unsqueeze(-1)  # batch j solves T x = margin_j e_j
    inverse_scaled = myo_solve(columns, b, arity)[..., 0].transpose(0, 1)  # T⁻¹ diag(margin)
    assert inverse_scaled.abs().sum(1).max() <= 1 + 1e-12


def test_leaf_block_is_real_for_level_shared_hermitian(backend):
    # T9: with level-shared Hermitian weights on a perfect tree the leaf-leaf block of T⁻¹ is real.
    tree = myo_tree(16, 2)
    n, leaves = tree.parent.numel(), 16
    b = random_weights((1, len(tree.level_sizes) - 1), torch.complex128, 2, torch.Generator().manual_seed(9))
    unit = torch.eye(n, dtype=torch.complex128)[:leaves].unsqueeze(-1)  # leaf unit vectors
    x = myo_solve(unit, b, 2)[:, :leaves, 0]
    assert x.imag.abs().max() <= 1e-12
    assert x.real.min() > 0  # dense and positive (an M-matrix up to a diagonal phase, docs/myosotis.md 'Real mode')


def test_inverse_entries_are_path_products(backend):
    # T10: (T⁻¹)_uv = (-1)^m Π_{(p,q) on path u→v} T_pq · det(T without the path's nodes) / det T.
    tree = myo_tree(9, 3)
    n = tree.parent.numel()
    b = random_weights((1, len(tree.level_sizes) - 1), torch.complex128, 3, torch.Generator().manual_seed(10))
    T = dense_tree_matrix(level_shared_to_nodes(b, tree)[0, :, 0], tree.parent)
    inverse = myo_solve(torch.eye(n, dtype=torch.complex128).unsqueeze(-1), b, 3)[..., 0].transpose(0, 1)

    def up_path(v):
        path = [v]
        while tree.parent[path[-1]] >= 0:
            path.append(int(tree.parent[path[-1]]))
        return path

    for u_node, v_node in [(0, 8), (4, 5), (2, 10), (9, 0), (3, 3)]:
        up_u, up_v = up_path(u_node), up_path(v_node)
        common = next(a for a in up_u if a in up_v)
        path = up_u[:up_u.index(common) + 1] + up_v[:up_v.index(common)][::-1]
        product = torch.prod(torch.stack([T[p, q] for p, q in zip(path, path[1:])])) if len(path) > 1 else 1
        rest = [w for w in range(n) if w not in path]
        minor = torch.linalg.det(T[rest][:, rest]) if rest else 1
        want = (-1) ** (len(path) - 1) * product * minor / torch.linalg.det(T)
        torch.testing.assert_close(inverse[u_node, v_node], want, rtol=1e-12, atol=1e-12)


# ---- modes: transient virtual nodes, masks -------------------------------------------------------------
def test_transient_equals_persistent_with_zero_virtual_inputs(backend):
    tree = myo_tree(23, 3)
    u_leaves = torch.randn(2, 23, 4, dtype=torch.float64)
    b = random_weights((4, len(tree.level_sizes) - 1), torch.float64, 3)
    u = torch.cat([u_leaves, u_leaves.new_zeros(2, tree.parent.numel() - 23, 4)], dim=1)
    got = myo_solve(u_leaves, b, 3, virtual="transient")
    assert got.shape == u_leaves.shape
    torch.testing.assert_close(got, myo_solve(u, b, 3)[:, :23])


@pytest.mark.parametrize("tree", [myo_tree(12, 2), myo_quadtree(3, 5)], ids=["kary1d", "quad2d"])
def test_node_mask_removes_nodes(backend, tree):
    n, leaves = tree.parent.numel(), tree.level_sizes[0]
    g = torch.Generator().manual_seed(3)
    u = torch.randn(1, n, 2, dtype=torch.complex128, generator=g)
    b = random_weights((1, n, 2), torch.complex128, tree.arity, g)
    leaf_mask = torch.arange(leaves) % 3 != 1
    x = myo_solve(u, b, tree, node_mask=leaf_mask[None])
    # The valid nodes: the valid leaves and every ancestor of one of them.
    valid = torch.zeros(n, dtype=torch.bool)
    for leaf in torch.nonzero(leaf_mask).flatten().tolist():
        v = leaf
        while v >= 0:
            valid[v] = True
            v = int(tree.parent[v])
    assert torch.equal(x[0, ~valid], torch.zeros_like(x[0, ~valid]))
    idx = torch.nonzero(valid).flatten()
    for c in range(2):
        T = dense_tree_matrix(b[0, :, c], tree.parent)[idx][:, idx]
        torch.testing.assert_close(x[0, idx, c], torch.linalg.solve(T, u[0, idx, c]))
    # The same mask given over all nodes.
    torch.testing.assert_close(myo_solve(u, b, tree, node_mask=valid[None]), x)


# ---- compiled kernel vs oracle ------------------------------------------------------------------------
@needs_kernel
@pytest.mark.parametrize("num_leaves,arity,batch,channels",
                         [(1, 2, 1, 1), (31, 2, 1, 5), (97, 4, 3, 17), (10, 3, 2, 40)])
@pytest.mark.parametrize("form", ["level", "node", "node-shared"])
def test_kernel_matches_oracle_float32(monkeypatch, num_leaves, arity, batch, channels, form):
    # T8: float32 forward rel. error <= 1e-5, gradients <= 1e-4 (prime L, L=1, batch 1, channels not a
    # multiple of the CPU channel block).
    g = torch.Generator().manual_seed(num_leaves + channels)
    tree = myo_tree(num_leaves, arity)
    n = tree.parent.numel()
    shape = {"level": (channels, len(tree.level_sizes) - 1), "node": (batch, n, channels),
             "node-shared": (1, n, channels)}[form]
    u = torch.randn(batch, n, channels, dtype=torch.complex64, generator=g)
    b = random_weights(shape, torch.complex64, arity, g)
    grad_x = torch.randn(batch, n, channels, dtype=torch.complex64, generator=g)

    def run():
        uu, bb = u.clone().requires_grad_(), b.clone().requires_grad_()
        x = myo_solve(uu, bb, arity)
        grads = torch.autograd.grad(x, (uu, bb), grad_x, allow_unused=True)  # L=1: no edges, b unused
        return (x, *(torch.zeros_like(t) if g is None else g for g, t in zip(grads, (uu, bb))))

    got = run()
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    want = run()
    for tol, (a, e) in zip((1e-5, 1e-4, 1e-4), zip(got, want)):
        assert a.shape == e.shape
        if e.numel():  # L=1 has no edges: level-shared b is empty
            assert (a - e).abs().max() <= tol * e.abs().max()


@needs_kernel
def test_kernel_non_contiguous_inputs():
    tree = myo_tree(9, 2)
    n = tree.parent.numel()
    u = torch.randn(6, n, 2, dtype=torch.float64).transpose(0, 2)  # (2, n, 6), non-contiguous
    b = random_weights((6, n, 1), torch.float64, 2).transpose(0, 2).expand(2, -1, -1)  # (2, n, 6)
    assert not u.is_contiguous() and not b.is_contiguous()
    torch.testing.assert_close(myo_solve(u, b, 2), dense_solve(u, b, tree.parent))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_half_precision_accumulates_in_float32(dtype):
    tree = myo_tree(100, 4)
    u = torch.randn(2, tree.parent.numel(), 8).to(dtype)
    b = random_weights((8, len(tree.level_sizes) - 1), torch.float32, 4)
    got = myo_solve(u, b, 4)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), myo_solve(u.float(), b, 4), rtol=1e-2, atol=1e-2)


@needs_kernel
def test_bf16_forward_finite_at_16384_leaves():
    tree = myo_tree(16384, 2)
    u = torch.randn(1, tree.parent.numel(), 4).to(torch.bfloat16)
    b = random_weights((4, len(tree.level_sizes) - 1), torch.float32, 2)
    x = myo_solve(u, b, 2)
    assert x.dtype == torch.bfloat16 and torch.isfinite(x).all()
    x_leaves = myo_solve(u[:, :16384], b, 2, virtual="transient")
    assert torch.isfinite(x_leaves).all()


# ---- gradients ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("form", ["level", "node", "node-shared"])
@pytest.mark.parametrize("coupling", ["hermitian", "skew"])
def test_gradcheck(backend, dtype, form, coupling):
    # T7: the analytic backward (second solve + edge-gradient formula) vs finite differences. Full
    # Jacobians for the paper's instance, random projections (fast mode) for the other combinations.
    tree = myo_tree(5, 2)
    n = tree.parent.numel()
    shape = {"level": (2, len(tree.level_sizes) - 1), "node": (2, n, 2), "node-shared": (1, n, 2)}[form]
    u = torch.randn(2, n, 2, dtype=dtype, requires_grad=True)
    b = random_weights(shape, dtype, 2).requires_grad_()
    paper = dtype.is_complex and form == "level" and coupling == "hermitian"
    assert torch.autograd.gradcheck(lambda u, b: myo_solve(u, b, 2, coupling=coupling), (u, b), fast_mode=not paper)


def test_gradcheck_masked_transient(backend):
    tree = myo_tree(10, 2)
    u = torch.randn(2, 10, 2, dtype=torch.complex128, requires_grad=True)
    b = random_weights((2, len(tree.level_sizes) - 1), torch.complex128, 2).requires_grad_()
    mask = torch.tensor([[True] * 10, [True] * 6 + [False] * 4])
    assert torch.autograd.gradcheck(
        lambda u, b: myo_solve(u, b, 2, node_mask=mask, virtual="transient"), (u, b), fast_mode=True)


@needs_kernel
def test_backward_is_the_adjoint_solve():
    # docs/myosotis.md, 'Backward pass': grad_u = T⁻ᴴ grad_x, i.e. for Hermitian T one more forward solve with the
    # same weights.
    tree = myo_tree(20, 4)
    n = tree.parent.numel()
    b = random_weights((3, len(tree.level_sizes) - 1), torch.complex128, 4)
    u = torch.randn(2, n, 3, dtype=torch.complex128, requires_grad=True)
    grad_x = torch.randn(2, n, 3, dtype=torch.complex128)
    (grad_u,) = torch.autograd.grad(myo_solve(u, b, 4), u, grad_x)
    torch.testing.assert_close(grad_u, myo_solve(grad_x, b, 4))


# ---- bad input and FLOP count ------------------------------------------------------------------------------
def test_bad_input_names_the_argument():
    tree = myo_tree(8, 2)
    n, depth = tree.parent.numel(), len(tree.level_sizes)
    u, b = torch.randn(2, n, 3), torch.randn(3, depth - 1)
    with pytest.raises(ValueError, match="^u "):
        myo_solve(u[0], b, 2)
    with pytest.raises(ValueError, match="^u "):
        myo_solve(u.int(), b, 2)
    with pytest.raises(ValueError, match="^u has 13 nodes"):
        myo_solve(u[:, :13], b, 2)
    with pytest.raises(ValueError, match="^u must have the tree's 15 nodes"):
        myo_solve(u[:, :14], b, tree)
    with pytest.raises(ValueError, match="^b "):
        myo_solve(u, torch.randn(3, depth), 2)
    with pytest.raises(ValueError, match="^b "):
        myo_solve(u, torch.randn(2, n + 1, 3), 2)
    with pytest.raises(ValueError, match="^b "):
        myo_solve(u, torch.randn(3, n, 3), 2)
    with pytest.raises(ValueError, match="^tree "):
        myo_solve(u, b, 1)
    with pytest.raises(ValueError, match="^tree "):
        myo_solve(u, b, tree.parent)
    with pytest.raises(ValueError, match="^parent "):
        myo_tree_from_parent(torch.zeros(n, dtype=torch.long))
    with pytest.raises(ValueError, match="^parent "):
        myo_tree_from_parent(tree.parent.float())
    with pytest.raises(ValueError, match="^coupling "):
        myo_solve(u, b, 2, coupling="causal")
    with pytest.raises(ValueError, match="^virtual "):
        myo_solve(u, b, 2, virtual="none")
    with pytest.raises(ValueError, match="^node_mask "):
        myo_solve(u, b, 2, node_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="^node_mask "):
        myo_solve(u, b, 2, node_mask=torch.ones(2, n))
    with pytest.raises(ValueError, match="^num_leaves "):
        myo_tree(0, 2)
    with pytest.raises(ValueError, match="^arity "):
        myo_tree(4, 1)
    with pytest.raises(ValueError, match="^width "):
        myo_quadtree(4, 0)


@needs_kernel
def test_opcheck_schema_fake_and_autograd_registration():
    checks = ("test_autograd_registration", "test_faketensor")  # test_schema, aot_dispatch: ~15 s more
    tree = myo_tree(7, 2)
    n, depth = tree.parent.numel(), len(tree.level_sizes)
    u = torch.randn(2, n, 3, dtype=torch.complex128, requires_grad=True)
    b = random_weights((1, depth, 3), torch.complex128, 2).requires_grad_()
    torch.library.opcheck(torch.ops.ssm_plugins.myo_solve_fwd.default, (u, b, tree.parent, tree.level, False),
                          test_utils=checks)
    b_node = random_weights((2, n, 3), torch.complex128, 2).requires_grad_()
    torch.library.opcheck(torch.ops.ssm_plugins.myo_solve_fwd.default, (u, b_node, tree.parent, None, True),
                          test_utils=checks)
    x = torch.randn(2, n, 3, dtype=torch.complex128)
    torch.library.opcheck(torch.ops.ssm_plugins.myo_solve_bwd.default,
                          (torch.randn_like(x), x, b.detach(), tree.parent, tree.level, True), test_utils=checks)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_flop_counter_counts_the_op(dtype):
    tree = myo_tree(30, 2)
    n = tree.parent.numel()
    u = torch.randn(2, n, 4, dtype=dtype, requires_grad=True)
    b = random_weights((4, len(tree.level_sizes) - 1), dtype, 2)
    with FlopCounterMode(display=False) as counter:
        x = myo_solve(u, b, 2)
    fwd = myo_solve_flops(2, n, 4, dtype.is_complex)
    assert fwd > 0 and counter.get_total_flops() == fwd
    with FlopCounterMode(display=False) as counter:
        x.abs().sum().backward()
    assert counter.get_total_flops() == myo_solve_flops(2, n, 4, dtype.is_complex, backward=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.bfloat16, torch.float64])
def test_cuda_matches_cpu(dtype):
    tree = myo_tree(1000, 4)
    n = tree.parent.numel()
    u = torch.randn(3, n, 33).to(dtype)
    acc = torch.complex64 if dtype.is_complex else torch.float32
    b = random_weights((33, len(tree.level_sizes) - 1), acc, 4)
    grad_x = torch.randn(3, n, 33).to(dtype)

    def run(device):
        uu, bb = u.to(device).requires_grad_(), b.to(device).requires_grad_()
        x = myo_solve(uu, bb, 4)
        return [t.cpu().to(acc) for t in (x, *torch.autograd.grad(x, (uu, bb), grad_x.to(device)))]

    # bf16: the float32 results round to bf16 on both devices; where they straddle a rounding boundary the two
    # differ by one bf16 step (2^-7 in [1, 2): seen on an H200, 1 element of 132,066)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-4
    for got, want in zip(run("cuda"), run("cpu")):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
