"""ssm_plugins.ops.selective_scan: compiled kernels (forward and backward) against the reference scan,
the reference against the dense matrix of MambaMixer (arXiv:2403.19888 v2) Sec. 2.1 (Eq. 8's α_f), gradcheck,
fake kernels, FLOP counts, bad input, and the reference fallback."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ssm_plugins import ops
from ssm_plugins.ops import _backend, reference, selective_scan
from ssm_plugins.ops.selective_scan import _normalise as normalise, saved_states

HAS_KERNEL = _backend.has_kernel("selective_scan_fwd", "cpu") and _backend.has_kernel("selective_scan_bwd", "cpu")
needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="ssm_plugins._C has no CPU selective_scan kernels")
ISAS = ("generic", "avx2", "avx512")  # SSM_PLUGINS_CPU_ISA; a CPU without one runs its best instead


def make(batch=2, dim=4, length=9, n_state=3, groups=None, dtype=torch.float32, D=True, z=True, bias=True,
         seed=0, requires_grad=False):
    """Inputs in the public API's layout; B and C are (batch, N, L) when groups is None."""
    g = torch.Generator().manual_seed(seed)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    rnd = lambda *shape, dt=acc: torch.randn(*shape, generator=g, dtype=torch.float64).to(dt)
    bc_shape = (batch, n_state, length) if groups is None else (batch, groups, n_state, length)
    kw = dict(u=rnd(batch, dim, length, dt=dtype), delta=(0.5 * rnd(batch, dim, length)).to(dtype),
              A=-(0.5 + torch.rand(dim, n_state, generator=g, dtype=torch.float64)).to(acc),
              B=rnd(*bc_shape), C=rnd(*bc_shape),
              D=rnd(dim) if D else None, z=rnd(batch, dim, length, dt=dtype) if z else None,
              delta_bias=0.3 * rnd(dim) if bias else None)
    if requires_grad:
        for t in kw.values():
            if t is not None:
                t.requires_grad_(True)
    return kw


def rel_err(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() if b.numel() else 0.0


def grads(fn, kw, delta_softplus, seed=1):
    """Gradients of <out, g> + <last_state, g_last> with respect to every tensor input."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in kw.items() if v is not None}
    full = {k: leaves.get(k) for k in kw}
    out, last = fn(**full, delta_softplus=delta_softplus, return_last_state=True)
    gen = torch.Generator().manual_seed(seed)
    g_out = torch.randn(out.shape, generator=gen).to(out.device, out.dtype)
    g_last = torch.randn(last.shape, generator=gen).to(last.device, last.dtype)
    got = torch.autograd.grad([out, last], list(leaves.values()), [g_out, g_last])
    return out, last, dict(zip(leaves, got))


# ---- forward -----------------------------------------------------------------------------------------

CASES = [  # batch, dim, L, N, groups
    (2, 4, 9, 3, None),
    (1, 6, 33, 16, 2),   # one full float vector of states, groups
    (2, 3, 17, 20, 3),   # N not a multiple of the vector width, one channel per group
    (1, 2, 1, 1, None),  # single step, single state
]


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("options", [(True, True, True, True), (False, False, False, False),
                                     (True, False, True, False), (False, True, False, True)])
def test_forward_matches_reference(dtype, case, options):
    batch, dim, length, n_state, groups = case
    use_D, use_z, use_bias, softplus = options
    kw = make(batch, dim, length, n_state, groups, dtype, D=use_D, z=use_z, bias=use_bias)
    out, last = selective_scan(**kw, delta_softplus=softplus, return_last_state=True)
    ref_out, ref_last = reference.selective_scan(**kw, delta_softplus=softplus, return_last_state=True)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert out.dtype == dtype and out.shape == (batch, dim, length)
    assert last.dtype == ref_last.dtype and last.shape == (batch, dim, n_state)
    assert rel_err(out, ref_out) < tol
    assert rel_err(last, ref_last) < tol
    assert isinstance(selective_scan(**kw, delta_softplus=softplus), torch.Tensor)


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n_state", [16, 32, 40])  # one, two and five float vectors (NV = 1, 2, runtime)
def test_every_instruction_set(monkeypatch, isa, n_state):
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 4, 37, n_state, 2, torch.float32, requires_grad=False)
    out, last, got = grads(selective_scan, kw, True)
    ref_out, ref_last, want = grads(reference.selective_scan, kw, True)
    assert rel_err(out, ref_out) < 1e-5 and rel_err(last, ref_last) < 1e-5
    for name in want:
        assert rel_err(got[name], want[name]) < 5e-5, name


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("n_state,low_rank", [(16, True), (16, False), (5, True)])
def test_forward_channel_blocks(monkeypatch, isa, dtype, n_state, low_rank):
    """The forward runs W channels of a (batch, group) per SIMD lane block (16 float, 8 double): 2 groups of 20
    channels are a full block and a partial one each (8 float64: two full, one partial), and 4 delta groups of 10
    channels straddle the blocks; every channel's output and last state equal the oracle's."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 40, 23, n_state, 2, dtype, seed=3)
    if low_rank:
        kw.update({k: v for k, v in make_low_rank(2, 40, 23, n_state, 3, 4, dtype, seed=3).items()
                   if k in ("delta", "delta_proj")})
    out, last = selective_scan(**kw, delta_softplus=True, return_last_state=True)
    ref_out, ref_last = reference.selective_scan(**kw, delta_softplus=True, return_last_state=True)
    tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 2e-2}[dtype]
    for channel in range(40):  # per channel: a wrong lane or block offset shows as the channel it moved
        assert rel_err(out[:, channel], ref_out[:, channel]) < tol, channel
        assert rel_err(last[:, channel], ref_last[:, channel]) < max(tol, 1e-6), channel


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_reads_and_writes_through_strides(monkeypatch, isa, dtype, reverse):
    """u, delta and z token-major ((batch, L, dim) storage, as a transformer's activations) or strided along L are
    read in place, and out comes back in u's layout (empty_like(u), what the fake kernel declares) with the values
    of the contiguous call, bit for bit."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 40, 23, 16, 2, dtype, seed=5)
    want, want_last = selective_scan(**kw, delta_softplus=True, return_last_state=True, reverse=reverse)
    layouts = {"token-major": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),
               "every other step": lambda t: torch.stack([t, t], dim=-1).flatten(-2)[..., ::2],
               "channels strided": lambda t: torch.stack([t, t], dim=2).flatten(1, 2)[:, ::2]}
    for name, layout in layouts.items():
        strided = dict(kw, **{k: layout(kw[k]) for k in ("u", "delta", "z")})
        assert not strided["u"].is_contiguous() and torch.equal(strided["u"], kw["u"])
        out, last = selective_scan(**strided, delta_softplus=True, return_last_state=True, reverse=reverse)
        assert out.stride() == torch.empty_like(strided["u"]).stride(), name
        assert torch.equal(out, want) and torch.equal(last, want_last), name


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_forward(dtype):
    kw = make(2, 8, 64, 16, None, dtype)
    out, last = selective_scan(**kw, delta_softplus=True, return_last_state=True)
    ref_out, ref_last = reference.selective_scan(**kw, delta_softplus=True, return_last_state=True)
    assert out.dtype == dtype and last.dtype == torch.float32
    assert rel_err(out, ref_out) < 1e-2
    assert rel_err(last, ref_last) < 1e-5  # both accumulate in float32 from the same inputs


def test_bf16_long_sequence_is_finite():
    """bf16 in and out at L = 16384 (small dim): the float32 state neither overflows nor drifts."""
    kw = make(1, 4, 16384, 16, None, torch.bfloat16, seed=3)
    out, last = selective_scan(**kw, delta_softplus=True, return_last_state=True)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all() and torch.isfinite(last).all()
    fp32 = {k: None if v is None else v.float() for k, v in kw.items()}
    ref_out = reference.selective_scan(**fp32, delta_softplus=True)
    assert rel_err(out, ref_out) < 1e-2


@needs_kernel
def test_noncontiguous_inputs():
    kw = make(2, 5, 12, 4, None, requires_grad=False)
    strided = dict(kw, u=torch.stack([kw["u"], kw["u"]], dim=-1)[..., 0],  # stride 2 along L
                   z=kw["z"].transpose(1, 2).contiguous().transpose(1, 2),
                   A=kw["A"].t().contiguous().t(), B=kw["B"].transpose(1, 2).contiguous().transpose(1, 2))
    assert not any(strided[k].is_contiguous() for k in ("u", "z", "A", "B"))
    out, last, got = grads(selective_scan, strided, True)
    ref_out, ref_last, want = grads(reference.selective_scan, kw, True)
    assert rel_err(out, ref_out) < 1e-5 and rel_err(last, ref_last) < 1e-5
    for name in want:
        assert rel_err(got[name], want[name]) < 5e-5, name


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("softplus", [True, False])
@pytest.mark.parametrize("where", ["delta", "A", "u", "B"])
def test_nan_propagates_like_the_reference(monkeypatch, isa, softplus, where):
    """A NaN input gives NaN where the reference's is NaN and the reference's numbers elsewhere (the vector exp
    once clamped a NaN argument to a finite decay: a NaN Δ or A gave a finite, wrong output)."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(1, 3, 21, 16, None, torch.float32, z=False)
    index = {"delta": (0, 1, 5), "A": (1, 7), "u": (0, 1, 5), "B": (0, 4, 5)}[where]
    kw[where] = kw[where].clone()
    kw[where][index] = float("nan")
    out, last = selective_scan(**kw, delta_softplus=softplus, return_last_state=True)
    ref_out, ref_last = reference.selective_scan(**kw, delta_softplus=softplus, return_last_state=True)
    assert ref_out.isnan().any()
    assert torch.equal(out.isnan(), ref_out.isnan()) and torch.equal(last.isnan(), ref_last.isnan())
    finite = ~ref_out.isnan()
    assert rel_err(out[finite], ref_out[finite]) < 1e-5


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
def test_decays_across_the_exponent_range(monkeypatch, isa):
    """Δ·A from -200 (below float32's smallest normal exp, clamped) to +5 (growth): the vector exp's reduction
    and exponent arithmetic against the reference (float64 oracle) in every lane."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 4, 12, 32, None, torch.float32, z=False, bias=False)
    kw["A"] = torch.linspace(-200, 5, 4 * 32).view(4, 32)
    kw["delta"] = torch.rand(2, 4, 12, generator=torch.Generator().manual_seed(2)) + 0.5
    out, last = selective_scan(**kw, delta_softplus=False, return_last_state=True)
    ref = {k: None if v is None else v.double() for k, v in kw.items()}
    ref_out, ref_last = reference.selective_scan(**ref, delta_softplus=False, return_last_state=True)
    assert torch.isfinite(out).all()
    assert rel_err(out, ref_out) < 1e-5 and rel_err(last, ref_last) < 1e-5


@pytest.mark.parametrize("implementation,isa", [("kernel", isa) for isa in ISAS] + [("reference", None)])
def test_infinite_decay_rates(monkeypatch, implementation, isa):
    """A = -inf (a state that forgets at once) on steps with Δ = 0 (identity steps: 0 * -inf is NaN unless A is
    clamped finite, as every kernel does): the limit A = -1e30 in float64, finite gradients but delta's (infinite
    derivative there)."""
    if implementation == "kernel" and not HAS_KERNEL:
        pytest.skip("ssm_plugins._C has no CPU selective_scan kernels")
    if isa:
        monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 4, 21, 16, None, torch.float64, bias=False)
    del kw["delta_bias"]
    kw["delta"] = kw["delta"].abs()
    kw["delta"][..., ::3] = 0.0
    kw["A"][1, ::2] = -1e30
    want = reference.selective_scan(**kw, return_last_state=True)
    kw["A"][1, ::2] = -torch.inf
    leaves = {k: v.float().requires_grad_() for k, v in kw.items()}
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference" if implementation == "reference" else "auto")
    got = selective_scan(**leaves, return_last_state=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5 * w.abs().max().item())
    grads = torch.autograd.grad(got, list(leaves.values()), [torch.cos(g) for g in got])
    assert all(g.isfinite().all() for name, g in zip(leaves, grads) if name != "delta")


@needs_kernel
def test_threads_agree():
    """Enough work for helper threads (~4M state updates): the same numbers as one thread."""
    kw = make(2, 64, 2048, 16, 2, torch.float32, seed=5)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 2, 2):
            torch.set_num_threads(threads)
            results.append(grads(selective_scan, kw, True))
    finally:
        torch.set_num_threads(before)
    (out, last, want), rest = results[0], results[1:]
    for out2, last2, got in rest:
        assert torch.equal(out2, out) and torch.equal(last2, last)  # rows are independent
        for name in want:  # B and C: summed in another order
            assert rel_err(got[name], want[name]) < 1e-6, name


@needs_kernel
def test_empty_shapes():
    for batch, dim, length in [(0, 3, 5), (2, 3, 0)]:
        kw = make(batch, dim, length, 4, None, requires_grad=True)
        out, last = selective_scan(**kw, delta_softplus=True, return_last_state=True)
        assert out.shape == (batch, dim, length) and last.shape == (batch, dim, 4)
        assert (last == 0).all()
        (out.sum() + last.sum()).backward()
        assert kw["A"].grad.shape == kw["A"].shape and (kw["A"].grad == 0).all()


# ---- the reference against the definition -------------------------------------------------------------

def test_reference_matches_dense_matrix_view():
    """Paper Sec. 2.1 (α_f of Eq. 8): for one channel y = M x with M_{t,k} = C_t^T (prod_{j=k+1..t} Abar_j) Bbar_k."""
    torch.manual_seed(0)
    length, n_state, dim, channel = 12, 4, 3, 1
    kw = make(1, dim, length, n_state, None, torch.float64, D=True, z=False, bias=True)
    out = reference.selective_scan(**kw, delta_softplus=True)

    dt = F.softplus(kw["delta"][0, channel] + kw["delta_bias"][channel])  # (L,)
    Abar = torch.exp(dt[:, None] * kw["A"][channel][None, :])           # (L, N), diagonal per step
    Bbar = dt[:, None] * kw["B"][0].T                                     # (L, N)
    Ct = kw["C"][0].T                                                     # (L, N)
    M = torch.zeros(length, length, dtype=torch.float64)
    for t in range(length):
        for k in range(t + 1):
            prod = torch.ones(n_state, dtype=torch.float64)
            for j in range(k + 1, t + 1):
                prod = prod * Abar[j]
            M[t, k] = (Ct[t] * prod * Bbar[k]).sum()
    x = kw["u"][0, channel]
    y = M @ x + kw["D"][channel] * x
    torch.testing.assert_close(out[0, channel], y, rtol=1e-12, atol=1e-12)
    if HAS_KERNEL:
        torch.testing.assert_close(selective_scan(**kw, delta_softplus=True)[0, channel], y, rtol=1e-12, atol=1e-12)


# ---- backward --------------------------------------------------------------------------------------------

@needs_kernel
def test_gradcheck_compiled_path():
    """fp64 gradcheck through selective_scan_bwd: D, z, delta_bias, softplus, groups > 1, both outputs."""
    kw = make(2, 4, 7, 3, 2, torch.float64, requires_grad=True)
    names = list(kw)

    def fn(*tensors):
        out, last = selective_scan(**dict(zip(names, tensors)), delta_softplus=True, return_last_state=True)
        assert "selective_scan_fwd" in type(out.grad_fn).__name__  # the compiled op's autograd, not the reference
        return out, last

    assert torch.autograd.gradcheck(fn, tuple(kw.values()), eps=1e-6, atol=1e-7, rtol=1e-5)


@needs_kernel
def test_gradcheck_compiled_path_minimal():
    """No optional inputs, no softplus, B and C without a group axis."""
    kw = make(1, 3, 6, 2, None, torch.float64, D=False, z=False, bias=False, requires_grad=True)
    kw = {k: v for k, v in kw.items() if v is not None}
    names = list(kw)
    fn = lambda *tensors: selective_scan(**dict(zip(names, tensors)))
    assert torch.autograd.gradcheck(fn, tuple(kw.values()), eps=1e-6, atol=1e-7, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case,options", [
    ((2, 4, 37, 5, 2), (True, True, True, True)),
    ((2, 4, 37, 5, None), (False, False, False, False)),
    ((1, 6, 50, 16, 3), (True, False, True, True)),
    # rows whose states pass 512 KiB: the chunked (checkpointed) backward (fp64 for the first)
    ((1, 2, 900, 40, None), (True, True, True, True)),
    ((2, 2, 4500, 16, 1), (True, True, False, True)),
])
def test_backward_matches_reference(dtype, case, options):
    batch, dim, length, n_state, groups = case
    use_D, use_z, use_bias, softplus = options
    kw = make(batch, dim, length, n_state, groups, dtype, D=use_D, z=use_z, bias=use_bias)
    out, last, got = grads(selective_scan, kw, softplus)
    ref_out, ref_last, want = grads(reference.selective_scan, kw, softplus)
    tol = 1e-11 if dtype == torch.float64 else 5e-5
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == kw[name].shape and got[name].dtype == kw[name].dtype
        assert rel_err(got[name], want[name]) < tol, name


@needs_kernel
def test_backward_low_precision():
    kw = make(2, 4, 40, 16, None, torch.bfloat16)
    _, _, got = grads(selective_scan, kw, True)
    _, _, want = grads(reference.selective_scan, kw, True)
    for name in want:
        assert got[name].dtype == kw[name].dtype
        assert rel_err(got[name], want[name]) < 2e-2, name


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reverse", [False, True])
def test_b_and_c_in_the_input_dtype_are_read_as_they_are(monkeypatch, isa, dtype, reverse):
    """mamba_ssm's contract: B and C in u's dtype (a bf16 projection's output under autocast) reach the kernels
    without a cast, and give what their values in float32 give: the same output, and grad B / grad C that are the
    float32 ones rounded to B's dtype. B in u's dtype with C in float32 is cast to float32 (no precision lost)."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 6, 45, 5, 3, dtype)
    kw["B"], kw["C"] = kw["B"].to(dtype), kw["C"].to(dtype)
    up = {**kw, "B": kw["B"].float(), "C": kw["C"].float()}

    def op_args(k):  # what the public function passes to the op
        return normalise(*(k[n] for n in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")))[0]

    assert op_args(kw)[3].dtype == op_args(kw)[4].dtype == dtype  # passed on in u's dtype
    out, last, got = grads(lambda **k: selective_scan(**k, reverse=reverse), kw, True)
    out_up, last_up, want = grads(lambda **k: selective_scan(**k, reverse=reverse), up, True)
    assert torch.equal(out, out_up) and torch.equal(last, last_up)
    for name in want:
        assert got[name].dtype == kw[name].dtype, name
        assert torch.equal(got[name], want[name].to(kw[name].dtype)), name
    mixed = {**kw, "C": kw["C"].float()}
    assert op_args(mixed)[3].dtype == op_args(mixed)[4].dtype == torch.float32
    assert torch.equal(selective_scan(**mixed, delta_softplus=True), selective_scan(**up, delta_softplus=True))


@needs_kernel
def test_backward_through_one_output_only():
    kw = make(2, 3, 10, 4, None, torch.float64, requires_grad=True)
    for pick in (0, 1):
        for t in kw.values():
            t.grad = None
        selective_scan(**kw, delta_softplus=True, return_last_state=True)[pick].sum().backward()
        got = {k: v.grad.clone() for k, v in kw.items()}
        for t in kw.values():
            t.grad = None
        reference.selective_scan(**kw, delta_softplus=True, return_last_state=True)[pick].sum().backward()
        for k, v in kw.items():  # the reference leaves z without a gradient when only last_state is used
            want = v.grad if v.grad is not None else torch.zeros_like(v)
            assert (got[k] == want).all() if not want.any() else rel_err(got[k], want) < 1e-11, (pick, k)


@needs_kernel
def test_backward_op_contract():
    """The raw op: optional gradients are None when the input is absent; grad_last_state may be None."""
    kw = make(2, 4, 8, 3, None, torch.float32, D=False, z=False, bias=False)
    args = (kw["u"], kw["delta"], kw["A"], kw["B"][:, None], kw["C"][:, None], None, None, None, False)
    out, last, _ = torch.ops.ssm_plugins.selective_scan_fwd(*args)
    g = torch.randn_like(out)
    res = torch.ops.ssm_plugins.selective_scan_bwd(*args, g, None)
    assert len(res) == 8 and res[5] is None and res[6] is None and res[7] is None
    res0 = torch.ops.ssm_plugins.selective_scan_bwd(*args, g, torch.zeros_like(last))
    for a, b in zip(res[:5], res0[:5]):
        torch.testing.assert_close(a, b)


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("length, reverse", [(1024, False), (1025, False), (3000, False), (3000, True)])
def test_forward_saves_the_states_at_every_1024th_step(monkeypatch, isa, length, reverse):
    """The forward op's third output: the states at the boundaries before steps 1024, 2048, ..., each the last
    state of the scan of the steps it has passed (those before the boundary; for a reverse scan those after it);
    the CUDA backward starts its chunks there."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make(2, 5, length, 3, None, torch.float64)
    kw = {**kw, "B": kw["B"][:, None], "C": kw["C"][:, None]}
    args = (kw["u"], kw["delta"], kw["A"], kw["B"], kw["C"], kw["D"], kw["z"], kw["delta_bias"], True, None, reverse)
    states = torch.ops.ssm_plugins.selective_scan_fwd(*args)[2]
    assert states.shape == (2, 5, (length - 1) // 1024, 3) and states.dtype == torch.float64
    assert states.shape[2] == saved_states(length) and states.is_contiguous()
    for s in range(1, states.shape[2] + 1):
        passed = slice(1024 * s, None) if reverse else slice(0, 1024 * s)  # the steps scanned before boundary s
        prefix = {k: v[..., passed] if v is not None and v.dim() >= 3 else v for k, v in kw.items()}
        _, want = reference.selective_scan(**prefix, delta_softplus=True, return_last_state=True, reverse=reverse)
        assert rel_err(states[:, :, s - 1], want) < 1e-12, s


@needs_kernel
def test_backward_checks_the_saved_states():
    kw = make(1, 2, 1500, 2, None, torch.float32, D=False, z=False, bias=False)
    args = (kw["u"], kw["delta"], kw["A"], kw["B"][:, None], kw["C"][:, None], None, None, None, False)
    out, last, states = torch.ops.ssm_plugins.selective_scan_fwd(*args)
    assert states.shape == (1, 2, 1, 2)
    grads = torch.ops.ssm_plugins.selective_scan_bwd(*args, torch.ones_like(out), None, False, states)
    assert torch.isfinite(grads[0]).all()
    with pytest.raises(RuntimeError, match=r"chunk_states must be the forward's: \(batch, dim, \(L - 1\) / 1024, N\)"):
        torch.ops.ssm_plugins.selective_scan_bwd(*args, torch.ones_like(out), None, False, states[:, :, :0])


@needs_kernel
def test_opcheck():
    """Schemas, fake (meta) kernels and the autograd registration agree with the real kernels."""
    kw = make(2, 4, 6, 3, None, torch.float32, requires_grad=True)
    args = (kw["u"], kw["delta"], kw["A"], kw["B"][:, None], kw["C"][:, None], kw["D"], kw["z"], kw["delta_bias"], True)
    torch.library.opcheck(torch.ops.ssm_plugins.selective_scan_fwd, args)
    plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    out, last, _ = torch.ops.ssm_plugins.selective_scan_fwd(*plain)
    torch.library.opcheck(torch.ops.ssm_plugins.selective_scan_bwd,
                          (*plain, torch.randn_like(out), torch.randn_like(last)))


@needs_kernel
def test_flop_counts():
    batch, dim, length, n_state = 2, 4, 8, 3
    kw = make(batch, dim, length, n_state, None, torch.float32, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        selective_scan(**kw, delta_softplus=True).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    steps = batch * dim * length
    assert counts[torch.ops.ssm_plugins.selective_scan_fwd] == 9 * steps * n_state + 2 * steps
    assert counts[torch.ops.ssm_plugins.selective_scan_bwd] == 22 * steps * n_state + 6 * steps


# ---- low-rank delta (delta_proj) -----------------------------------------------------------------------

def make_low_rank(batch=2, dim=6, length=37, n_state=4, rank=3, delta_groups=2, dtype=torch.float32, seed=0):
    """make()'s inputs with delta low rank: (batch, delta_groups, rank, L), or (batch, rank, L) for None."""
    kw = make(batch, dim, length, n_state, 2, dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 7)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    shape = (batch, rank, length) if delta_groups is None else (batch, delta_groups, rank, length)
    kw["delta"] = (0.5 * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)
    kw["delta_proj"] = torch.randn(dim, rank, generator=g, dtype=torch.float64).to(acc)
    return kw


def with_full_delta(kw):
    """The same scan with delta_proj applied outside: the (batch, dim, L) delta of the plain contract."""
    acc = kw["delta_proj"].dtype
    low = kw["delta"] if kw["delta"].dim() == 4 else kw["delta"][:, None]
    full = dict(kw, delta=reference.low_rank_delta(low, kw["delta_proj"], acc).to(kw["u"].dtype))
    del full["delta_proj"]
    return full


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype,delta_groups", [(torch.float32, 2), (torch.float64, 3), (torch.float32, None),
                                                (torch.bfloat16, 2)])
def test_low_rank_delta_matches_the_full_delta(monkeypatch, isa, dtype, delta_groups):
    """delta_proj applied per row by the kernel = the plain scan on delta_proj @ delta, forward and gradients (of u, the
    low-rank delta and delta_proj through the autograd registration, the rest as before)."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make_low_rank(dtype=dtype, delta_groups=delta_groups)
    out, last, got = grads(selective_scan, kw, True)
    ref_out, ref_last, want = grads(reference.selective_scan, kw, True)
    tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 2e-2}[dtype]
    assert rel_err(out, ref_out) < tol and rel_err(last, ref_last) < max(tol, 1e-6)
    assert set(got) == set(want) >= {"u", "delta", "delta_proj"}
    for name in want:
        assert got[name].shape == kw[name].shape and got[name].dtype == kw[name].dtype, name
        assert rel_err(got[name], want[name]) < max(tol, 1e-5), name
    full_out = selective_scan(**with_full_delta(kw), delta_softplus=True)
    assert rel_err(out, full_out) < max(tol, 1e-6)


@needs_kernel
def test_low_rank_delta_gradcheck():
    kw = make_low_rank(1, 4, 11, 3, 2, 2, torch.float64)
    names = ("u", "delta", "delta_proj", "A", "delta_bias")
    rest = {k: v for k, v in kw.items() if k not in names}
    fn = lambda *ts: selective_scan(**dict(zip(names, ts)), **rest, delta_softplus=True)
    assert torch.autograd.gradcheck(fn, tuple(kw[n].clone().requires_grad_() for n in names))


@needs_kernel
def test_low_rank_delta_opcheck_and_flops():
    kw = make_low_rank(2, 4, 6, 3, 2, 2)
    args = (kw["u"], kw["delta"], kw["A"], kw["B"], kw["C"], kw["D"], kw["z"], kw["delta_bias"], True,
            kw["delta_proj"])
    torch.library.opcheck(torch.ops.ssm_plugins.selective_scan_fwd,
                          tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args))
    with FlopCounterMode(display=False) as counter:
        selective_scan(**kw, delta_softplus=True)
    steps = 2 * 4 * 6
    assert counter.get_flop_counts()["Global"][torch.ops.ssm_plugins.selective_scan_fwd] == (9 * 3 + 2 + 2 * 2) * steps


@pytest.mark.parametrize("change,name", [
    (dict(delta=torch.randn(2, 6, 37)), "delta"),  # the full delta's shape
    (dict(delta=torch.randn(2, 2, 4, 37)), "delta"),  # rank 4 for delta_proj's 3
    (dict(delta=torch.randn(2, 4, 3, 37)), "groups"),  # 4 groups do not divide dim 6
    (dict(delta_proj=torch.randn(5, 3)), "delta_proj"),
    (dict(delta_proj=torch.randn(6)), "delta_proj"),
])
def test_low_rank_delta_bad_input(change, name):
    with pytest.raises(ValueError, match=name):
        selective_scan(**dict(make_low_rank(), **change))


# ---- reverse ---------------------------------------------------------------------------------------------

def flipped(kw):
    """The inputs reversed in time (delta too when it is low rank: its last axis is time as well)."""
    return {k: v.flip(-1) if k in ("u", "delta", "B", "C", "z") and v is not None else v for k, v in kw.items()}


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype,low_rank", [(torch.float32, False), (torch.float64, False), (torch.float32, True),
                                            (torch.bfloat16, False)])
def test_reverse_is_the_scan_of_the_flipped_inputs(monkeypatch, isa, dtype, low_rank):
    """reverse=True: h_t from h_{t+1}, last state h_0 -- the forward scan of the time-flipped inputs, flipped back;
    forward and every gradient, against the plain (not reversed) kernel on flipped copies."""
    monkeypatch.setenv("SSM_PLUGINS_CPU_ISA", isa)
    kw = make_low_rank(2, 6, 37, 4, dtype=dtype) if low_rank else make(2, 6, 37, 4, 2, dtype)
    rev = lambda **a: selective_scan(**a, reverse=True)

    def plain_on_flipped(delta_softplus, return_last_state, **a):
        out, last = selective_scan(**flipped(a), delta_softplus=delta_softplus, return_last_state=True)
        return out.flip(-1), last

    out, last, got = grads(rev, kw, True)
    want_out, want_last, want = grads(plain_on_flipped, kw, True)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert rel_err(out, want_out) <= tol and rel_err(last, want_last) <= tol
    for name in want:
        assert rel_err(got[name], want[name]) <= max(tol, 1e-6), name
    ref_out, ref_last, ref = grads(lambda **a: reference.selective_scan(**a, reverse=True), kw, True)
    ref_tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 2e-2}[dtype]
    assert rel_err(out, ref_out) < ref_tol and rel_err(last, ref_last) < max(ref_tol, 1e-6)
    for name in ref:
        assert rel_err(got[name], ref[name]) < max(ref_tol, 1e-5), name


@needs_kernel
def test_reverse_opcheck_and_gradcheck():
    kw = make(2, 4, 6, 3, None, torch.float32, requires_grad=True)
    args = (kw["u"], kw["delta"], kw["A"], kw["B"][:, None], kw["C"][:, None], kw["D"], kw["z"], kw["delta_bias"], True,
            None, True)
    torch.library.opcheck(torch.ops.ssm_plugins.selective_scan_fwd, args)
    plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    out, last, _ = torch.ops.ssm_plugins.selective_scan_fwd(*plain)
    torch.library.opcheck(torch.ops.ssm_plugins.selective_scan_bwd,
                          (*plain[:9], torch.randn_like(out), torch.randn_like(last), True))
    kw = make(1, 3, 10, 2, None, torch.float64)
    names = ("u", "delta", "A", "B", "C", "D", "z")
    fn = lambda *ts: selective_scan(**dict(zip(names, ts)), delta_bias=kw["delta_bias"], delta_softplus=True,
                                    reverse=True, return_last_state=True)
    assert torch.autograd.gradcheck(fn, tuple(kw[n].clone().requires_grad_() for n in names))


# ---- backend choice and bad input ---------------------------------------------------------------------

@needs_kernel
def test_reference_backend_gives_the_same_numbers(monkeypatch):
    kw = make(2, 4, 21, 5, 2, torch.float64, requires_grad=False)
    out, last, got = grads(selective_scan, kw, True)
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    assert ops.backend_info()["forced_reference"]
    probe = selective_scan(**make(1, 2, 3, 2, None, torch.float64, requires_grad=True), delta_softplus=True)
    assert "selective_scan_fwd" not in type(probe.grad_fn).__name__  # the reference ran
    ref_out, ref_last, want = grads(selective_scan, kw, True)
    assert rel_err(out, ref_out) < 1e-12 and rel_err(last, ref_last) < 1e-12
    for name in want:
        assert rel_err(got[name], want[name]) < 1e-11, name


def test_backend_env_is_checked(monkeypatch):
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "fast")
    with pytest.raises(ValueError, match="SSM_PLUGINS_BACKEND"):
        selective_scan(**make())


def test_backend_info_lists_the_ops():
    info = ops.backend_info()
    if info["extension"]:
        assert info["ops"]["selective_scan_fwd"][0] == "cpu"
        assert info["ops"]["selective_scan_bwd"][0] == "cpu"


@pytest.mark.parametrize("change,name", [
    (dict(u=torch.randn(2, 4)), "u"),
    (dict(u=torch.randint(0, 3, (2, 4, 9))), "u"),
    (dict(delta=torch.randn(2, 4, 8)), "delta"),
    (dict(A=torch.randn(4)), "A"),
    (dict(A=torch.randn(5, 3)), "A"),
    (dict(B=torch.randn(2, 4, 9)), "B"),
    (dict(C=torch.randn(2, 3, 8)), "C"),
    (dict(B=torch.randn(2, 3, 3, 9), C=torch.randn(2, 3, 3, 9)), "groups"),
    (dict(B=torch.randn(2, 2, 3, 9)), "groups"),
    (dict(D=torch.randn(5)), "D"),
    (dict(delta_bias=torch.randn(4, 1)), "delta_bias"),
    (dict(z=torch.randn(2, 4, 8)), "z"),
    (dict(z="not a tensor"), "z"),
])
def test_bad_input_names_the_argument(change, name):
    kw = dict(make(), **change)
    with pytest.raises(ValueError, match=name):
        selective_scan(**kw)


# ---- CUDA (a machine with a GPU) ------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("length", [150, 2100])  # one chunk; three backward chunks from the saved states
def test_cuda_matches_cpu(dtype, length):
    assert _backend.has_kernel("selective_scan_bwd", "cuda")
    kw = make(2, 6, length, 16, 2, dtype)
    cpu_out, cpu_last, cpu_grads = grads(selective_scan, kw, True)
    cuda_kw = {k: None if v is None else v.cuda() for k, v in kw.items()}
    out, last, got = grads(selective_scan, cuda_kw, True)
    tol = {torch.float64: 1e-11, torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    assert rel_err(out.cpu(), cpu_out) < tol and rel_err(last.cpu(), cpu_last) < max(tol, 1e-5)
    for name in cpu_grads:
        assert rel_err(got[name].cpu(), cpu_grads[name]) < max(tol, 5e-5), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("length", [150, 2100])
def test_cuda_low_rank_reverse_matches_cpu(dtype, length):
    """delta_proj (the CUDA forward forms Δ per chunk) and reverse (the kernels scan from the end)."""
    kw = make_low_rank(2, 6, length, 16, dtype=dtype)
    fn = lambda **a: selective_scan(**a, reverse=True)
    cpu_out, cpu_last, cpu_grads = grads(fn, kw, True)
    out, last, got = grads(fn, {k: None if v is None else v.cuda() for k, v in kw.items()}, True)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    assert rel_err(out.cpu(), cpu_out) < tol and rel_err(last.cpu(), cpu_last) < max(tol, 1e-5)
    for name in cpu_grads:
        assert rel_err(got[name].cpu(), cpu_grads[name]) < max(tol, 5e-5), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_backward_rejects_saved_states_on_another_device():
    kw = make(1, 2, 1500, 2, None, torch.float32, D=False, z=False, bias=False)
    args = tuple(t.cuda() for t in (kw["u"], kw["delta"], kw["A"], kw["B"][:, None], kw["C"][:, None]))
    out, _, states = torch.ops.ssm_plugins.selective_scan_fwd(*args, None, None, None, False)
    with pytest.raises(RuntimeError, match="on u's device"):
        torch.ops.ssm_plugins.selective_scan_bwd(*args, None, None, None, False, torch.ones_like(out), None, False,
                                                 states.cpu())
