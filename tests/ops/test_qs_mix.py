"""qs_mix (MambaMixer, arXiv:2403.19888 v2, Eq. 8, App. D; docs/mambamixer.md 'QS operator'): dense Q, chunked
algorithm, f+b S6 identity, kernels vs oracle, gradients."""
from __future__ import annotations

import importlib

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ssm_plugins.ops import _backend, qs_mix, reference
from ssm_plugins.ops.qs_mix_chunked import chunk_length, qs_mix_chunked
from ssm_plugins.ops.reference import qs_matrix

qs_mix_module = importlib.import_module("ssm_plugins.ops.qs_mix")  # the package exports the function under its name
qs_mix_chunked_module = importlib.import_module("ssm_plugins.ops.qs_mix_chunked")
HAS_KERNEL = _backend.has_kernel("qs_mix_fwd", "cpu")
needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="ssm_plugins._C without the qs_mix kernel")


def make_inputs(batch=2, length=11, heads=4, feat=3, n_state=5, groups=2, scalar_a=False, dtype=torch.float64,
                static_gamma=False, seed=0):
    """Head-layout inputs; dt centred on 0 so that dt_softplus and dt_bias both matter."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    a_shape = (heads,) if scalar_a else (heads, n_state)
    t = dict(
        x=rand(batch, length, heads, feat),
        dt=0.5 * rand(batch, length, heads),
        A=-torch.rand(*a_shape, generator=gen, dtype=torch.float64) - 0.1,
        B=rand(batch, length, groups, n_state),
        C=rand(batch, length, groups, n_state),
        dt_rev=0.5 * rand(batch, length, heads),
        A_rev=-torch.rand(*a_shape, generator=gen, dtype=torch.float64) - 0.1,
        B_rev=rand(batch, length, groups, n_state),
        C_rev=rand(batch, length, groups, n_state),
        gamma=rand(length, heads) if static_gamma else rand(batch, length, heads),
    )
    return {k: v.to(dtype) for k, v in t.items()}


def positional(t):
    return [t[k] for k in ("x", "dt", "A", "B", "C", "dt_rev", "A_rev", "B_rev", "C_rev", "gamma")]


def dense_apply(t, **kw):
    """y = Q x with Q built entry by entry (Eq. 8, docs 'QS operator'), one Q per (batch, head) mixing every
    feature of the head."""
    A, A_rev = t["A"], t["A_rev"]
    n_state = t["B"].shape[-1]
    if A.dim() == 1:
        A, A_rev = A[:, None].expand(-1, n_state), A_rev[:, None].expand(-1, n_state)
    gamma = t["gamma"].expand(t["dt"].shape)
    Q = qs_matrix(t["dt"], A, t["B"], t["C"], t["dt_rev"], A_rev, t["B_rev"], t["C_rev"], gamma, **kw)
    return torch.einsum("bhtk,bkhp->bthp", Q, t["x"])


def run_reference(t, monkeypatch, **kw):
    with monkeypatch.context() as m:
        m.setenv("SSM_PLUGINS_BACKEND", "reference")
        return qs_mix(*positional(t), **kw)


# ---- the oracle against the definitions -----------------------------------------------------------------

@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
@pytest.mark.parametrize("scalar_a", [True, False])
def test_reference_equals_dense_q(monkeypatch, qs_shift, scalar_a):
    t = make_inputs(scalar_a=scalar_a)
    bias = torch.randn(4, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    kw = dict(dt_bias=bias, dt_softplus=True, qs_shift=qs_shift)
    dense = dense_apply(t, **kw)
    torch.testing.assert_close(run_reference(t, monkeypatch, **kw), dense, rtol=1e-12, atol=1e-12)
    if HAS_KERNEL:
        torch.testing.assert_close(qs_mix(*positional(t), **kw), dense, rtol=1e-12, atol=1e-12)


def test_dense_q_structure():
    """Q's strict triangles have rank <= N (N-quasi-separable) and its diagonal is gamma."""
    t = make_inputs(batch=1, length=12, heads=1, feat=1, n_state=2, groups=1)
    Q = qs_matrix(t["dt"], t["A"], t["B"], t["C"], t["dt_rev"], t["A_rev"], t["B_rev"], t["C_rev"], t["gamma"])[0, 0]
    torch.testing.assert_close(Q.diagonal(), t["gamma"][0, :, 0])
    for k in range(1, 12):
        assert torch.linalg.matrix_rank(Q[k:, :k]) <= 2  # block strictly below the diagonal
        assert torch.linalg.matrix_rank(Q[:k, k:]) <= 2  # block strictly above
    assert torch.linalg.matrix_rank(Q[6:, :6]) == 2


def head_scalar_a(args):
    """positional() with scalar A as (H, 1), the op's normalised layout that qs_mix_chunked takes."""
    args = list(args)
    args[2], args[6] = args[2][:, None], args[6][:, None]
    return args


@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
@pytest.mark.parametrize("length, chunk", [(11, 1), (11, 3), (11, 4), (11, 11), (11, 16), (1, None), (2, None),
                                           (37, None), (130, None)])
def test_chunked_algorithm_equals_dense_q(qs_shift, length, chunk):
    """App. D's chunked form (qs_mix_chunked): padded last chunks, one chunk, one step a chunk, several chunks'
    states carried (L = 130: three chunks of 44), two groups of two heads."""
    t = make_inputs(length=length, scalar_a=True)
    kw = dict(dt_bias=torch.linspace(-1, 1, 4, dtype=torch.float64), dt_softplus=True, qs_shift=qs_shift)
    got = qs_mix_chunked(*head_scalar_a(positional(t)), **kw, chunk=chunk)
    torch.testing.assert_close(got, dense_apply(t, **kw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
@pytest.mark.parametrize("carry", [2, 3])
def test_chunked_carry_in_groups_equals_dense_q(monkeypatch, qs_shift, carry):
    """More chunks than one matmul carries (CARRY, lowered here): the entering states in groups, recursively (37
    chunks of one step in groups of up to 2: six levels, 37, 19, 10, 5, 3, 2 chunks; of 3: four), with the padding
    of uneven groups."""
    monkeypatch.setattr(qs_mix_chunked_module, "CARRY", carry)
    t = make_inputs(length=37, scalar_a=True)
    kw = dict(dt_bias=torch.linspace(-1, 1, 4, dtype=torch.float64), dt_softplus=True, qs_shift=qs_shift)
    got = qs_mix_chunked(*head_scalar_a(positional(t)), **kw, chunk=1)
    torch.testing.assert_close(got, dense_apply(t, **kw), rtol=1e-12, atol=1e-12)
    leaves = [v[:, :9].requires_grad_() if v.dim() > 2 else v.requires_grad_() for v in head_scalar_a(positional(t))]
    # fast mode (a random projection of the Jacobian, torch's own): the full one took 90 s of make test here
    assert torch.autograd.gradcheck(lambda *a: qs_mix_chunked(*a, **kw, chunk=1), leaves, fast_mode=True)


def test_chunked_work_is_linear_in_length():
    """FLOPs of forward+backward at L = 16k, 32k and 64k (meta tensors: counted, not run) double with L: the
    entering states go in groups of chunks, where one (chunks x chunks) matmul would grow as L² (ratios 2.7 and
    3.1: checked)."""
    def flops(length, heads=1, feat=64, n_state=16):
        meta = lambda *shape: torch.empty(*shape, device="meta", requires_grad=True)  # noqa: E731
        args = [meta(1, length, heads, feat), meta(1, length, heads), meta(heads, 1), meta(1, length, 1, n_state),
                meta(1, length, 1, n_state), meta(1, length, heads), meta(heads, 1), meta(1, length, 1, n_state),
                meta(1, length, 1, n_state), meta(1, length, heads)]
        with FlopCounterMode(display=False) as counter:
            qs_mix_chunked(*args, dt_softplus=True).sum().backward()
        return counter.get_total_flops()
    counts = [flops(n) for n in (16384, 32768, 65536)]
    assert all(1.9 <= b / a <= 2.1 for a, b in zip(counts, counts[1:])), counts


def test_chunk_length_evens_out_the_chunks():
    assert [chunk_length(n) for n in (1, 64, 65, 192, 197, 3136)] == [1, 64, 33, 64, 50, 64]
    # up to P steps a chunk where a head has more than 64 features
    cases = ((197, 64), (192, 197), (300, 197), (3136, 128))
    assert [chunk_length(n, feat) for n, feat in cases] == [50, 192, 150, 126]


@pytest.mark.parametrize("chunk", [4, 9])  # three chunks, one (_one_chunk: no flips, Q's triangles)
@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
def test_chunked_gradcheck(qs_shift, chunk):
    t = make_inputs(batch=1, length=9, heads=2, feat=2, n_state=3, groups=1, scalar_a=True)
    leaves = [v.requires_grad_() for v in head_scalar_a(positional(t))]
    bias = torch.tensor([0.3, -0.2], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *a: qs_mix_chunked(*a[:-1], dt_bias=a[-1], dt_softplus=True, qs_shift=qs_shift, chunk=chunk),
        (*leaves, bias))


@pytest.mark.parametrize("chunk", [None, 200])  # chunks of 50, one chunk
def test_chunked_decays_are_exact_where_running_sums_are_large(chunk):
    """Decays are sums of the log-decays themselves. Every 8th step forgets (Δ A = -500) and the rest barely decay
    (Δ A ~ -0.02): within a chunk the running sum reaches ~ -3000 (-12500 in one chunk), where float32 differences
    of it would be off by ~1e-4 in the exponent of entries near 1; the masked sums keep float32 at its rounding."""
    t = make_inputs(batch=1, length=200, heads=2, feat=4, n_state=2, groups=1, scalar_a=True)
    t["A"], t["A_rev"] = torch.full_like(t["A"], -10.0), torch.full_like(t["A_rev"], -10.0)
    for key in ("dt", "dt_rev"):
        t[key] = torch.full_like(t[key], 0.002)
        t[key][:, ::8] = 50.0  # Δ = dt (no softplus)
    want = qs_mix_chunked(*head_scalar_a(positional(t)), chunk=chunk)
    got = qs_mix_chunked(*head_scalar_a(positional({k: v.float() for k, v in t.items()})), chunk=chunk)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("implementation,scalar_a", [("chunked", True), ("one chunk", True), ("kernel", True),
                                                     ("kernel", False), ("reference", True), ("reference", False)])
def test_infinite_decay_rates(monkeypatch, implementation, scalar_a):
    """A = -inf (a decay that forgets at once) with steps of Δ = 0 (identity steps, 0 * -inf unless A is clamped, as
    every implementation does): the limit (A = -1e30 in float64), finite values and finite gradients but dt's (whose
    derivative there is infinite); the chunked form over two chunks so the carried states see both, and in one."""
    if implementation == "kernel" and not HAS_KERNEL:
        pytest.skip("ssm_plugins._C without the qs_mix kernel")
    t = make_inputs(batch=1, length=24, heads=2, feat=3, n_state=4, groups=1, scalar_a=scalar_a)
    t["dt"], t["dt_rev"] = t["dt"].abs(), t["dt_rev"].abs()
    t["dt"][:, ::3] = 0.0  # Δ = dt (no softplus): exact zeros
    t["A"][1] = -1e30
    want = dense_apply(t)
    t["A"][1] = -torch.inf
    args = positional({k: v.float() for k, v in t.items()})
    chunked = implementation in ("chunked", "one chunk")
    leaves = [v.requires_grad_() for v in (head_scalar_a(args) if chunked else args)]
    if chunked:
        got = qs_mix_chunked(*leaves, chunk=12 if implementation == "chunked" else 24)
    else:
        monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference" if implementation == "reference" else "auto")
        got = qs_mix(*leaves)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    grads = torch.autograd.grad(got, leaves, torch.cos(got))
    assert all(g.isfinite().all() for i, g in enumerate(grads) if i != 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_low_precision_matches_float64(dtype):
    t = make_inputs(batch=2, length=197, heads=2, feat=24, n_state=16, groups=1, scalar_a=True)
    want = qs_mix_chunked(*head_scalar_a(positional(t)), dt_softplus=True)
    leaves = [v.to(dtype).requires_grad_() for v in head_scalar_a(positional(t))]
    got = qs_mix_chunked(*leaves, dt_softplus=True)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * want.abs().max().item())
    got.float().sum().backward()
    assert all(v.grad.dtype == dtype and v.grad.isfinite().all() for v in leaves)


# ---- which algorithm runs: SSM_PLUGINS_QS -----------------------------------------------------------------

def _call(x, A, A_rev):
    """_chunked_form's decision for an x with x's device type and shape (the rest are not read)."""
    return qs_mix_module._chunked_form(x, None, A, None, None, None, A_rev)


def test_auto_takes_the_chunked_form_for_scalar_a_with_wide_heads_on_cuda(monkeypatch):
    from types import SimpleNamespace
    on = lambda device, feat: SimpleNamespace(device=torch.device(device), shape=(2, 50, 3, feat))  # noqa: E731
    scalar, diag = torch.zeros(3, 1), torch.zeros(3, 16)
    monkeypatch.delenv("SSM_PLUGINS_QS", raising=False)
    assert _call(on("cuda", 64), scalar, scalar)
    assert not _call(on("cuda", 64), scalar, diag)  # diagonal A: the scan kernels
    assert not _call(on("cuda", 1), scalar, scalar)  # one feature a head (Mamba layout): the scan kernels
    assert not _call(on("cpu", 64), scalar, scalar)  # the CPU kernel is faster on a CPU (csrc/README)
    with monkeypatch.context() as m:  # no CPU kernel (extension missing): the chunked form, not the oracle's loop
        m.setattr(_backend, "_COMPILED", _backend._COMPILED - {("qs_mix_fwd", "cpu")})
        assert _call(on("cpu", 1), scalar, scalar)
        assert not _call(on("cpu", 64), scalar, diag)  # diagonal A: the oracle
        m.setenv("SSM_PLUGINS_QS", "scan")
        assert not _call(on("cpu", 64), scalar, scalar)
    monkeypatch.setenv("SSM_PLUGINS_QS", "scan")
    assert not _call(on("cuda", 64), scalar, scalar)
    monkeypatch.setenv("SSM_PLUGINS_QS", "chunked")
    assert _call(on("cpu", 1), scalar, scalar)
    with pytest.raises(ValueError, match="SSM_PLUGINS_QS=chunked needs scalar A"):
        _call(on("cpu", 64), scalar, diag)
    monkeypatch.setenv("SSM_PLUGINS_QS", "fast")
    with pytest.raises(ValueError, match="SSM_PLUGINS_QS must be one of"):
        _call(on("cpu", 64), scalar, scalar)
    monkeypatch.setenv("SSM_PLUGINS_QS", "chunked")
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    assert not _call(on("cuda", 64), scalar, scalar)  # the forced reference wins


@pytest.mark.parametrize("layout", ["head", "mamba"])
def test_chunked_through_qs_mix_matches_the_scan(monkeypatch, layout):
    """SSM_PLUGINS_QS=chunked runs qs_mix_chunked behind qs_mix (both layouts, strided channel-mixer x, a static
    gamma) with the values and gradients of the scan (the CPU kernel, or the reference without one)."""
    t = make_inputs(batch=2, length=21, heads=4, feat=1 if layout == "mamba" else 5, n_state=3, groups=2,
                    scalar_a=True, dtype=torch.float32, static_gamma=True)
    if layout == "mamba":  # (batch, dim, L) activations, (batch, groups, N, L) selections, gamma (dim, L)
        t["x"] = t["x"][..., 0]
        for k in ("x", "dt", "dt_rev"):
            t[k] = t[k].transpose(1, 2)
        for k in ("B", "C", "B_rev", "C_rev"):
            t[k] = t[k].permute(0, 2, 3, 1)
        t["gamma"] = t["gamma"].T
    else:
        t["x"] = t["x"].transpose(1, 3).contiguous().transpose(1, 3)  # the channel mixer's strides
    calls = []
    monkeypatch.setattr(qs_mix_module, "qs_mix_chunked", lambda *a, **k: calls.append(1) or qs_mix_chunked(*a, **k))

    def run(algorithm):
        monkeypatch.setenv("SSM_PLUGINS_QS", algorithm)
        leaves = [v.detach().clone().requires_grad_() for v in positional(t)]
        y = qs_mix(*leaves, dt_softplus=True, qs_shift="hydra")
        return [y, *torch.autograd.grad(y, leaves, torch.cos(y))]

    chunked = run("chunked")
    assert calls == [1]
    scan = run("scan")
    assert calls == [1]
    assert chunked[0].stride() == scan[0].stride()  # the kernels' empty_like(x) layout: callers .view() it
    for got, want in zip(chunked, scan):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * (1 + want.abs().max().item()))


@pytest.mark.parametrize("length", [37, 150])  # one chunk, three of 50
def test_chunked_form_traces_whole_under_torch_compile(monkeypatch, length):
    """The chunked form is plain PyTorch: torch.compile takes it in one graph (fullgraph) with autograd."""
    monkeypatch.setenv("SSM_PLUGINS_QS", "chunked")
    t = make_inputs(batch=2, length=length, heads=4, feat=3, n_state=5, groups=2, scalar_a=True, dtype=torch.float32)
    leaves = [v.requires_grad_() for v in positional(t)]
    run = lambda *a: qs_mix(*a, dt_softplus=True, qs_shift="hydra")  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    got, want = compiled(*leaves), run(*leaves)
    torch.testing.assert_close(got, want)
    for g_got, g_want in zip(torch.autograd.grad(got.sum(), leaves), torch.autograd.grad(want.sum(), leaves)):
        torch.testing.assert_close(g_got, g_want)


def _fb_s6(x_bdl, dt_bdl, A, B_bnl, C_bnl, dt_rev, A_rev, B_rev, C_rev):
    """Forward S6 plus flipped backward S6 (D = 0) with the reference selective scan, (batch, dim, L)."""
    fwd = reference.selective_scan(x_bdl, dt_bdl, A, B_bnl, C_bnl)
    flip = lambda v: v.flip(-1)  # noqa: E731
    bwd = reference.selective_scan(flip(x_bdl), flip(dt_rev), A_rev, flip(B_rev), flip(C_rev))
    return fwd + flip(bwd)


def test_fb_s6_identity_diagonal_a_mamba_layout(monkeypatch):
    """QS with gamma_t = C_t·B̄_t + C'_t·B̄'_t is forward + backward S6 (docs 'QS operator'), Mamba layout (K3)."""
    gen = torch.Generator().manual_seed(1)
    batch, dim, length, n_state = 2, 6, 9, 4
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    x, dt, dt_rev = r(batch, dim, length), r(batch, dim, length).exp() * 0.3, r(batch, dim, length).exp() * 0.3
    A, A_rev = -r(dim, n_state).exp(), -r(dim, n_state).exp()
    B, C, B_rev, C_rev = (r(batch, 2, n_state, length) for _ in range(4))  # two groups of 3 channels
    per_channel = lambda m: m.repeat_interleave(3, dim=1)  # noqa: E731  (batch, dim, N, L)
    gamma = dt * (per_channel(C) * per_channel(B)).sum(2) + dt_rev * (per_channel(C_rev) * per_channel(B_rev)).sum(2)
    expected = _fb_s6(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev)
    args = (x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma)
    torch.testing.assert_close(qs_mix(*args), expected, rtol=1e-12, atol=1e-12)
    with monkeypatch.context() as m:
        m.setenv("SSM_PLUGINS_BACKEND", "reference")
        torch.testing.assert_close(qs_mix(*args), expected, rtol=1e-12, atol=1e-12)


def test_fb_s6_identity_scalar_a_heads():
    """The same identity for QSMixer's scalar A: every feature p of head h is an S6 channel with a_h."""
    t = make_inputs(batch=2, length=10, heads=3, feat=2, n_state=4, groups=1, scalar_a=True)
    heads, feat, n_state = 3, 2, 4
    cb = lambda C, B: (C * B).sum(-1)  # noqa: E731  (batch, L, groups)
    t["gamma"] = t["dt"] * cb(t["C"], t["B"]) + t["dt_rev"] * cb(t["C_rev"], t["B_rev"])
    to_channels = lambda v: v.repeat_interleave(feat, dim=2).transpose(1, 2)  # noqa: E731 (batch, H*P, L)
    x = t["x"].flatten(2).transpose(1, 2)
    A = t["A"].repeat_interleave(feat)[:, None].expand(heads * feat, n_state)
    A_rev = t["A_rev"].repeat_interleave(feat)[:, None].expand(heads * feat, n_state)
    mamba_bc = lambda v: v[:, :, 0].transpose(1, 2)  # noqa: E731  (batch, N, L)
    expected = _fb_s6(x, to_channels(t["dt"]), A, mamba_bc(t["B"]), mamba_bc(t["C"]), to_channels(t["dt_rev"]),
                      A_rev, mamba_bc(t["B_rev"]), mamba_bc(t["C_rev"]))
    got = qs_mix(*positional(t))
    torch.testing.assert_close(got.flatten(2).transpose(1, 2), expected, rtol=1e-12, atol=1e-12)


# ---- compiled kernel against the oracle ----------------------------------------------------------------

SHAPES = [  # batch, L, H, P, N, groups
    (1, 1, 1, 1, 1, 1),
    (2, 13, 4, 3, 5, 2),
    (1, 7, 6, 1, 16, 3),
    (3, 2, 2, 5, 1, 1),
    (1, 31, 2, 8, 4, 2),
    (2, 9, 3, 20, 16, 1),  # N = 16, P > 1: the forward's register-blocked path, P not a whole number of vectors
    (1, 6, 2, 64, 16, 2),  # ... the QSMixer head layout (P = 64)
]


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
def test_cpu_kernel_matches_reference(monkeypatch, shape, qs_shift):
    batch, length, heads, feat, n_state, groups = shape
    gen = torch.Generator().manual_seed(4)
    for scalar_a, softplus in ((True, True), (False, False)):
        t = make_inputs(batch, length, heads, feat, n_state, groups, scalar_a=scalar_a, dtype=torch.float32,
                        static_gamma=scalar_a)
        biases = [torch.randn(heads, generator=gen) for _ in range(2)]
        if not softplus:  # Δ = dt + dt_bias must stay positive (a decaying state) without the softplus
            t["dt"], t["dt_rev"], biases = t["dt"].abs(), t["dt_rev"].abs(), [v.abs() for v in biases]
        kw = dict(dt_bias=biases[0], dt_bias_rev=biases[1], dt_softplus=softplus, qs_shift=qs_shift)
        got = qs_mix(*positional(t), **kw)
        assert got.shape == t["x"].shape and got.dtype == torch.float32
        torch.testing.assert_close(got, run_reference(t, monkeypatch, **kw), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_strided_sequence_axis_channel_mixer(monkeypatch, isa, dtype):
    """The channel mixer's call: scan along D of u (batch, tokens, D) without materialising the transpose. 37 x 37
    rows: the kernels' row copies (x and grad_y in, y out) transpose whole W x W tiles and the edges element-wise."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    gen = torch.Generator().manual_seed(2)
    batch, tokens, dim, n_state = 2, 37, 37, 16
    u = torch.randn(batch, tokens, dim, generator=gen, dtype=dtype)
    x = u.transpose(1, 2).unsqueeze(2)  # (batch, L=dim, H=1, P=tokens); sequence stride 1, feature stride dim
    sel = torch.randn(batch, n_state * 4 + 1, dim, generator=gen, dtype=dtype)  # one matmul's projections, sliced
    B, C, B_rev, C_rev = (sel[:, i * n_state:(i + 1) * n_state].transpose(1, 2) for i in range(4))
    dt_all = torch.randn(batch, dim, 2, generator=gen, dtype=dtype)
    dt, dt_rev = dt_all[..., :1], dt_all[..., 1:]
    a, a_rev = torch.tensor([-0.7], dtype=dtype), torch.tensor([-1.3], dtype=dtype)
    gamma = torch.randn(dim, 1, generator=gen, dtype=dtype)  # static channel-axis gamma
    args = (x, dt, a, B, C, dt_rev, a_rev, B_rev, C_rev, gamma)
    assert not any(v.is_contiguous() for v in (x, dt, B, C))
    kw = dict(dt_bias=torch.tensor([0.2], dtype=dtype), dt_softplus=True)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    leaves = [v.detach().requires_grad_(True) for v in (u, *args[1:])]
    got = qs_mix(leaves[0].transpose(1, 2).unsqueeze(2), *leaves[1:], **kw)
    grad_y = torch.randn(got.shape, generator=gen, dtype=dtype).transpose(1, 3).contiguous().transpose(1, 3)
    grads = torch.autograd.grad(got, leaves, grad_y)  # grad_y strided like y: the backward's row copy tiles too
    contiguous = [v.detach().contiguous().requires_grad_(True) for v in args]
    want = qs_mix(*contiguous, **kw)
    want_grads = torch.autograd.grad(want, contiguous, grad_y.contiguous())
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(grads[0], want_grads[0][:, :, 0].transpose(1, 2), **tol)
    assert grads[0].is_contiguous()  # dx comes back in x's layout: u's gradient needs no transposed copy
    for g, w in zip(grads[1:], want_grads[1:]):
        torch.testing.assert_close(g, w, **tol)
    with monkeypatch.context() as m:
        m.setenv("SSM_PLUGINS_BACKEND", "reference")
        torch.testing.assert_close(got, qs_mix(*contiguous, **kw), rtol=1e-5, atol=1e-5)
    # y keeps x's layout, so transposing back to (batch, tokens, dim) is free
    assert got[:, :, 0].transpose(1, 2).is_contiguous()


@needs_kernel
def test_mamba_layout_matches_head_layout():
    gen = torch.Generator().manual_seed(3)
    batch, dim, length, n_state = 2, 4, 9, 3
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    x, dt, dt_rev, gamma = r(batch, dim, length), r(batch, dim, length), r(batch, dim, length), r(dim, length)
    A, A_rev = -r(dim, n_state).exp(), -r(dim, n_state).exp()
    B, C, B_rev, C_rev = (r(batch, n_state, length) for _ in range(4))
    got = qs_mix(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_softplus=True)
    assert got.shape == (batch, dim, length)
    head = lambda v: v.transpose(1, 2)  # noqa: E731
    expected = qs_mix(head(x)[..., None], head(dt), A, head(B), head(C), head(dt_rev), A_rev, head(B_rev),
                      head(C_rev), gamma.t(), dt_softplus=True)[..., 0].transpose(1, 2)
    torch.testing.assert_close(got, expected)


# ---- gradients -----------------------------------------------------------------------------------------

def _grad_inputs(scalar_a, static_gamma, groups=1):
    t = make_inputs(batch=2, length=4, heads=2, feat=2, n_state=2, groups=groups, scalar_a=scalar_a,
                    static_gamma=static_gamma)
    leaves = [v.requires_grad_() for v in positional(t)]
    gen = torch.Generator().manual_seed(7)
    biases = [torch.randn(2, generator=gen, dtype=torch.float64).requires_grad_() for _ in range(2)]
    return leaves + biases


@pytest.mark.parametrize("backend", [
    pytest.param("kernel", marks=needs_kernel),
    "reference",
])
@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
def test_gradcheck(monkeypatch, backend, qs_shift):
    if backend == "reference":
        monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    for scalar_a, static_gamma, groups in ((True, True, 1), (False, False, 2)):
        inputs = _grad_inputs(scalar_a, static_gamma, groups)
        fn = lambda *v: qs_mix(*v[:10], dt_bias=v[10], dt_bias_rev=v[11], dt_softplus=True,  # noqa: E731
                               qs_shift=qs_shift)
        assert torch.autograd.gradcheck(fn, inputs)


@needs_kernel
@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
def test_kernel_backward_matches_reference_long(monkeypatch, qs_shift):
    """L = 37 (one chunk: the row's states fit the whole-row budget; see the float32 test below for chunks), strided
    grad_y."""
    t = make_inputs(batch=2, length=37, heads=3, feat=2, n_state=3, groups=3, scalar_a=True, static_gamma=True)
    bias = torch.randn(3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)

    def grads(reference_path):
        leaves = [v.detach().clone().requires_grad_() for v in positional(t)] + [bias.clone().requires_grad_()]
        with monkeypatch.context() as m:
            if reference_path:
                m.setenv("SSM_PLUGINS_BACKEND", "reference")
            y = qs_mix(*leaves[:10], dt_bias=leaves[10], dt_softplus=True, qs_shift=qs_shift)
        grad_y = torch.randn(y.shape[::-1], generator=torch.Generator().manual_seed(5), dtype=y.dtype).permute(
            3, 2, 1, 0)
        return torch.autograd.grad(y, leaves, grad_y)

    for got, want in zip(grads(False), grads(True)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@needs_kernel
@pytest.mark.parametrize("scalar_a", [True, False])
def test_backward_in_checkpoint_chunks_matches_reference(monkeypatch, scalar_a):
    """A row whose states exceed the backward's whole-row budget (L N P > 2^20 floats: L = 1100, N = 16, P = 64) is
    replayed from checkpoints, chunk by chunk (34 steps each): float64 equals the reference's gradients to
    rounding, float32 (the N = 16 vector step) to float32's."""
    t = make_inputs(batch=1, length=1100, heads=1, feat=64, n_state=16, groups=1, scalar_a=scalar_a, seed=4)
    grad_y = torch.randn(1, 1100, 1, 64, generator=torch.Generator().manual_seed(6), dtype=torch.float64)

    def grads(dtype, backend=None):
        leaves = [v.to(dtype).requires_grad_() for v in positional(t)]
        with monkeypatch.context() as m:
            if backend:
                m.setenv("SSM_PLUGINS_BACKEND", backend)
            y = qs_mix(*leaves, dt_softplus=True)
        return torch.autograd.grad(y, leaves, grad_y.to(dtype))

    want = grads(torch.float64, "reference")
    names = ("x", "dt", "A", "B", "C", "dt_rev", "A_rev", "B_rev", "C_rev", "gamma")
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-5)):
        for name, got, w in zip(names, grads(dtype), want):
            err = ((got.double() - w).abs().max() / w.abs().max()).item()
            assert err < tol, (dtype, name, err)


# ---- low precision, large L ----------------------------------------------------------------------------

@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_long_sequence(dtype):
    t = make_inputs(batch=1, length=16384, heads=2, feat=4, n_state=16, groups=1, scalar_a=True,
                    dtype=torch.float32)
    t["dt"], t["dt_rev"] = t["dt"] - 3.0, t["dt_rev"] - 3.0  # softplus(dt) ~ 0.05: long memory
    low = {k: (v.to(dtype) if k in ("x", "B", "C", "B_rev", "C_rev") else v) for k, v in t.items()}
    y = qs_mix(*positional(low), dt_softplus=True)
    assert y.dtype == dtype and torch.isfinite(y).all()
    # fp32 accumulation: the only differences are the rounding of the inputs and of the output
    exact = qs_mix(*positional({k: v.float() for k, v in low.items()}), dt_softplus=True)
    torch.testing.assert_close(y.float(), exact, rtol=1e-2, atol=1e-2 * exact.abs().max().item())


@needs_kernel
def test_bfloat16_backward_matches_float32():
    t = make_inputs(batch=2, length=257, heads=2, feat=4, n_state=8, groups=1, scalar_a=True, dtype=torch.float32)
    x16 = t["x"].to(torch.bfloat16).requires_grad_()
    x32 = x16.detach().float().requires_grad_()
    rest = positional(t)[1:]
    grad = torch.randn(x16.shape, generator=torch.Generator().manual_seed(9))
    (dx16,) = torch.autograd.grad(qs_mix(x16, *rest, dt_softplus=True), x16, grad.to(torch.bfloat16))
    (dx32,) = torch.autograd.grad(qs_mix(x32, *rest, dt_softplus=True), x32, grad)
    assert dx16.dtype == torch.bfloat16
    torch.testing.assert_close(dx16.float(), dx32, rtol=2e-2, atol=2e-2 * dx32.abs().max().item())


SELECTION = ("dt", "B", "C", "dt_rev", "B_rev", "C_rev")


@needs_kernel
@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["heads", "mamba"])
@pytest.mark.parametrize("x_dtype", ["same", "float32"])
def test_selection_in_its_own_dtype_is_taken_as_it_is(monkeypatch, isa, dtype, layout, x_dtype):
    """dt, B, C and their _rev in one low-precision dtype (a bf16 projection's outputs under autocast), with x in it
    too (QSMixer's token mixer) or in float32 (the channel mixer reads a LayerNorm's float32 output), are passed to
    the op without a cast and give what their values in float32 give: the same output, and their gradients rounded
    to their dtype; the dt biases' gradients, sums of the float32 ddt, equal the float32 path's exactly (a sum of
    the bf16-rounded ddt was not). One of them in float32 sends all six in float32 (no precision lost)."""
    from ssm_plugins.ops.qs_mix import _normalise

    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    t = make_inputs(batch=2, length=37, heads=4, feat=3, n_state=5, groups=2, scalar_a=layout == "heads",
                    dtype=torch.float32)
    if layout == "mamba":  # (batch, dim, L) x, dt; (batch, N, L) B, C; static (dim, L) gamma
        t = {**t, "x": t["x"][..., 0].mT, "gamma": t["gamma"][0].mT, **{k: t[k].mT for k in ("dt", "dt_rev")},
             **{k: t[k][:, :, 0].mT for k in ("B", "C", "B_rev", "C_rev")}}
    t["x"] = t["x"].to(dtype if x_dtype == "same" else torch.float32)
    low = {**t, **{k: t[k].to(dtype) for k in SELECTION}}
    up = {**low, **{k: low[k].float() for k in SELECTION}}
    kw = dict(dt_bias=torch.full((4,), 0.1), dt_bias_rev=torch.full((4,), -0.1), dt_softplus=True)

    def selection_dtypes(inputs):  # of dt, B, C, dt_rev, B_rev, C_rev as the public function passes them to the op
        args = _normalise(*positional(inputs), kw["dt_bias"], kw["dt_bias_rev"], "exact")[0]
        return [args[i].dtype for i in (1, 3, 4, 5, 7, 8)]

    assert selection_dtypes(low) == [dtype] * 6

    def run(inputs):
        leaves = {k: v.clone().requires_grad_() for k, v in {**inputs, **kw}.items() if torch.is_tensor(v)}
        y = qs_mix(*positional(leaves), dt_bias=leaves["dt_bias"], dt_bias_rev=leaves["dt_bias_rev"],
                   dt_softplus=True)
        return y, dict(zip(leaves, torch.autograd.grad(y.float().square().sum(), list(leaves.values()))))

    (y_low, g_low), (y_up, g_up) = run(low), run(up)
    assert torch.equal(y_low, y_up)
    for name, grad in g_up.items():
        grad_dtype = low[name].dtype if name in low else torch.float32  # the biases' gradients: float32
        assert g_low[name].dtype == grad_dtype, name
        assert torch.equal(g_low[name], grad.to(grad_dtype)), name
    assert {"dt_bias", "dt_bias_rev"} <= g_low.keys()
    mixed = {**low, "C_rev": up["C_rev"]}
    assert selection_dtypes(mixed) == [torch.float32] * 6
    assert torch.equal(qs_mix(*positional(mixed), **kw), y_up)


# ---- argument checking ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value, match", [
    ("x", torch.zeros(2, 11), "x"),
    ("x", torch.zeros(2, 11, 4, 3, dtype=torch.int64), "x"),
    ("dt", torch.zeros(2, 10, 4), "dt"),
    ("dt_rev", torch.zeros(2, 11, 3), "dt_rev"),
    ("A", torch.zeros(3, 5), "A"),
    ("A_rev", torch.zeros(4, 6), "A_rev"),
    ("B", torch.zeros(2, 11, 3, 5), "B"),
    ("C", torch.zeros(2, 11, 2, 4), "C"),
    ("C_rev", torch.zeros(1, 11, 2, 5), "C_rev"),
    ("gamma", torch.zeros(11, 3), "gamma"),
    ("gamma", torch.zeros(3, 11, 4), "gamma"),
])
def test_bad_arguments_raise_value_error(name, value, match):
    t = make_inputs(dtype=torch.float32)
    t[name] = value
    with pytest.raises(ValueError, match=match):
        qs_mix(*positional(t))


def test_bad_options_raise_value_error():
    args = positional(make_inputs(dtype=torch.float32))
    with pytest.raises(ValueError, match="qs_shift"):
        qs_mix(*args, qs_shift="roll")
    with pytest.raises(ValueError, match="dt_bias"):
        qs_mix(*args, dt_bias=torch.zeros(5))
    with pytest.raises(ValueError, match="dt_bias_rev"):
        qs_mix(*args, dt_bias_rev=torch.zeros(4, 1))


# ---- registration: FLOPs, fake kernel ------------------------------------------------------------------

@needs_kernel
def test_flop_counter_counts_forward_and_backward():
    batch, length, heads, feat, n_state = 2, 11, 4, 3, 5
    t = make_inputs(batch, length, heads, feat, n_state, dtype=torch.float32)
    leaves = [v.requires_grad_() for v in positional(t)]
    with FlopCounterMode(display=False) as counter:
        y = qs_mix(*leaves)
    scan_elems = 2 * batch * length * heads * n_state
    expected_fwd = scan_elems * (5 * feat + 3) + 3 * batch * length * heads * feat
    assert counter.get_total_flops() == expected_fwd > 0
    with FlopCounterMode(display=False) as counter:
        y.sum().backward()
    expected_bwd = scan_elems * (17 * feat + 8) + 4 * batch * length * heads * feat
    assert counter.get_flop_counts()["Global"][torch.ops.ssm_plugins.qs_mix_bwd] == expected_bwd


@needs_kernel
def test_opcheck_fake_kernel_and_autograd_registration():
    t = make_inputs(batch=1, length=5, heads=2, feat=2, n_state=2, groups=1, dtype=torch.float32)
    args = positional(t)
    args[2], args[6] = args[2].contiguous(), args[6].contiguous()
    for v in args:
        v.requires_grad_()
    torch.library.opcheck(torch.ops.ssm_plugins.qs_mix_fwd, (*args, torch.tensor([0.1, -0.2]), None, True, False))


# ---- CUDA ----------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
@pytest.mark.parametrize("algorithm", ["scan", "auto"])  # auto: the chunked form for the scalar-A shapes with P >= 16
def test_cuda_matches_cpu(monkeypatch, qs_shift, algorithm):
    assert _backend.has_kernel("qs_mix_fwd", "cuda"), "extension built without CUDA"
    monkeypatch.setenv("SSM_PLUGINS_QS", algorithm)  # the CPU side runs its kernel either way
    for shape, scalar_a in [(s, True) for s in SHAPES] + [(s, False) for s in SHAPES] + [
            ((2, 300, 3, 70, 16, 1), True)]:
        batch, length, heads, feat, n_state, groups = shape
        t = make_inputs(batch, length, heads, feat, n_state, groups, scalar_a=scalar_a, dtype=torch.float32,
                        static_gamma=scalar_a)
        kw = dict(dt_bias=torch.linspace(-1, 1, heads), dt_softplus=True, qs_shift=qs_shift)

        def run(device):
            leaves = [v.to(device).requires_grad_() for v in positional(t)]
            bias = kw["dt_bias"].to(device).requires_grad_()
            y = qs_mix(*leaves, dt_bias=bias, dt_softplus=True, qs_shift=qs_shift)
            grads = torch.autograd.grad(y, leaves + [bias], torch.ones_like(y))
            return [y.cpu()] + [g.cpu() for g in grads]

        for got, want in zip(run("cuda"), run("cpu")):  # atomics sum in another order than the CPU
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * (1 + want.abs().max().item()))
        # strided (channel-mixer) input and bf16 on the device
        x = t["x"].cuda().transpose(1, 3).contiguous().transpose(1, 3).to(torch.bfloat16)
        dev = [x] + [v.cuda() for v in positional(t)[1:]]
        y = qs_mix(*dev, **{**kw, "dt_bias": kw["dt_bias"].cuda()})
        want = qs_mix(*[v.cpu() for v in dev], **kw)
        torch.testing.assert_close(y.cpu().float(), want.float(), rtol=1e-2, atol=1e-2)


# ---- instruction-set variants of the CPU kernel ----------------------------------------------------------

@needs_kernel
@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])  # a CPU without one runs its best instead
@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
@pytest.mark.parametrize("feat", [1, 32, 70])  # the Mamba-layout path, one whole register block, two + a tail
def test_every_instruction_set_matches_the_reference(monkeypatch, isa, qs_shift, feat):
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    t = make_inputs(length=13, heads=2, feat=feat, n_state=16, groups=1, scalar_a=feat > 1, dtype=torch.float32)
    t = {k: v.requires_grad_(True) for k, v in t.items()}
    kw = dict(qs_shift=qs_shift, dt_softplus=True)
    got = qs_mix(*positional(t), **kw)
    grads = torch.autograd.grad(got, list(t.values()), torch.ones_like(got))
    want = run_reference(t, monkeypatch, **kw)
    want_grads = torch.autograd.grad(want, list(t.values()), torch.ones_like(want))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for name, g, w in zip(t, grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3, msg=lambda m: f"{name}: {m}")
