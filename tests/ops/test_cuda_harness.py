"""Every CUDA kernel of ssm_plugins, executed on the CPU through the host-side CUDA harness (tests/cuda_harness):
forward and backward of all five ops in every dtype they take, on odd shapes, against the compiled CPU kernels
(themselves tested against the oracles in ssm_plugins.ops.reference); and planted bugs (barriers removed from
eSSM and from the scan, an index off the end) that the harness must catch. The harness library builds once per
source state (cached: 11-60 s cold on the 2 shared cores, by load; 0.1 s warm).

Tolerances, as the largest error relative to the largest magnitude of the CPU kernel's result: float64 1e-12
(rounding: the kernels sum in different orders), float32 5e-5, float16 4e-3 and bfloat16 3e-2 (both kernels
accumulate in float32; the inputs' and outputs' roundings differ by an ulp of the 16-bit type).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ssm_plugins.ops import _backend
from ssm_plugins.ops.myo import myo_quadtree, myo_tree, myo_tree_from_parent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cuda_harness"))
import harness  # noqa: E402

pytestmark = [
    pytest.mark.skipif(harness.unavailable_reason() is not None, reason=f"{harness.unavailable_reason()}"),
    pytest.mark.skipif(not _backend.has_kernel("selective_scan_fwd", "cpu"), reason="needs ssm_plugins._C"),
]
OPS = torch.ops.ssm_plugins
TOL = {torch.float64: 1e-12, torch.float32: 5e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2,
       torch.complex128: 1e-12, torch.complex64: 5e-5}
HALF = [torch.float16, torch.bfloat16]
FLOATS = [torch.float64, torch.float32, *HALF]


def matrix(dtypes, n_cases, extra=(None,), long_case=None):
    """(dtype, case[, extra]) parameters. make test: every dtype on case 0, every case in float64, and ``long_case``
    (several chunks carried) with every ``extra`` in float64 and in float32 and bfloat16, the dtypes models train
    in; the rest of the product (the same code in other dtype x case pairs; the harness runs a block's threads as
    OS threads: seconds per call) slow and exhaustive, for make test-all."""
    params = []
    for dtype in dtypes:
        for case in range(n_cases):
            for x in extra:
                core = (case == 0 or dtype == torch.float64) and (x is None or x == extra[0] or case == 0)
                core |= case == long_case and dtype in (torch.float64, torch.float32, torch.bfloat16)
                values = (dtype, case) if extra == (None,) else (dtype, case, x)
                name = f"{str(dtype)[6:]}-case{case}" + ("" if x is None else f"-{x}")
                marks = () if core else (pytest.mark.slow, pytest.mark.exhaustive)
                params.append(pytest.param(*values, marks=marks, id=name))
    return params


@pytest.fixture(scope="module")
def cuda():
    return harness.load()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = torch.view_as_real(a) if a.is_complex() else a, torch.view_as_real(b) if b.is_complex() else b
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all(), "the harness result has NaN/Inf (an element no thread wrote?)"
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() if b.numel() else 0.0


def assert_same(got, want, dtype, what=""):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        if b is None:
            assert a is None, (what, i)
            continue
        assert a.shape == b.shape and a.dtype == b.dtype, (what, i, a.shape, b.shape, a.dtype, b.dtype)
        err = rel_err(a, b)
        assert err <= TOL[dtype], f"{what} output {i}: relative error {err:.3g} > {TOL[dtype]:g}"


def randn(*shape, dtype=torch.float64, gen=None, scale=1.0):
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


# ---- selective scan ---------------------------------------------------------------------------------------

def scan_args(dtype, batch, dim, length, n_state, groups, options, seed=0):
    gen = torch.Generator().manual_seed(seed)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    u = randn(batch, dim, length, dtype=dtype, gen=gen)
    delta = randn(batch, dim, length, dtype=dtype, gen=gen, scale=0.5)
    A = (-(0.5 + torch.rand(dim, n_state, generator=gen, dtype=torch.float64))).to(acc)
    bc = dtype if "bc_input_dtype" in options else acc  # B and C in u's dtype, as mamba_ssm takes them
    B = randn(batch, groups, n_state, length, dtype=bc, gen=gen)
    C = randn(batch, groups, n_state, length, dtype=bc, gen=gen)
    D = randn(dim, dtype=acc, gen=gen) if "D" in options else None
    z = randn(batch, dim, length, dtype=dtype, gen=gen) if "z" in options else None
    bias = randn(dim, dtype=acc, gen=gen, scale=0.3) if "bias" in options else None
    return (u, delta, A, B, C, D, z, bias, "softplus" in options), gen


SCAN_CASES = [  # (batch, dim, length, n_state, groups, options)
    (2, 5, 37, 3, 1, ("D", "z", "bias", "softplus")),
    (1, 6, 130, 4, 3, ("D", "softplus")),  # several backward chunks, grouped B/C
    (3, 3, 1, 2, 3, ()),
    # forward: 128 threads x 16 steps, two chunks, state carried; the states entering steps 1024 and 2048 saved
    # (threads 64 and 0); backward: three chunks of 1024 from them, or from its pre-pass
    (1, 2, 2100, 2, 1, ("D", "z", "bias", "softplus")),
]


@pytest.mark.parametrize("dtype, case", matrix(FLOATS, len(SCAN_CASES), long_case=3))
def test_selective_scan(cuda, dtype, case):
    args, gen = scan_args(dtype, *SCAN_CASES[case])
    got = cuda.selective_scan_fwd(*args)
    assert_same(got, OPS.selective_scan_fwd(*args), dtype, "fwd")  # the saved states too
    out, last, states = got
    grad_out = randn(*out.shape, dtype=dtype, gen=gen)
    grad_last = randn(*last.shape, dtype=last.dtype, gen=gen) if case != 2 else None
    want = OPS.selective_scan_bwd(*args, grad_out, grad_last)
    assert_same(cuda.selective_scan_bwd(*args, grad_out, grad_last), want, dtype, "bwd (pre-pass)")
    if states.numel():
        got = cuda.selective_scan_bwd(*args, grad_out, grad_last, chunk_states=states)
        assert_same(got, want, dtype, "bwd (saved states)")


@pytest.mark.parametrize("dtype, case", [(torch.float64, 0), (torch.float64, 1), (torch.float64, 3),
                                         (torch.bfloat16, 3)])
def test_selective_scan_reverse(cuda, dtype, case):
    """reverse=True runs in the kernels (the chunks from the last, each thread's steps from its last, the block
    scans the other way), without flipped copies: outputs, the states saved at the boundaries before steps 1024 and
    2048 (each holding the steps after it), and gradients from the saved states or the pre-pass, as the CPU's."""
    args, gen = scan_args(dtype, *SCAN_CASES[case])
    got = cuda.selective_scan_fwd(*args, None, True)
    assert_same(got, OPS.selective_scan_fwd(*args, None, True), dtype, "fwd")
    out, last, states = got
    grad_out = randn(*out.shape, dtype=dtype, gen=gen)
    grad_last = randn(*last.shape, dtype=last.dtype, gen=gen)
    want = OPS.selective_scan_bwd(*args, grad_out, grad_last, True)
    assert_same(cuda.selective_scan_bwd(*args, grad_out, grad_last, True), want, dtype, "bwd (pre-pass)")
    got = cuda.selective_scan_bwd(*args, grad_out, grad_last, True, chunk_states=states)
    assert_same(got, want, dtype, "bwd (saved states)")


def test_selective_scan_backward_starts_its_chunks_from_the_saved_states(cuda):
    """Given the forward's states, the backward reads them instead of running its pre-pass: wrong states (zero)
    give wrong gradients from the second chunk on."""
    args, gen = scan_args(torch.float64, *SCAN_CASES[3])
    out, _, states = cuda.selective_scan_fwd(*args)
    grad_out = randn(*out.shape, gen=gen)
    want = cuda.selective_scan_bwd(*args, grad_out, None, chunk_states=states)
    wrong = cuda.selective_scan_bwd(*args, grad_out, None, chunk_states=torch.zeros_like(states))
    # grad delta and C read the states (the adjoint, so grad u and B, does not): the first chunk, which starts
    # from zero, is unchanged, the others are not
    for i in (1, 4):
        assert torch.equal(wrong[i][..., :1024], want[i][..., :1024])
        assert rel_err(wrong[i][..., 1024:], want[i][..., 1024:]) > 1e-3


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", [0, 1])
def test_selective_scan_b_and_c_in_the_input_dtype(cuda, dtype, case):
    batch, dim, length, n_state, groups, options = SCAN_CASES[case]
    args, gen = scan_args(dtype, batch, dim, length, n_state, groups, (*options, "bc_input_dtype"))
    assert args[3].dtype == args[4].dtype == dtype
    assert_same(cuda.selective_scan_fwd(*args), OPS.selective_scan_fwd(*args), dtype, "fwd")
    out = OPS.selective_scan_fwd(*args)[0]
    grad_out = randn(*out.shape, dtype=dtype, gen=gen)
    assert_same(cuda.selective_scan_bwd(*args, grad_out, None), OPS.selective_scan_bwd(*args, grad_out, None), dtype,
                "bwd")


@pytest.mark.parametrize("dtype", FLOATS)
def test_selective_scan_low_rank_delta(cuda, dtype):
    """delta_proj: each row's delta formed from the low-rank delta chunk by chunk (rank coalesced loads)."""
    args, gen = scan_args(dtype, 2, 6, 150, 3, 2, ("D", "z", "bias", "softplus"))
    low = randn(2, 3, 2, 150, dtype=dtype, gen=gen, scale=0.5)  # (batch, 3 delta groups, rank 2, L)
    proj = randn(6, 2, dtype=args[2].dtype, gen=gen)
    args = (args[0], low, *args[2:], proj)
    for reverse in (False, True):  # vim2's backward direction: low rank and reverse
        assert_same(cuda.selective_scan_fwd(*args, reverse), OPS.selective_scan_fwd(*args, reverse), dtype, "fwd")


# ---- quasi-separable mixing -------------------------------------------------------------------------------

def qs_args(dtype, batch, length, heads, feat, n_state, groups, scalar_a, strided_x, seed=0, selection_dtype=None):
    """selection_dtype: that of dt, B, C and their _rev (the op takes them in the accumulation dtype or in x's)."""
    gen = torch.Generator().manual_seed(seed)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    sel = selection_dtype or acc
    a_cols = 1 if scalar_a else n_state
    x = randn(batch, heads, length, feat, dtype=dtype, gen=gen)
    x = x.transpose(1, 2) if strided_x else x.transpose(1, 2).contiguous()  # (batch, L, H, P), maybe strided
    dirs = []
    for _ in range(2):
        dirs += [randn(batch, length, heads, dtype=sel, gen=gen, scale=0.5),
                 (-torch.rand(heads, a_cols, generator=gen, dtype=torch.float64) - 0.1).to(acc),
                 randn(batch, length, groups, n_state, dtype=sel, gen=gen),
                 randn(batch, length, groups, n_state, dtype=sel, gen=gen)]
    gamma = randn(batch, length, heads, dtype=acc, gen=gen)
    bias = randn(heads, dtype=acc, gen=gen, scale=0.2)
    return [x, *dirs, gamma, bias, None], gen


QS_CASES = [  # (batch, length, heads, feat, n_state, groups, scalar_a, strided_x)
    (2, 13, 4, 3, 5, 2, False, True),
    (1, 21, 3, 5, 2, 1, True, False),
    (3, 1, 2, 1, 3, 2, False, False),
    (1, 6, 2, 3, 17, 1, False, True),  # N > 16: two state groups (three in float64)
    (1, 150, 6, 7, 3, 3, False, True),  # 3 chunks of 64 steps (the last one 22), 42 columns: 2 tiles of 32 lanes,
                                        # warps across heads and groups
    (1, 70, 2, 9, 17, 2, True, False),  # scalar A with state groups; the second chunk fills part of one segment
                                        # (batch 1: batch offsets are cases 0 and 2's; each batch row costs ~10 s here)
]


@pytest.mark.parametrize("dtype, case, hydra_shift", matrix(FLOATS, len(QS_CASES), extra=(False, True), long_case=4))
def test_qs_mix(cuda, dtype, case, hydra_shift):
    args, gen = qs_args(dtype, *QS_CASES[case])
    flags = (case != 1, hydra_shift)  # dt_softplus on in cases 0 and 2
    assert_same(cuda.qs_mix_fwd(*args, *flags), OPS.qs_mix_fwd(*args, *flags), dtype, "fwd")
    grad_y = randn(*args[0].shape, dtype=dtype, gen=gen)
    assert_same(cuda.qs_mix_bwd(grad_y, *args, *flags), OPS.qs_mix_bwd(grad_y, *args, *flags), dtype, "bwd")


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", [0, 5])
def test_qs_mix_selection_in_the_input_dtype(cuda, dtype, case):
    """dt, B, C (both directions) in x's dtype, as a bf16 projection gives them: read as they are."""
    args, gen = qs_args(dtype, *QS_CASES[case], selection_dtype=dtype)
    assert {args[i].dtype for i in (1, 3, 4, 5, 7, 8)} == {dtype}
    flags = (True, False)
    assert_same(cuda.qs_mix_fwd(*args, *flags), OPS.qs_mix_fwd(*args, *flags), dtype, "fwd")
    grad_y = randn(*args[0].shape, dtype=dtype, gen=gen)
    assert_same(cuda.qs_mix_bwd(grad_y, *args, *flags), OPS.qs_mix_bwd(grad_y, *args, *flags), dtype, "bwd")


# ---- 2-D SSM kernel ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("is_complex", [False, True])
@pytest.mark.parametrize("shape", [(3, 5, 7, 4), (1, 2, 1, 9), (3, 16, 5, 6)])  # (S, N, H, W); N = 2, 16: warp sums
def test_ssm2d_kernel(cuda, dtype, is_complex, shape):
    S, N, H, W = shape
    gen = torch.Generator().manual_seed(1)
    tail = (2,) if is_complex else ()
    A = randn(4, S, N, *tail, dtype=dtype, gen=gen, scale=0.4)
    B, C = randn(2, S, N, *tail, dtype=dtype, gen=gen), randn(2, S, N, *tail, dtype=dtype, gen=gen)
    assert_same(cuda.ssm2d_kernel_fwd(A, B, C, H, W), OPS.ssm2d_kernel_fwd(A, B, C, H, W), dtype, "fwd")
    grad = randn(S, H, W, dtype=dtype, gen=gen)
    assert_same(cuda.ssm2d_kernel_bwd(grad, A, B, C, H, W), OPS.ssm2d_kernel_bwd(grad, A, B, C, H, W), dtype, "bwd")


# ---- eSSM state kernel ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("shape", [((2, 3), 13, 29), ((1,), 300, 601)])  # (modes, L, n_fft)
def test_essm_kernel(cuda, dtype, bidirectional, shape):
    modes, length, n_fft = shape
    gen = torch.Generator().manual_seed(2)
    g_re, g_im, z_im = (randn(*modes, dtype=dtype, gen=gen) for _ in range(3))
    z_re = -0.05 * torch.rand(*modes, generator=gen, dtype=torch.float64).to(dtype)
    p = (g_re, g_im, z_re, z_im)
    assert_same(cuda.essm_kernel(*p, length, n_fft, bidirectional), OPS.essm_kernel(*p, length, n_fft, bidirectional),
                dtype, "fwd")
    grad = randn(*modes, n_fft, dtype=dtype, gen=gen)
    assert_same(cuda.essm_kernel_bwd(grad, *p, length, bidirectional),
                OPS.essm_kernel_bwd(grad, *p, length, bidirectional), dtype, "bwd")


# ---- Myo tree solve ---------------------------------------------------------------------------------------

def myo_weights(shape, dtype, arity, gen):
    """Edge weights in the stable regime |b| <= 1/(k+1) (as tests/ops/test_myo.py)."""
    scale = 1.0 / (arity + 1)
    if dtype.is_complex:
        rho, phase = (torch.rand(shape, dtype=torch.float64, generator=gen) for _ in range(2))
        return (-scale * rho * torch.exp(2j * torch.pi * phase)).to(dtype)
    return (scale * (2 * torch.rand(shape, dtype=torch.float64, generator=gen) - 1)).to(dtype)


ACC = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, *HALF, torch.complex64, torch.complex128])
@pytest.mark.parametrize("form", ["pyramid", "per_node"])
def test_myo_solve(cuda, dtype, form):
    gen = torch.Generator().manual_seed(3)
    tree = myo_tree(11, 3) if form == "pyramid" else myo_quadtree(3, 5)
    n, depth = tree.parent.numel(), len(tree.level_sizes)
    batch, channels = 2, 7
    acc = ACC.get(dtype, dtype)
    u = (torch.randn(batch, n, channels, generator=gen, dtype=torch.complex128 if dtype.is_complex else torch.float64)
         .to(dtype))
    if form == "pyramid":
        b, b_index, skew = myo_weights((1, depth, channels), acc, tree.arity, gen), tree.level, False
    else:
        b, b_index, skew = myo_weights((batch, n, channels), acc, tree.arity, gen), None, True
    args = (b, tree.parent, b_index, skew)
    x = OPS.myo_solve_fwd(u, *args)
    assert_same(cuda.myo_solve_fwd(u, *args), x, dtype, "fwd")
    grad_x = torch.randn(x.shape, generator=gen, dtype=torch.complex128 if dtype.is_complex else torch.float64)
    grad_x = grad_x.to(dtype)
    assert_same(cuda.myo_solve_bwd(grad_x, x, *args), OPS.myo_solve_bwd(grad_x, x, *args), dtype, "bwd")


def random_forest(num_nodes: int, roots: int, gen) -> torch.Tensor:
    """Parent indices of a random level-major forest (parent[v] > v; `roots` nodes at the end without a parent):
    leaves at many depths, so levels are not contiguous and most sweep windows are short."""
    parent = torch.full((num_nodes,), -1, dtype=torch.long)
    for v in range(num_nodes - roots):
        hi = min(num_nodes, v + 6)
        parent[v] = int(torch.randint(v + 1, hi, (1,), generator=gen))
    return parent


MYO_ODD_CASES = [  # (tree, batch, channels, form)
    ("kary", 2, 13, "pyramid"),   # 12,000 nodes: 6-channel tiles (window 2688) and a 1-channel tail; the two
                                  # lowest levels (6000, 3000 nodes) are longer than a window
    ("quad", 1, 37, "per_node"),  # 9x23 pixels: tiles of 8 channels and a 5-channel tail
    ("forest", 2, 5, "shared_b"),  # random forest (levels not contiguous), b (1, N, C) shared by the batch
]


def myo_odd_case(case: int, dtype=torch.float64):
    """(args, want) of the forward solve of MYO_ODD_CASES[case] (CPU kernel)."""
    kind, batch, channels, form = MYO_ODD_CASES[case]
    gen = torch.Generator().manual_seed(6)
    tree = {"kary": lambda: myo_tree(6000, 2), "quad": lambda: myo_quadtree(9, 23),
            "forest": lambda: myo_tree_from_parent(random_forest(120, 3, gen))}[kind]()
    n, depth = tree.parent.numel(), len(tree.level_sizes)
    u = torch.randn(batch, n, channels, generator=gen,
                    dtype=torch.complex128 if dtype.is_complex else torch.float64).to(dtype)
    if form == "pyramid":
        b, b_index = myo_weights((1, depth, channels), dtype, tree.arity, gen), tree.level
    else:
        b, b_index = myo_weights((batch if form == "per_node" else 1, n, channels), dtype, tree.arity, gen), None
    args = (u, b, tree.parent, b_index, form == "per_node")
    return args, OPS.myo_solve_fwd(*args)


@pytest.mark.parametrize("dtype, case", matrix([torch.float64, torch.float32, torch.complex64], len(MYO_ODD_CASES)))
def test_myo_solve_odd_trees(cuda, dtype, case):
    args, x = myo_odd_case(case, dtype)
    assert_same(cuda.myo_solve_fwd(*args), x, dtype, "fwd")
    grad_x = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64 if not
                         dtype.is_complex else torch.complex128).to(dtype)
    rest = args[1:]
    assert_same(cuda.myo_solve_bwd(grad_x, x, *rest), OPS.myo_solve_bwd(grad_x, x, *rest), dtype, "bwd")


# ---- the harness catches bugs -----------------------------------------------------------------------------

def planted(name: str, old: str, new: str, count: int | None = None) -> harness.Harness:
    """The harness with a copy of ssm_plugins/csrc/cuda/<name> where `old` is replaced by `new`."""
    text = (harness.CUDA_SRC / name).read_text()
    assert old in text and (count is None or text.count(old) == count), f"{old!r} not (or not {count}x) in {name}"
    return harness.load(replace={name: text.replace(old, new)})


def essm_bwd_case():
    gen = torch.Generator().manual_seed(4)
    p = tuple(randn(3, dtype=torch.float64, gen=gen) for _ in range(4))
    p = (p[0], p[1], -0.05 * p[2].abs(), p[3])
    grad = randn(3, 600, gen=gen)  # L = 300 lags: every warp of the 256-thread block holds some of the sums
    return (grad, *p, 300, True), OPS.essm_kernel_bwd(grad, *p, 300, True)


def test_harness_catches_a_missing_syncthreads(cuda):
    """essm's backward reduces over the block through shared memory; without its barriers the reduction reads
    partial sums that other warps have not written yet. The harness runs warps in turn between barriers, so
    the race shows every time, and the unmodified kernel passes the same check."""
    args, want = essm_bwd_case()
    assert_same(cuda.essm_kernel_bwd(*args), want, torch.float64)
    broken = planted("essm.cu", "  __syncthreads();", "  // barrier removed", count=2)
    got = broken.essm_kernel_bwd(*args)
    assert max(rel_err(a, b) for a, b in zip(got, want)) > 1e-3


# make test-all: make test keeps one planted bug per kind the harness catches (a missing __syncthreads, a misaligned
# vector load, an out-of-bounds index); the other planted races rebuild a kernel each (20-80 s on 2 cores)
@pytest.mark.exhaustive
def test_harness_catches_a_missing_barrier_in_the_block_scan(cuda):
    """The same for the rebuilt selective scan: without the barrier between the warps' writes of their
    aggregates and the reads of them, a 128-thread block composes stale aggregates into the prefix and the
    carried state."""
    args, _ = scan_args(torch.float32, *SCAN_CASES[3])
    want = OPS.selective_scan_fwd(*args)
    assert_same(cuda.selective_scan_fwd(*args), want, torch.float32)
    broken = planted("selective_scan.cu", "  if (pos == 31) warp_total[warp] = inc;\n  __syncthreads();\n",
                     "  if (pos == 31) warp_total[warp] = inc;\n", count=1)
    got = broken.selective_scan_fwd(*args)
    assert rel_err(got[0], want[0]) > 1e-3


# make test-all: make test keeps one planted bug per kind the harness catches (a missing __syncthreads, a misaligned
# vector load, an out-of-bounds index); the other planted races rebuild a kernel each (20-80 s on 2 cores)
@pytest.mark.exhaustive
def test_harness_catches_a_missing_barrier_before_the_myo_edge_gradients(cuda):
    """The Myo backward reads the solution of every node and its parent for the edge gradients, in another
    assignment of nodes to threads than the down-sweep that wrote them; without the barrier between the two,
    warps read nodes of the last level that other warps have not written yet."""
    args, x = myo_odd_case(0)
    grad_x = randn(*x.shape, gen=torch.Generator().manual_seed(9))
    want = OPS.myo_solve_bwd(grad_x, x, *args[1:])
    assert_same(cuda.myo_solve_bwd(grad_x, x, *args[1:]), want, torch.float64)
    broken = planted("myo.cu", "  __syncthreads();  // the gradient reads", "  // barrier removed; the gradient reads",
                     count=1)
    assert rel_err(broken.myo_solve_bwd(grad_x, x, *args[1:])[1], want[1]) > 1e-3


# make test-all: make test keeps one planted bug per kind the harness catches (a missing __syncthreads, a misaligned
# vector load, an out-of-bounds index); the other planted races rebuild a kernel each (20-80 s on 2 cores)
@pytest.mark.exhaustive
def test_harness_catches_a_missing_barrier_in_the_qs_block_scan(cuda):
    """The QS mixing kernels compose the time segments of a chunk through shared memory; without the barrier
    between the segments' writes of their (decay product, state) pairs and the reads, a warp composes pairs
    that the other warps have not written yet (NaN: the harness refills shared memory with NaN per block)."""
    args, _ = qs_args(torch.float64, *QS_CASES[4])
    want = OPS.qs_mix_fwd(*args, True, False)
    assert_same(cuda.qs_mix_fwd(*args, True, False), want, torch.float64)
    broken = planted("qs_mix.cu", "= h[n];\n  __syncthreads();\n", "= h[n];\n", count=1)
    got = broken.qs_mix_fwd(*args, True, False)
    assert not torch.isfinite(got).all() or rel_err(got, want) > 1e-3


@pytest.mark.parametrize("dtype, aligned, misaligned", [(torch.float32, 2100, 2101), (torch.bfloat16, 2104, 2100)],
                         ids=["float32", "bfloat16"])
def test_selective_scan_reads_whole_aligned_chunks_in_vectors(cuda, dtype, aligned, misaligned):
    """B and C rows of 2100 float32 steps (2104 bfloat16 ones, B and C in bf16 as mamba_ssm takes them) are 16-byte
    aligned: the forward's whole chunk (2048 steps) and the backward's two (1024 each) read them in 16-byte vectors
    (two a thread, or one of 8 bf16); 2101 float32 steps (2100 bf16 ones) are not, and take the stage. A vector path
    that reverses a thread's steps breaks the aligned rows only, so the launch's check picks the path it names."""
    reversed_steps = planted("selective_scan.cu", "out[k] = to_acc(raw[k]);", "out[k] = to_acc(raw[kItems - 1 - k]);",
                             count=1)
    options = ("D", "softplus") + (("bc_input_dtype",) if dtype != torch.float32 else ())
    for length, vectors in ((aligned, True), (misaligned, False)):
        args, gen = scan_args(dtype, 1, 2, length, 2, 1, options)
        assert args[3].dtype == dtype
        want = OPS.selective_scan_fwd(*args)
        grad_out = randn(*want[0].shape, dtype=dtype, gen=gen)
        want_bwd = OPS.selective_scan_bwd(*args, grad_out, None)
        fwd, bwd = cuda.selective_scan_fwd(*args), cuda.selective_scan_bwd(*args, grad_out, None)
        assert_same(fwd, want, dtype, f"fwd L={length}")
        assert_same(bwd, want_bwd, dtype, f"bwd L={length}")
        wrong_fwd = reversed_steps.selective_scan_fwd(*args)[0]
        wrong_bwd = reversed_steps.selective_scan_bwd(*args, grad_out, None)[3]  # dB
        if vectors:
            assert rel_err(wrong_fwd, want[0]) > 0.1 and rel_err(wrong_bwd, want_bwd[3]) > 0.1
        else:  # the stage: bit for bit the unplanted kernels' results
            assert torch.equal(wrong_fwd, fwd[0]) and torch.equal(wrong_bwd, bwd[3])


def test_harness_catches_a_misaligned_vector_load(cuda):
    """Without the launch's alignment check, rows of 2101 float32 steps (8404 bytes) put every row start but the
    first off a 16-byte boundary: the vector loads fault on a GPU (cudaErrorMisalignedAddress), and the harness
    reports them as that error."""
    args, _ = scan_args(torch.float32, 1, 2, 2101, 2, 1, ("D",))
    unchecked = planted("selective_scan.cu", "(L * sizeof(BC)) % 16 == 0", "true", count=1)
    with pytest.raises(harness.HarnessError, match=r"misaligned address: 16-byte vector access at"):
        unchecked.selective_scan_fwd(*args)


def test_harness_catches_an_out_of_bounds_index(cuda):
    """The forward's grid-stride loop with `<=` runs one element too far and reads the parameters of a mode that
    does not exist: the bounds-checked pointers turn that into cudaErrorIllegalAddress, which the launcher
    raises (on a GPU it would read whatever lies there, silently)."""
    gen = torch.Generator().manual_seed(5)
    p = tuple(randn(2, 3, gen=gen) for _ in range(4))
    cuda.essm_kernel(*p, 7, 14, False)  # the unmodified kernel is fine
    broken = planted("essm.cu", "idx < total;", "idx <= total;", count=1)
    with pytest.raises(harness.HarnessError, match=r"illegal address: 8-byte access at .*, element 6 of an "
                                                   r"allocation of 6 elements"):
        broken.essm_kernel(*p, 7, 14, False)



@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_selective_scan_long_sequence_large_delta_stays_finite(cuda, dtype):
    """L = 16384 (8 chunks of 2048 carried through the block scan) with delta up to ~12 after softplus: 16-bit
    inputs with float32 state give finite values equal to the CPU kernel's wherever float32 is finite."""
    args, gen = scan_args(dtype, 1, 2, 16384, 3, 1, ("D", "z", "softplus"))
    args = list(args)
    args[1] = (args[1].float() * 4 + 6).to(dtype)  # large steps: exp(dt A) underflows towards 0
    fwd = cuda.selective_scan_fwd(*args)
    want = OPS.selective_scan_fwd(*args)
    assert torch.isfinite(want[0].float()).all() and torch.isfinite(fwd[0].float()).all()
    assert_same(fwd, want, dtype, "fwd")
    grad_out = randn(*fwd[0].shape, dtype=dtype, gen=gen)
    got = cuda.selective_scan_bwd(*args, grad_out, None, chunk_states=fwd[2])
    assert all(torch.isfinite(t.float()).all() for t in got if t is not None)
    assert_same(got, OPS.selective_scan_bwd(*args, grad_out, None), dtype, "bwd")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selective_scan_infinite_decay_rates_leave_the_padding_steps_the_identity(cuda, dtype):
    """A_n = -inf (an overflowed -exp(A_log)): every real step decays by exp(dt A_n) = 0 and the steps past the
    row's end (dt = 0 in the kernel's last, partial chunk) must decay by exactly 1, not 0 * inf = NaN: the last
    state equals the CPU kernel's (37 steps: one partial chunk of 256)."""
    args, _ = scan_args(dtype, 2, 3, 37, 4, 1, ("D", "z", "bias", "softplus"))
    args = list(args)
    args[2] = args[2].clone()
    args[2][:, 1] = -torch.inf
    want = OPS.selective_scan_fwd(*args)
    assert torch.isfinite(want[1]).all()
    assert_same(cuda.selective_scan_fwd(*args), want, dtype, "fwd")


# ---- the harness's own semantics (tests/cuda_harness/selftest.cu) -----------------------------------------

@pytest.fixture(scope="module")
def selftest():
    lib = harness.load(extra=("selftest.cu",)).lib
    lib.selftest_message.restype = harness.ctypes.c_char_p

    def run(which, threads, rows=1):
        out = torch.full((rows, threads), -1, dtype=torch.int32)
        lib.cuda_harness_clear()
        lib.cuda_harness_register(out.data_ptr(), out.nbytes)
        code = lib.selftest(which, harness.ctypes.c_void_p(out.data_ptr()), threads)
        message = lib.selftest_message().decode() if code else ""
        lib.cuda_harness_clear()
        return code, message, out
    return run


def test_harness_warp_intrinsics_and_barriers_follow_cuda(selftest):
    code, _, out = selftest(0, 64, rows=6)
    assert code == 0
    i = torch.arange(64)
    lane, base = i % 32, i - i % 32
    assert out[0].tolist() == ((base + 3) * 10).tolist()
    assert out[1].tolist() == torch.where(lane >= 2, i - 2, i).tolist()
    assert out[2].tolist() == torch.where(i % 16 + 5 < 16, i + 5, i).tolist()
    assert out[3].tolist() == (i ^ 1).tolist()
    ballot = sum(1 << k for k in range(32) if k % 3 == 0)
    assert out[4].tolist() == [ballot - (1 << 32) if ballot >= 1 << 31 else ballot] * 64  # as int32
    assert out[5].tolist() == [int(i.sum())] * 64  # every thread sees the whole block's sum after the barrier


def test_harness_reports_a_shuffle_with_exited_lanes_and_a_shared_memory_overrun(selftest):
    code, message, _ = selftest(1, 32)
    assert code != 0 and "exited lanes" in message
    code, message, _ = selftest(2, 32)
    assert code == 700 and "illegal address: 4-byte access" in message and "element 32 of an allocation of 32" in message


@pytest.mark.parametrize("op", ["selective_scan", "essm", "qs_mix", "myo"])
def test_kernels_are_right_with_all_warps_running_concurrently(cuda, op):
    """The default schedule runs one warp at a time between barriers; the kernels must also be right when every
    warp of the block is a free-running OS thread (the interleavings the OS picks)."""
    cuda.set_schedule("concurrent")
    try:
        if op == "selective_scan":
            args, gen = scan_args(torch.float32, *SCAN_CASES[3])  # 128-thread blocks, two chunks
            fwd = cuda.selective_scan_fwd(*args)
            assert_same(fwd, OPS.selective_scan_fwd(*args), torch.float32)
            g = randn(1, 2, 2100, dtype=torch.float32, gen=gen)
            want = OPS.selective_scan_bwd(*args, g, None)
            assert_same(cuda.selective_scan_bwd(*args, g, None), want, torch.float32)
            assert_same(cuda.selective_scan_bwd(*args, g, None, chunk_states=fwd[2]), want, torch.float32)
        elif op == "essm":
            args, want = essm_bwd_case()  # 256-thread blocks reducing through shared memory
            assert_same(cuda.essm_kernel_bwd(*args), want, torch.float64)
        elif op == "myo":
            args, want = myo_odd_case(0)  # level windows ordered by the reductions' barriers, atomics into parents
            assert_same(cuda.myo_solve_fwd(*args), want, torch.float64)
            grad_x = randn(*want.shape, gen=torch.Generator().manual_seed(8))
            assert_same(cuda.myo_solve_bwd(grad_x, want, *args[1:]), OPS.myo_solve_bwd(grad_x, want, *args[1:]),
                        torch.float64)
        else:
            args, gen = qs_args(torch.float64, *QS_CASES[4])  # block scans over 8 segments, 3 chunks, warp sums
            g = randn(*args[0].shape, gen=gen)
            assert_same(cuda.qs_mix_bwd(g, *args, True, False), OPS.qs_mix_bwd(g, *args, True, False), torch.float64)
    finally:
        cuda.set_schedule("ordered")


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_qs_mix_and_myo_long_sequences_stay_finite(cuda, dtype):
    """QS mixing with large steps (dt up to ~10 after softplus) over L = 16384 forward (256 chunks carried
    through the block scan) and L = 1024 backward (16 chunks; its per-step warp sums make the harness slow), and
    a Myo solve over 16384 leaves: 16-bit inputs, float32 state, finite and equal to the CPU kernels."""
    args, gen = qs_args(dtype, 1, 16384, 2, 3, 4, 1, False, False)
    for i in (1, 5):  # dt, dt_rev
        args[i] = args[i] * 4 + 6
    got = cuda.qs_mix_fwd(*args, True, False)
    assert torch.isfinite(got.float()).all()
    assert_same(got, OPS.qs_mix_fwd(*args, True, False), dtype, "fwd")
    args, gen = qs_args(dtype, 1, 1024, 2, 3, 4, 1, False, False)
    for i in (1, 5):
        args[i] = args[i] * 4 + 6
    grad_y = randn(*args[0].shape, dtype=dtype, gen=gen)
    got = cuda.qs_mix_bwd(grad_y, *args, True, False)
    assert all(torch.isfinite(t.float()).all() for t in got)
    assert_same(got, OPS.qs_mix_bwd(grad_y, *args, True, False), dtype, "bwd")
    tree = myo_tree(16384, 2)
    u = torch.randn(1, tree.parent.numel(), 4, generator=gen).to(dtype)
    b = myo_weights((1, len(tree.level_sizes), 4), torch.float32, 2, gen)
    x = cuda.myo_solve_fwd(u, b, tree.parent, tree.level, False)
    assert torch.isfinite(x.float()).all()
    assert_same(x, OPS.myo_solve_fwd(u, b, tree.parent, tree.level, False), dtype, "myo fwd")
