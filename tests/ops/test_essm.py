"""eSSM fast tensor convolution (Liang & Li, "Efficient State Space Model via Fast Tensor Convolution and Block
Diagonalization", arXiv 2402.15290, Sec. 4.2-4.4; docs/essm.md, 'Test oracles'): oracles vs naive definitions,
kernel vs oracle."""
from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ssm_plugins.ops import _backend, essm_conv, reference
from ssm_plugins.ops._flops import fft_flops
from ssm_plugins.ops.essm import KERNEL_BWD_FLOPS, KERNEL_FWD_FLOPS, fft_size

needs_kernel = pytest.mark.skipif(not _backend.has_kernel("essm_kernel", "cpu"),
                                  reason="ssm_plugins._C has no essm_kernel CPU kernel")


def make_params(heads, modes, per_head, dtype=torch.float64, seed=0, device="cpu"):
    """Random per-head parameters: (lambda_re, lambda_im, log_dt, B, C, D) with Re λ < 0, m = h."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=dtype)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)
    params = (-(0.05 + rand(heads, modes)), 4 * randn(heads, modes), math.log(1e-3) + 4 * rand(heads, modes),
              randn(heads, modes, per_head), randn(heads, per_head, modes) / math.sqrt(modes),
              randn(heads, per_head))
    return tuple(p.to(device) for p in params)


def make_input(batch, width, length, dtype=torch.float64, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, width, length, generator=gen, dtype=dtype).to(device)


# ---- oracles against the naive definitions -----------------------------------------------------------

def test_toy_example_matches_dense_real_system():
    """The toy system of paper Sec. 5.1: A = [[-0.2, 1], [-1, -3]], B = C = I, D = 0, Δ = 0.005, 2000 steps, float64."""
    A = torch.tensor([[-0.2, 1.0], [-1.0, -3.0]], dtype=torch.float64)
    dt, steps = 0.005, 2000
    time = dt * torch.arange(steps, dtype=torch.float64)
    u = torch.stack([torch.sin(time), torch.cos(2 * time)])  # (2, L)
    A_bar = torch.linalg.matrix_exp(dt * A)
    B_bar = torch.linalg.solve(A, A_bar - torch.eye(2, dtype=torch.float64))  # ZOH: A^{-1}(e^{ΔA} - I) B, B = I

    def dense_recurrence(x):
        ys = []
        for t in range(steps):
            x = A_bar @ x + B_bar @ u[:, t]
            ys.append(x)  # y = C x with C = I
        return torch.stack(ys, dim=-1)

    y_dense = dense_recurrence(torch.zeros(2, dtype=torch.float64))
    eigenvalues, T = torch.linalg.eig(A)  # real and distinct: -0.620, -2.580
    T = T.real
    params = (eigenvalues.real[None], torch.zeros(1, 2, dtype=torch.float64),
              torch.full((1, 2), math.log(dt), dtype=torch.float64),
              torch.linalg.inv(T)[None], T[None])  # Λ, log Δ, B' = T^{-1} B, C' = C T
    y_fft = essm_conv(u[None], *params, conj_sym=False)[0]
    y_rec = reference.essm_recurrent(u[None], *params, conj_sym=False)[0]
    assert torch.allclose(y_fft, y_dense, rtol=0, atol=1e-11)
    assert torch.allclose(y_rec, y_dense, rtol=0, atol=1e-11)
    # State convergence (Proposition 1): the true system started at x = [1, 0] approaches the zero-state conv.
    gap = (dense_recurrence(torch.tensor([1.0, 0.0], dtype=torch.float64)) - y_fft).abs().amax(0)
    assert gap[-1] < 1e-2 * gap[0]


def test_dense_operator_is_the_spec_double_sum():
    """The dense oracle is exactly docs/essm.md 'Bidirectional kernel':
    x_t = Σ_{j<=t} k_j v_{t-j} + Σ_{j=1}^{L-1-t} k_{j-1} v_{t+j}."""
    lambda_re, lambda_im, log_dt, B, C, D = make_params(1, 2, 1)
    length = 6
    u = make_input(1, 1, length)
    g, z = reference.essm_discretize(lambda_re, lambda_im, log_dt)
    k = reference.essm_state_kernel(g, z, length)[0]  # (n, L)
    v = B[0, :, 0, None] * u[0]  # (n, L)
    x = torch.zeros_like(v)
    for t in range(length):
        x[:, t] = sum(k[:, j] * v[:, t - j] for j in range(t + 1))
        x[:, t] += sum((k[:, j - 1] * v[:, t + j] for j in range(1, length - t)), torch.zeros(2, dtype=v.dtype))
    expected = 2 * C[0] @ x + D[0, :, None] * u[0]
    got = reference.essm_dense(u, lambda_re, lambda_im, log_dt, B, C, D, bidirectional=True)[0]
    assert torch.allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("conj_sym", [True, False])
@pytest.mark.parametrize("length", [1, 2, 13])
def test_causal_conv_equals_recurrence(heads, conj_sym, length):
    """'Recurrent mode': the causal FFT convolution is the complex-diagonal recurrence (S = H is the SISO stack)."""
    width = modes = 4
    params = make_params(heads, modes // heads, width // heads)
    u = make_input(2, width, length)
    expected = reference.essm_recurrent(u, *params, conj_sym=conj_sym)
    for conv in (essm_conv, reference.essm_conv):
        assert torch.allclose(conv(u, *params, conj_sym=conj_sym), expected, rtol=0, atol=1e-11)


def test_causal_conv_equals_recurrence_float32():
    """'Test oracles', at float32: max abs error below 1e-4 with S > 1."""
    params = make_params(2, 8, 4, dtype=torch.float32)
    u = make_input(2, 8, 64, dtype=torch.float32)
    expected = reference.essm_recurrent(u.double(), *[p.double() for p in params])
    assert (essm_conv(u, *params).double() - expected).abs().max() < 1e-4


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("conj_sym", [True, False])
@pytest.mark.parametrize("length", [1, 2, 13])
def test_bidirectional_equals_dense_operator(heads, conj_sym, length):
    """'Bidirectional kernel': the packed FFT convolution is the dense operator with the shifted-by-one future term."""
    params = make_params(heads, 8 // heads, 4 // heads)
    u = make_input(2, 4, length)
    expected = reference.essm_dense(u, *params, bidirectional=True, conj_sym=conj_sym)
    for conv in (essm_conv, reference.essm_conv):
        got = conv(u, *params, bidirectional=True, conj_sym=conj_sym)
        assert torch.allclose(got, expected, rtol=0, atol=1e-11)
    causal = reference.essm_dense(u, *params, conj_sym=conj_sym)
    assert length == 1 or not torch.allclose(expected, causal)  # the future term is really there


@pytest.mark.parametrize("bidirectional", [False, True])
def test_any_fft_size_from_2L_gives_the_same_result(bidirectional):
    """'Bidirectional kernel': with the flipped kernel at the buffer's tail, every n_fft >= 2L is equivalent."""
    length = 11
    params = make_params(2, 3, 2)
    u = make_input(2, 4, length)
    expected = reference.essm_dense(u, *params, bidirectional=bidirectional)
    for n_fft in (2 * length, 2 * length + 1, 2 * length + 7, 64):
        for conv in (essm_conv, reference.essm_conv):
            got = conv(u, *params, bidirectional=bidirectional, n_fft=n_fft)
            assert torch.allclose(got, expected, rtol=0, atol=1e-11), n_fft


def test_fft_size_is_a_fast_size_of_at_least_2L():
    assert [fft_size(n) for n in (1, 7, 1009, 1024, 4096)] == [2, 15, 2025, 2048, 8192]


def test_conj_sym_is_the_explicit_conjugate_pair_system():
    """'Heads and state size': γ = 2 with Re(.) equals the 2n-state complex system with modes (λ, λ*) and tied
    B, C rows/columns."""
    lambda_re, lambda_im, log_dt, B, C, D = make_params(2, 3, 2)
    u = make_input(2, 4, 9)
    pair = lambda t: torch.cat([t, t], dim=1)
    g, z = reference.essm_discretize(pair(lambda_re), torch.cat([lambda_im, -lambda_im], 1), pair(log_dt))
    v = torch.einsum("snh,bshl->bsnl", pair(B), u.reshape(2, 2, 2, 9)).to(g.dtype)
    sigma, ys = torch.zeros_like(v[..., 0]), []
    for t in range(9):
        sigma = torch.exp(z) * sigma + g * v[..., t]
        ys.append(torch.einsum("smn,bsn->bsm", torch.cat([C, C], 2).to(g.dtype), sigma))
    y = torch.stack(ys, -1)
    assert y.imag.abs().max() < 1e-12  # the pair system is real
    expected = y.real.reshape(2, 4, 9) + D.reshape(1, 4, 1) * u
    assert torch.allclose(essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D), expected, rtol=0, atol=1e-11)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_heads_only_see_their_own_channels(bidirectional):
    """'Test oracles': changing the input channels of head s changes only head s's pre-mixer output."""
    heads, per_head = 3, 2
    params = make_params(heads, 2, per_head)
    u = make_input(1, heads * per_head, 10)
    y = essm_conv(u, *params, bidirectional=bidirectional)
    bumped = u.clone()
    bumped[:, per_head:2 * per_head] += 1.0  # head 1
    changed = (essm_conv(bumped, *params, bidirectional=bidirectional) - y).abs().amax(dim=(0, 2)) > 1e-9
    assert changed.tolist() == [False, False, True, True, False, False]


def test_one_head_per_channel_is_a_stack_of_siso_convolutions():
    """Sec. 4.3 / 'Test oracles': S = H folds into H scalar kernels K_c[j] = γ Σ_i C_{c,i} k_{c,i,j} B_{c,i}."""
    width, length = 3, 8
    lambda_re, lambda_im, log_dt, B, C, D = make_params(width, 2, 1)
    u = make_input(2, width, length)
    g, z = reference.essm_discretize(lambda_re, lambda_im, log_dt)
    k = reference.essm_state_kernel(g, z, length)  # (H, n, L)
    siso = 2 * torch.einsum("ci,cij,ci->cj", C[:, 0], k, B[:, :, 0])  # (H, L)
    expected = D[None] * u
    for t in range(length):
        for j in range(t + 1):
            expected[..., t] += siso[:, j] * u[..., t - j]
    assert torch.allclose(essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D), expected, rtol=0, atol=1e-11)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_gbt_discretization_matches_its_recurrence(alpha):
    """App. B.2.2 (Eq. 29): GBT option, λ̄ = (1 + (1-α)Δλ)/(1 - αΔλ), g = Δ/(1 - αΔλ), kernel g λ̄^j."""
    lambda_re, lambda_im, log_dt, B, C, D = make_params(2, 3, 2)
    g, z = reference.essm_discretize(lambda_re, lambda_im, log_dt, discretization="gbt", gbt_alpha=alpha)
    lam, dt = torch.complex(lambda_re, lambda_im), log_dt.exp()
    assert torch.allclose(torch.exp(z), (1 + (1 - alpha) * dt * lam) / (1 - alpha * dt * lam))
    assert torch.allclose(g, dt / (1 - alpha * dt * lam))
    u = make_input(2, 4, 12)
    kw = dict(discretization="gbt", gbt_alpha=alpha)
    expected = reference.essm_recurrent(u, lambda_re, lambda_im, log_dt, B, C, D, **kw)
    assert torch.allclose(essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D, **kw), expected, atol=1e-11)


def test_dt_scale_multiplies_the_step():
    lambda_re, lambda_im, log_dt, B, C, D = make_params(2, 3, 2)
    u = make_input(2, 4, 12)
    scaled = essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D, dt_scale=2.0)
    assert torch.allclose(scaled, essm_conv(u, lambda_re, lambda_im, log_dt + math.log(2.0), B, C, D))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_dt_scale_2_on_half_rate_input_reproduces_the_full_rate_output(bidirectional):
    """'Δ scaling' (paper Sec. 5.6): zero-shot resampling. Smooth input, small Δ; without the rescale the output
    is far off."""
    lambda_re, lambda_im, _, B, C, D = make_params(2, 3, 2)
    log_dt = math.log(1e-3) + math.log(10) * torch.rand(2, 3, generator=torch.Generator().manual_seed(2),
                                                      dtype=torch.float64)
    time = torch.arange(4000, dtype=torch.float64)
    u = torch.stack([torch.sin(2 * math.pi * time / 400 + phase) for phase in range(4)])[None]
    kw = dict(bidirectional=bidirectional)
    full = essm_conv(u, lambda_re, lambda_im, log_dt, B, C, D, **kw)[..., ::2]
    half = essm_conv(u[..., ::2], lambda_re, lambda_im, log_dt, B, C, D, dt_scale=2.0, **kw)
    unscaled = essm_conv(u[..., ::2], lambda_re, lambda_im, log_dt, B, C, D, **kw)
    scale = full.abs().max()
    assert (half - full).abs().max() < 0.02 * scale
    assert (unscaled - full).abs().max() > 0.2 * scale


@pytest.mark.parametrize("heads, width, modes", [(4, 128, 128), (16, 128, 128), (64, 128, 128),
                                                 (64, 256, 512), (32, 128, 128)])
def test_parameter_count_formula(heads, width, modes):
    """'Parameter counts': the SSM core has 2N (Λ) + N (log Δ) + NH/S (B) + MN/S (C) + M (D) parameters (M = H)."""
    params = make_params(heads, modes // heads, width // heads, dtype=torch.float32)
    core = sum(p.numel() for p in params)
    assert core == 2 * modes + modes + modes * width // heads + width * modes // heads + width
    y = essm_conv(make_input(1, width, 3, dtype=torch.float32), *params, bidirectional=True)
    assert y.shape == (1, width, 3)


def test_parameter_count_reproduces_table_4_differences():
    """'Parameter counts': H = N = 128 with S = 4, 16, 64 differ by 2NH(1/4 - 1/16) = 6144 and
    2NH(1/16 - 1/64) = 1536."""
    def core(heads):
        return sum(p.numel() for p in make_params(heads, 128 // heads, 128 // heads, dtype=torch.float32))
    assert (core(4) - core(16), core(16) - core(64)) == (6144, 1536)


# ---- compiled kernel vs oracle -----------------------------------------------------------------------

AWKWARD = [  # (batch, H, N, S, L)
    (1, 4, 4, 4, 1),    # L = 1, S = H, n = h = 1
    (2, 6, 6, 3, 13),   # prime L
    (1, 4, 2, 2, 31),   # n = 1 per head
    (3, 8, 16, 1, 7),   # one head (S5-like)
    (2, 8, 8, 2, 64),
]


@needs_kernel
@pytest.mark.parametrize("batch, width, modes, heads, length", AWKWARD)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_matches_reference(batch, width, modes, heads, length, bidirectional, dtype):
    params = make_params(heads, modes // heads, width // heads, dtype=dtype)
    u = make_input(batch, length, width, dtype=dtype).transpose(1, 2)  # non-contiguous (batch, H, L)
    got = essm_conv(u, *params, bidirectional=bidirectional, conj_sym=heads != 2)
    expected = reference.essm_conv(u, *params, bidirectional=bidirectional, conj_sym=heads != 2)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert got.dtype == dtype and got.shape == (batch, width, length)
    assert torch.allclose(got, expected, rtol=tol, atol=tol)


@needs_kernel
@pytest.mark.parametrize("bidirectional", [False, True])
def test_raw_kernel_op(bidirectional):
    gen = torch.Generator().manual_seed(0)
    g_re, g_im, z_re, z_im = (torch.randn(3, 5, generator=gen, dtype=torch.float64) for _ in range(4))
    z_re = -z_re.abs() - 0.01  # a decaying kernel
    length, n_fft = 7, 17
    K = torch.ops.ssm_plugins.essm_kernel(g_re, g_im, z_re, z_im, length, n_fft, bidirectional)
    expected = reference.essm_state_kernel(torch.complex(g_re, g_im), torch.complex(z_re, z_im), length, n_fft,
                                           bidirectional)
    assert torch.allclose(K, expected, rtol=1e-13, atol=1e-13)
    args = (g_re, g_im, z_re, z_im, length, n_fft, bidirectional)
    torch.library.opcheck(torch.ops.ssm_plugins.essm_kernel.default, args)
    grads = [t.clone().requires_grad_() for t in args[:4]]
    assert torch.autograd.gradcheck(lambda *p: torch.ops.ssm_plugins.essm_kernel(*p, *args[4:]), grads)
    torch.library.opcheck(torch.ops.ssm_plugins.essm_kernel_bwd.default,
                          (torch.randn_like(K), *args[:5], bidirectional))
    with pytest.raises(RuntimeError, match="n_fft"):
        torch.ops.ssm_plugins.essm_kernel(g_re, g_im, z_re, z_im, length, 2 * length - 1, bidirectional)


def _gradcheck_conv(bidirectional):
    params = [p.requires_grad_() for p in make_params(2, 2, 2)]
    u = make_input(2, 4, 6).requires_grad_()
    fn = lambda *args: essm_conv(*args, bidirectional=bidirectional)
    return torch.autograd.gradcheck(fn, (u, *params))


@needs_kernel
@pytest.mark.parametrize("bidirectional", [False, True])
def test_gradcheck_kernel_path(bidirectional):
    assert _gradcheck_conv(bidirectional)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_gradcheck_reference_path(monkeypatch, bidirectional):
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    assert _gradcheck_conv(bidirectional)


@needs_kernel
def test_forced_reference_does_not_call_the_compiled_kernel(monkeypatch):
    params = make_params(2, 2, 2)
    u = make_input(1, 4, 5)
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    with FlopCounterMode(display=False) as counter:
        forced = essm_conv(u, *params)
    assert torch.ops.ssm_plugins.essm_kernel not in counter.get_flop_counts()["Global"]
    monkeypatch.delenv("SSM_PLUGINS_BACKEND")
    assert torch.allclose(forced, essm_conv(u, *params), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_forward_is_finite_at_L_16384(dtype):
    length = 16384
    params = make_params(2, 2, 2, dtype=torch.float32)
    u = make_input(1, 4, length, dtype=torch.float32)
    y = essm_conv(u.to(dtype), *[p.to(dtype) for p in params], bidirectional=True)
    assert y.dtype == dtype and y.shape == (1, 4, length)
    assert torch.isfinite(y).all()
    # the input was rounded to half precision; everything after that runs in float32
    expected = essm_conv(u.to(dtype).float(), *[p.to(dtype).float() for p in params], bidirectional=True)
    assert torch.allclose(y.float(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())


def test_autocast_does_not_lower_the_core_precision():
    params = make_params(2, 3, 2, dtype=torch.float32)
    u = make_input(2, 4, 16, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = essm_conv(u, *params)
    assert y.dtype == torch.float32
    assert torch.allclose(y, essm_conv(u, *params), rtol=1e-6, atol=1e-6)


@needs_kernel
def test_flop_counter_counts_the_kernel_op():
    batch, width, modes, heads, length = 2, 8, 8, 2, 10
    params = [p.requires_grad_() for p in make_params(heads, modes // heads, width // heads)]
    u = make_input(batch, width, length)
    with FlopCounterMode(display=False) as counter:
        essm_conv(u, *params).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    assert counts[torch.ops.ssm_plugins.essm_kernel] == KERNEL_FWD_FLOPS * modes * length > 0
    assert counts[torch.ops.ssm_plugins.essm_kernel_bwd] == KERNEL_BWD_FLOPS * modes * length > 0
    with FlopCounterMode(display=False) as counter:
        essm_conv(u, *params)
    # forward total: the kernel op, the two projection GEMMs (2·batch·L·N·h for B, 2·batch·L·M·n for C) and the
    # FFTs (ssm_plugins.ops._flops): rfft of v (batch·N rows) and of the kernel (N rows), irfft of batch·N rows
    projections = 2 * batch * length * modes * (width // heads) * 2
    n_fft = fft_size(length)
    ffts = sum(fft_flops((rows, n_fft), (-1,), real=True) for rows in (batch * modes, modes, batch * modes))
    assert counter.get_total_flops() == KERNEL_FWD_FLOPS * modes * length + projections + ffts


# ---- input checking --------------------------------------------------------------------------------

def _bad_inputs():
    params = dict(zip(("lambda_re", "lambda_im", "log_dt", "B", "C", "D"), make_params(2, 3, 2)))
    u = make_input(2, 4, 5)
    cases = [
        ("u", dict(u=u[0])),
        ("u", dict(u=u.to(torch.int64))),
        ("u", dict(u=u[..., :0])),
        ("B", dict(B=params["B"][:, :, :1])),
        ("B", dict(B=params["B"][0])),
        ("lambda_re", dict(lambda_re=params["lambda_re"][:, :2])),
        ("lambda_im", dict(lambda_im=params["lambda_im"][None])),
        ("log_dt", dict(log_dt=params["log_dt"].T)),
        ("C", dict(C=params["C"][:, :, :2])),
        ("D", dict(D=params["D"][:, :1])),
        ("D", dict(C=params["C"][:, :1], D=params["D"][:, :1])),  # m != h: no skip possible
        ("discretization", dict(discretization="euler")),
        ("gbt_alpha", dict(discretization="gbt", gbt_alpha=2.0)),
        ("dt_scale", dict(dt_scale=0.0)),
        ("n_fft", dict(n_fft=9)),
    ]
    return [pytest.param(name, {"u": u, **params, **change}, id=f"{name}-{i}") for i, (name, change) in
            enumerate(cases)]


@pytest.mark.parametrize("name, kwargs", _bad_inputs())
def test_bad_input_raises_value_error_naming_the_argument(name, kwargs):
    args = [kwargs.pop(k) for k in ("u", "lambda_re", "lambda_im", "log_dt", "B", "C", "D")]
    with pytest.raises(ValueError, match=name):
        essm_conv(*args, **kwargs)


# ---- CUDA ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cuda_matches_cpu(bidirectional, dtype):
    assert _backend.has_kernel("essm_kernel", "cuda")
    param_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    params_cpu = [p.requires_grad_() for p in make_params(4, 8, 8, dtype=param_dtype)]
    params_gpu = [p.detach().cuda().requires_grad_() for p in params_cpu]
    u = make_input(3, 32, 257, dtype=param_dtype).to(dtype)
    y_cpu = essm_conv(u, *params_cpu, bidirectional=bidirectional)
    y_gpu = essm_conv(u.cuda(), *params_gpu, bidirectional=bidirectional)
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 2e-2}[dtype]
    assert torch.allclose(y_gpu.cpu().float(), y_cpu.float(), rtol=tol, atol=tol * y_cpu.float().abs().max().item())
    grad = torch.randn_like(y_cpu, dtype=torch.float32).to(dtype)
    y_cpu.backward(grad)
    y_gpu.backward(grad.cuda())
    for p_cpu, p_gpu in zip(params_cpu, params_gpu):
        scale = p_cpu.grad.abs().max().item() + 1e-30
        assert torch.allclose(p_gpu.grad.cpu(), p_cpu.grad, rtol=tol, atol=tol * scale)
