"""Every custom op's fake (meta) kernel promises the real kernel's outputs: shape, dtype AND strides.

Inductor trusts the fake kernel's strides when it lays out the compiled graph (and asserts them at run time:
``expected size 128==128, stride 17==1``), so a fake kernel that says "same layout as the input" while the real
CPU kernel returns a contiguous tensor breaks ``torch.compile`` as soon as an input arrives transposed. The
table below has one row per op registered under ``torch.ops.ssm_plugins`` (forward and backward); each row
builds inputs that are non-contiguous (transposed, sliced, expanded, channels-last) and of odd sizes, runs the
real CPU kernel and the fake kernel under FakeTensorMode, and compares every output. An op without a row fails
``test_every_op_has_a_row``.

The contract the kernels keep: every output is contiguous, except those that take an input's layout
(``empty_like``): ``qs_mix_fwd``'s y and ``qs_mix_bwd``'s dx take x's (the channel mixer passes transposed views
and gets a transposed y, and gives its input's gradient, without a copy), ``selective_scan_fwd``'s out takes u's
(token-major activations in, token-major out).
"""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten, tree_map_only

from ssm_plugins.ops import _backend, _compile_cache, myo_quadtree, myo_tree, selective_scan

pytestmark = pytest.mark.skipif(not _backend.backend_info()["extension"], reason="needs the compiled extension")

OPS = torch.ops.ssm_plugins
GEN = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64).to(dtype)


def transposed(*shape, dims=(-1, -2), dtype=None):
    """A tensor of ``shape`` whose memory has ``dims`` swapped (a transposed view, not contiguous)."""
    store = list(shape)
    store[dims[0]], store[dims[1]] = store[dims[1]], store[dims[0]]
    return randn(*store, dtype=dtype or torch.float32).transpose(*dims)


# ---- selective scan ------------------------------------------------------------------------------------

def _scan_args(kind):
    batch, dim, length, n_state, groups = 2, 6, 7, 3, 2
    if kind in ("transposed", "bf16", "bf16_bc"):  # u, delta, z as (batch, L, dim) views; B, C sliced, transposed
        low = torch.bfloat16 if kind.startswith("bf16") else torch.float32  # bf16: u, delta, z (the rest float32)
        bc = low if kind == "bf16_bc" else torch.float32  # bf16_bc: B, C in u's dtype too (mamba_ssm's contract)
        u, delta, z = (transposed(batch, dim, length, dtype=low) for _ in range(3))
        B = randn(batch, groups, n_state, 2 * length, dtype=bc)[..., ::2]
        C = transposed(batch, groups, n_state, length, dims=(1, 3), dtype=bc)
        A = transposed(dim, n_state, dims=(0, 1))
        D, bias = randn(2 * dim)[::2], randn(dim)
    else:  # contiguous, odd sizes, no optional inputs
        u, delta = randn(1, 5, 3), randn(1, 5, 3).abs()
        A, B, C = -randn(5, 1).abs(), randn(1, 1, 1, 3), randn(1, 1, 1, 3)
        D = z = bias = None
        return [u, delta, A, B, C, D, z, bias, False]
    return [u, delta.abs(), -A.abs(), B, C, D, z, bias, True]


def selective_scan_fwd(kind):
    return _scan_args(kind)


def selective_scan_bwd(kind):
    args = _scan_args(kind)
    out, last, _ = OPS.selective_scan_fwd(*args)
    grad_out = transposed(*out.shape, dtype=out.dtype) if kind != "plain" else torch.randn_like(out)
    grad_last = transposed(*last.shape) if kind != "plain" else None
    return [*args, grad_out, grad_last]


# ---- quasi-separable mixing ----------------------------------------------------------------------------

def _qs_args(kind):
    if kind in ("transposed", "bf16", "bf16_sel"):  # the channel mixer's layout: strided views, static gamma expanded
        batch, length, heads, feat, groups, n_state = 2, 5, 4, 3, 2, 3
        low = torch.bfloat16 if kind.startswith("bf16") else None
        sel = low if kind == "bf16_sel" else None  # bf16_sel: dt, B, C (both directions) in x's dtype too
        x = transposed(batch, length, heads, feat, dims=(1, 2), dtype=low)
        dt = transposed(batch, length, heads, dims=(1, 2), dtype=sel)
        dt_rev = randn(batch, length, heads, dtype=sel or torch.float32)
        A, A_rev = -randn(heads, n_state).abs(), -randn(heads, 1).abs()
        B, C, B_rev, C_rev = (transposed(batch, length, groups, n_state, dims=(1, 3), dtype=sel) for _ in range(4))
        gamma = randn(length, heads).expand(batch, length, heads)
        bias, bias_rev = randn(heads), randn(heads)
        return [x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, bias, bias_rev, True, False]
    if kind == "sliced":  # x not dense (a slice): empty_like gives a contiguous y
        batch, length, heads, feat, n_state = 1, 3, 2, 1, 2
        x = randn(batch, length, heads, 2 * feat)[..., ::2]
    else:
        batch, length, heads, feat, n_state = 1, 3, 2, 1, 2
        x = randn(batch, length, heads, feat)
    dt, dt_rev = randn(batch, length, heads).abs(), randn(batch, length, heads).abs()
    A, A_rev = -randn(heads, 1).abs(), -randn(heads, 1).abs()
    B, C, B_rev, C_rev = (randn(batch, length, 1, n_state) for _ in range(4))
    gamma = randn(batch, length, heads)
    return [x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, None, None, False, True]


def qs_mix_fwd(kind):
    return _qs_args(kind)


def qs_mix_bwd(kind):
    args = _qs_args(kind)
    y = OPS.qs_mix_fwd(*args)
    grad = transposed(*y.shape, dims=(0, 2), dtype=y.dtype) if kind not in ("sliced", "plain") else torch.randn_like(y)
    return [grad, *args]


# ---- 2-D SSM kernel and FFT convolution ----------------------------------------------------------------

def _ssm2d_args(kind):
    S, N = 4, 3
    if kind == "transposed":  # complex parameters as (…, 2) pairs, A with S and N swapped in memory
        A = transposed(4, S, N, 2, dims=(1, 2)) * 0.3
        B, C = randn(2, S, N, 2) * 0.3, randn(2, 2 * S, N, 2)[:, ::2]
        return [A, B, C, 5, 3]
    A = torch.sigmoid(randn(4, S, N))
    return [A, torch.sigmoid(randn(2, S, N)), randn(2, S, N), 1, 7]


def ssm2d_kernel_fwd(kind):
    return _ssm2d_args(kind)


def ssm2d_kernel_bwd(kind):
    args = _ssm2d_args(kind)
    K = OPS.ssm2d_kernel_fwd(*args)
    grad = transposed(*K.shape, dims=(1, 2)) if kind == "transposed" else torch.randn_like(K)
    return [grad, *args]


def _conv_args(kind):
    if kind == "transposed":  # channels-last x, a broadcast kernel transposed in memory
        x = randn(2, 5, 7, 3).permute(0, 3, 1, 2)
        return [x, transposed(3, 4, 6), 1, 2]
    return [randn(1, 3, 1, 5), randn(3, 2, 5)[:, :1], 0, 4]


def fft_conv2d(kind):
    return _conv_args(kind)


def fft_conv2d_bwd(kind):
    args = _conv_args(kind)
    y = OPS.fft_conv2d(*args)
    grad = transposed(*y.shape, dims=(1, 3)) if kind == "transposed" else torch.randn_like(y)
    return [grad, *args]


# ---- eSSM state kernel -----------------------------------------------------------------------------------

def _essm_args(kind):
    if kind == "transposed":
        heads, modes = 3, 5
        parts = [transposed(heads, modes, dims=(0, 1)) for _ in range(4)]
        parts[2] = -parts[2].abs() - 0.01
        return [*parts, 7, 15, True]
    g = torch.complex(randn(1, 2), randn(1, 2))
    z = torch.complex(-randn(1, 2).abs() - 0.01, randn(1, 2))
    return [g.real, g.imag, z.real, z.imag, 1, 2, False]  # strided views of complex storage


def essm_kernel(kind):
    return _essm_args(kind)


def essm_kernel_bwd(kind):
    args = _essm_args(kind)
    K = OPS.essm_kernel(*args)
    grad = transposed(*K.shape, dims=(0, 1)) if kind == "transposed" else torch.randn_like(K)
    return [grad, *args[:5], args[6]]


# ---- Myosotis tree solve ---------------------------------------------------------------------------------

def _myo_args(kind):
    if kind == "transposed":  # u (batch, N, channels) stored channels-major; per-node b shared by the batch
        tree = myo_tree(7, 3)
        nodes = tree.parent.numel()
        u = transposed(2, nodes, 5, dims=(1, 2))
        b = transposed(1, nodes, 5, dims=(1, 2)) * 0.2
        return [u, b, tree.parent, None, False]
    tree = myo_quadtree(3, 2)
    nodes, depth = tree.parent.numel(), len(tree.level_sizes)
    u = torch.complex(randn(1, nodes, 1), randn(1, nodes, 1))
    b = torch.complex(randn(1, depth, 1), randn(1, depth, 1)) * 0.1
    return [u, b, tree.parent, tree.level, True]


def myo_solve_fwd(kind):
    return _myo_args(kind)


def myo_solve_bwd(kind):
    u, b, parent, b_index, skew = _myo_args(kind)
    x = OPS.myo_solve_fwd(u, b, parent, b_index, skew)
    grad = transposed(*x.shape, dims=(1, 2), dtype=x.dtype) if kind == "transposed" else torch.randn_like(x)
    return [grad, x if kind != "transposed" else x.transpose(1, 2).contiguous().transpose(1, 2), b, parent,
            b_index, skew]


ROWS = {f.__name__: f for f in (selective_scan_fwd, selective_scan_bwd, qs_mix_fwd, qs_mix_bwd, ssm2d_kernel_fwd,
                                 ssm2d_kernel_bwd, fft_conv2d, fft_conv2d_bwd, essm_kernel, essm_kernel_bwd,
                                 myo_solve_fwd, myo_solve_bwd)}
# Input layouts per op (default: transposed and plain); bf16: half-precision sequences, float32 parameters.
_QS_KINDS = ("transposed", "bf16", "bf16_sel", "sliced", "plain")
_SCAN_KINDS = ("transposed", "bf16", "bf16_bc", "plain")
KINDS = {"qs_mix_fwd": _QS_KINDS, "qs_mix_bwd": _QS_KINDS,
         "selective_scan_fwd": _SCAN_KINDS, "selective_scan_bwd": _SCAN_KINDS}


def registered_ops():
    return sorted(name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("ssm_plugins::"))


def test_every_op_has_a_row():
    """A new op under torch.ops.ssm_plugins needs a row here (its fake kernel's strides are then checked)."""
    ops = registered_ops()
    assert len(ops) >= 12, ops
    assert set(ops) == set(ROWS), f"ops without a row: {sorted(set(ops) - set(ROWS))}, " \
                                  f"rows without an op: {sorted(set(ROWS) - set(ops))}"


def _meta(t):
    if t is None:
        return None
    return (tuple(t.shape), t.dtype, tuple(s for s, n in zip(t.stride(), t.shape) if n > 1),
            tuple(t.stride()))


def _cases():
    return [(op, kind) for op in ROWS for kind in KINDS.get(op, ("transposed", "plain"))]


def on_device(args, device):
    """``args`` with every tensor moved to ``device`` in the same memory layout: the whole storage is copied and
    viewed again with the tensor's sizes, strides and offset (``.to`` would make sliced and expanded views dense)."""
    def move(t):
        if t.device.type == device:
            return t
        storage = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (t.untyped_storage().nbytes()
                                                                             // t.element_size(),), (1,))
        return storage.to(device).as_strided(t.shape, t.stride(), t.storage_offset())
    return tree_map_only(torch.Tensor, move, args)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,kind", _cases())
def test_fake_kernel_matches_real_outputs(op, kind, device):
    """Shape, dtype and strides of every output: the real kernel (CPU, and CUDA on a GPU: its glue may lay out
    outputs differently) vs the fake kernel under FakeTensorMode."""
    args = on_device(ROWS[op](kind), device)
    overload = getattr(OPS, op).default
    assert any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args) or kind == "plain"
    real, _ = tree_flatten(overload(*args))
    with FakeTensorMode() as mode:
        fake_args = tree_map_only(torch.Tensor, mode.from_tensor, args)
        fake, _ = tree_flatten(overload(*fake_args))
    assert len(real) == len(fake)
    for i, (r, f) in enumerate(zip(real, fake)):
        assert (r is None) == (f is None), f"{op} output {i}: real {r is None}, fake {f is None}"
        if r is None:
            continue
        real_meta, fake_meta = _meta(r), _meta(f)
        assert real_meta[:3] == fake_meta[:3], f"{op} output {i}: real {real_meta}, fake {fake_meta}"
        assert real_meta[3] == fake_meta[3], f"{op} output {i}: strides of size-1 dims differ: real {real_meta}, " \
                                              f"fake {fake_meta}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(ROWS))
def test_opcheck_faketensor(op, device):
    """torch.library.opcheck (schema; fake kernel's shapes and dtypes) on the strided row. It does not replace the
    test above: its stride comparison (torch._prims_common.check_significant_strides) runs for CUDA tensors
    only, so on the CPU it passed with every stride mismatch that test found; on a GPU it checks them too."""
    args = on_device(ROWS[op]("transposed"), device)
    torch.library.opcheck(getattr(OPS, op).default, args, test_utils=("test_schema", "test_faketensor"))


def test_compile_caches_are_keyed_by_the_ops_sources(monkeypatch, tmp_path):
    """Inductor's FX-graph cache and AOTAutograd's cache key a graph by its own code: a graph calling our ops does
    not change when their fake kernels or autograd formulas do, so ``import ssm_plugins`` tags the caches with a
    digest of ssm_plugins/ops (``_compile_cache``). A warm cache hits for the same digest and misses for another one
    (without the tag, the third compile below hits the second's entry)."""
    from torch._dynamo.utils import counters

    tag = torch.compiler.config.cache_key_tag
    assert _compile_cache._PREFIX + _compile_cache.sources_digest() in tag.split(";")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setattr(torch.compiler.config, "cache_key_tag", "user-tag")  # restored after the test
    args = (torch.randn(1, 4, 8), torch.rand(1, 4, 8), -torch.rand(4, 3), torch.randn(1, 3, 8), torch.randn(1, 3, 8))

    def compile_and_count(digest):
        assert _compile_cache.tag_compile_caches(digest) == f"user-tag;{_compile_cache._PREFIX}{digest}"
        torch._dynamo.reset()
        counters.clear()
        torch.compile(selective_scan, fullgraph=True)(*args)
        return counters["inductor"]["fxgraph_cache_hit"], counters["aot_autograd"]["autograd_cache_hit"]

    assert compile_and_count("a" * 16) == (0, 0)
    assert compile_and_count("a" * 16) == (1, 1)
    assert compile_and_count("b" * 16) == (0, 0)


def test_sources_digest_follows_every_ops_source(tmp_path):
    (tmp_path / "reference").mkdir()
    (tmp_path / "selective_scan.py").write_text("fake = 1\n")
    (tmp_path / "reference" / "qs_mix.py").write_text("formula = 1\n")
    before = _compile_cache.sources_digest(tmp_path)
    (tmp_path / "reference" / "qs_mix.py").write_text("formula = 2\n")
    assert _compile_cache.sources_digest(tmp_path) != before
    (tmp_path / "reference" / "qs_mix.py").write_text("formula = 1\n")
    assert _compile_cache.sources_digest(tmp_path) == before
    (tmp_path / "reference" / "__pycache__").mkdir()
    (tmp_path / "reference" / "__pycache__" / "stale.py").write_text("")
    assert _compile_cache.sources_digest(tmp_path) == before

