"""2-D SSM kernel and FFT convolution ("2-D SSM: A General Spatial Layer for Visual Transformers",
arXiv:2306.06635): the test vector and the NumPy reference of docs/2d-ssm.md ('Test vector', 'Reference
implementation'), the Roesser recurrence (paper Eq. 2) run directly, dense convolution, gradcheck, bad input, FLOP
counts."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ssm_plugins import ops
from ssm_plugins.ops import _backend, reference
from ssm_plugins.ops import ssm2d as ssm2d_mod

needs_kernel = pytest.mark.skipif(not _backend.has_kernel("ssm2d_kernel_fwd", "cpu"),
                                  reason="ssm_plugins._C not built")


# ---- the NumPy reference (docs/2d-ssm.md, 'Reference implementation'; verified against the official SymPy tables)

def halve_h(i, j): return (i == 0 and j == 1) or (i >= 1 and j >= 2)
def halve_v(i, j): return (j == 0 and i == 1) or (j >= 1 and i >= 2)


def np_ssm2d_kernel(A1, A2, A3, A4, B1, B2, C1, C2, L1, L2):
    N = A1.shape[0]
    dt = np.result_type(A1, B1, C1)
    XH = np.zeros((L1, L2, N), dt); XV = np.zeros((L1, L2, N), dt)
    for i in range(L1):
        for j in range(L2):
            if i == 0 and j == 0:
                XH[0, 0], XV[0, 0] = B1, B2
                continue
            if j >= 1:
                XH[i, j] = (0.5 if halve_h(i, j) else 1.0) * (A1 * XH[i, j-1] + A2 * XV[i, j-1])
            if i >= 1:
                XV[i, j] = (0.5 if halve_v(i, j) else 1.0) * (A3 * XH[i-1, j] + A4 * XV[i-1, j])
    K = (XH @ C1 + XV @ C2) / np.sqrt(N)
    K[0, 1:] *= 2; K[1:, 0] *= 2
    return K.real


def np_causal_conv_fft(x, K):
    L1, L2 = x.shape[-2:]
    s = (2 * L1, 2 * L2)
    return np.fft.irfft2(np.fft.rfft2(x, s=s) * np.fft.rfft2(K, s=s), s=s)[..., :L1, :L2]


def np_ssm2d_layer(x, kernels, D, n_ssm, dirs):
    flips = [(), (-2,), (-1,), (-2, -1)] if dirs == 4 else [(), (-2, -1)]
    C = x.shape[0]
    y = D[:, None, None] * x
    for d, f in enumerate(flips):
        Kc = kernels[d][np.arange(C) % n_ssm]
        xf = np.flip(x, f) if f else x
        yf = np.stack([np_causal_conv_fft(xf[c], Kc[c]) for c in range(C)])
        y = y + (np.flip(yf, f) if f else yf)
    return y


def np_kernels(A, B, C, height, width):
    """The NumPy reference per kernel set: A (4, S, N), B, C (2, S, N) numpy (constrained) -> (S, H, W)."""
    return np.stack([np_ssm2d_kernel(*A[:, s], *B[:, s], *C[:, s], height, width) for s in range(A.shape[1])])


# ---- the plain (un-normalised) Roesser recurrence (paper Eq. 2-4; docs/2d-ssm.md, 'Grid convention') -------

def roesser(u, A1, A2, A3, A4, B1, B2, C1, C2):
    """y[i,j] = C1 x^h[i,j] + C2 x^v[i,j] with x^h[i,j] = A1 x^h[i,j-1] + A2 x^v[i,j-1] + B1 u[i,j] and
    x^v[i,j] = A3 x^h[i-1,j] + A4 x^v[i-1,j] + B2 u[i,j], zero boundary; diagonal A, scalars per state n."""
    L1, L2 = u.shape
    N = A1.shape[0]
    xh = np.zeros((L1 + 1, L2 + 1, N)); xv = np.zeros((L1 + 1, L2 + 1, N))  # row/col 0 = boundary
    y = np.zeros((L1, L2))
    for i in range(L1):
        for j in range(L2):
            xh[i + 1, j + 1] = A1 * xh[i + 1, j] + A2 * xv[i + 1, j] + B1 * u[i, j]
            xv[i + 1, j + 1] = A3 * xh[i, j + 1] + A4 * xv[i, j + 1] + B2 * u[i, j]
            y[i, j] = C1 @ xh[i + 1, j + 1] + C2 @ xv[i + 1, j + 1]
    return y


def dense_conv2d(x, kernel, origin=(0, 0)):
    """y[..., i, j] = Σ_{a,b} kernel[..., a, b] x[..., i + o1 - a, j + o2 - b], by the definition."""
    H, W = x.shape[-2:]
    kh, kw = kernel.shape[-2:]
    batch = np.broadcast_shapes(x.shape[:-2], kernel.shape[:-2])
    y = np.zeros((*batch, H, W))
    for i in range(H):
        for j in range(W):
            for a in range(kh):
                for b in range(kw):
                    p, q = i + origin[0] - a, j + origin[1] - b
                    if 0 <= p < H and 0 <= q < W:
                        y[..., i, j] += kernel[..., a, b] * x[..., p, q]
    return y


# ---- helpers --------------------------------------------------------------------------------------------

BACKENDS = ["kernel", "reference"]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    if request.param == "reference":
        monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    elif not _backend.has_kernel("ssm2d_kernel_fwd", "cpu"):
        pytest.skip("ssm_plugins._C not built")
    return request.param


def random_constrained(S, N, is_complex, seed=0):
    """Constrained parameters as numpy: A (4, S, N) with |A| < 1, B (2, S, N), C (2, S, N)."""
    rng = np.random.default_rng(seed)
    sig = lambda z: 1 / (1 + np.exp(-z))
    A = sig(rng.normal(0, 0.2, (4, S, N)))
    B = sig(rng.normal(0, 0.2, (2, S, N)))
    C = rng.normal(0, 1, (2, S, N))
    if is_complex:
        A = A * np.exp(2j * np.pi * rng.uniform(0, 1, (4, S, N)))
        B = B + 1j * sig(rng.normal(0, 0.2, (2, S, N)))
        C = C + 1j * rng.normal(0, 1, (2, S, N))
    return A, B, C


def kernel_from_numpy(A, B, C, height, width, dtype=torch.float64, directions=2):
    cplx = torch.complex128 if dtype == torch.float64 else torch.complex64
    to = lambda a: torch.from_numpy(a).to(cplx if np.iscomplexobj(a) else dtype)
    out = ops.ssm2d_kernel(to(A), to(B), to(C), height, width, directions=directions, parameterisation=None)
    return out.reshape(-1, height, width)


# ---- kernel values --------------------------------------------------------------------------------------

TEST_VECTOR_4x4 = [
    [0.400000, 0.740000, 0.666000, 0.599400],
    [-0.230000, 0.059500, 0.029550, 0.015795],
    [-0.161000, 0.052450, 0.026805, 0.014045],
    [-0.112700, 0.040495, 0.021310, 0.011289],
]


def test_spec_test_vector(backend):
    """docs/2d-ssm.md, 'Test vector' (N = 1, real, no sigmoid) on 4x4, and the 3x5 continuation (prefix
    consistency)."""
    one = lambda v: torch.tensor([[v, v]], dtype=torch.float64).T  # (S=2, N=1): two identical sets
    A = torch.stack([one(v) for v in (0.9, 0.5, 0.3, 0.7)])
    B = torch.stack([one(v) for v in (0.6, 0.4)])
    C = torch.stack([one(v) for v in (1.0, -0.5)])
    K = ops.ssm2d_kernel(A, B, C, 4, 4, directions=2, parameterisation=None)
    assert K.shape == (2, 1, 4, 4) and K.dtype == torch.float64
    torch.testing.assert_close(K[0, 0], torch.tensor(TEST_VECTOR_4x4, dtype=torch.float64), atol=1e-6, rtol=0)
    K35 = ops.ssm2d_kernel(A, B, C, 3, 5, directions=2, parameterisation=None)[1, 0]
    torch.testing.assert_close(K35[:, :4], K[1, 0, :3], atol=1e-12, rtol=0)
    torch.testing.assert_close(K35[:, 4], torch.tensor([0.539460, 0.009355, 0.007699], dtype=torch.float64),
                               atol=1e-6, rtol=0)


GRIDS = [(5, 7), (7, 4), (1, 6), (6, 1), (1, 1), (3, 3), (2, 9)]


@pytest.mark.parametrize("is_complex", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_appendix_a_vs_oracle_vs_kernel(grid, is_complex):
    """The NumPy reference == our oracle == the compiled kernel (N = 9: two CPU chunks)."""
    H, W = grid
    A, B, C = random_constrained(4, 9, is_complex, seed=H * 10 + W)
    expected = torch.from_numpy(np_kernels(A, B, C, H, W))
    to = lambda a: torch.from_numpy(a)
    oracle = reference.ssm2d_kernel(to(A), to(B), to(C), H, W)
    torch.testing.assert_close(oracle, expected, atol=1e-12, rtol=1e-10)
    if _backend.has_kernel("ssm2d_kernel_fwd", "cpu"):
        torch.testing.assert_close(kernel_from_numpy(A, B, C, H, W), expected, atol=1e-12, rtol=1e-10)
        got32 = kernel_from_numpy(A, B, C, H, W, dtype=torch.float32)
        assert got32.dtype == torch.float32
        torch.testing.assert_close(got32.double(), expected, atol=1e-5, rtol=1e-4)


def coefficient_table(height, width):
    """The paper's generalised Pascal table (App. A, Eq. 16), built without SymPy by running the normalised recurrence
    on dictionaries {(z1, z2, z3, z4, b): c}: x^h[i][j] = Σ c A1^z1 A2^z2 A3^z3 A4^z4 B_b (same for x^v)."""
    def merged(*terms):
        out = {}
        for scale, table, k in terms:
            for key, c in table.items():
                z = list(key)
                z[k] += 1
                out[tuple(z)] = out.get(tuple(z), 0.0) + scale * c
        return out
    XH = [[{} for _ in range(width)] for _ in range(height)]
    XV = [[{} for _ in range(width)] for _ in range(height)]
    XH[0][0], XV[0][0] = {(0, 0, 0, 0, 0): 1.0}, {(0, 0, 0, 0, 1): 1.0}
    for i in range(height):
        for j in range(width):
            if (i, j) == (0, 0):
                continue
            if j >= 1:
                f = 0.5 if halve_h(i, j) else 1.0
                XH[i][j] = merged((f, XH[i][j - 1], 0), (f, XV[i][j - 1], 1))
            if i >= 1:
                f = 0.5 if halve_v(i, j) else 1.0
                XV[i][j] = merged((f, XH[i - 1][j], 2), (f, XV[i - 1][j], 3))
    return XH, XV


def test_coefficient_table_method_gives_the_same_kernel():
    """Paper Sec. 3.3 / App. B (Vandermonde powers times table coefficients) == the compiled recurrence; every
    coefficient is in (0, 1] and a cell has at most 2 L_max - 2 terms (docs/2d-ssm.md, 'Kernel computation')."""
    H, W, N = 6, 8, 4
    A, B, C = random_constrained(2, N, True, seed=6)
    XH, XV = coefficient_table(H, W)
    terms = [len(t) for row in XH + XV for t in row]
    coefficients = [c for row in XH + XV for t in row for c in t.values()]
    assert max(terms) <= 2 * max(H, W) - 2 and 0 < min(coefficients) and max(coefficients) <= 1
    K = np.zeros((2, H, W))
    edge = reference.ssm2d.edge_factors(H, W).numpy()
    for s in range(2):
        def value(table):
            return sum(c * np.prod([A[k, s] ** z[k] for k in range(4)], axis=0) * B[z[4], s]
                       for z, c in table.items()) if table else np.zeros(N)
        for i in range(H):
            for j in range(W):
                K[s, i, j] = (C[0, s] @ value(XH[i][j]) + C[1, s] @ value(XV[i][j])).real * edge[i, j] / np.sqrt(N)
    np.testing.assert_allclose(kernel_from_numpy(A, B, C, H, W).numpy(), K, atol=1e-12)


@pytest.mark.parametrize("N", [1, 16])
def test_first_row_and_column_are_the_plain_roesser_impulse_response(backend, N):
    """docs/2d-ssm.md, 'Normalisation and edge relaxation': edge relaxation undoes the single halving, so the first
    row and column equal the un-normalised recurrence (run directly on a delta), up to the 1/sqrt(N) scale."""
    A, B, C = random_constrained(2, N, False, seed=N)
    H, W = 6, 5
    K = kernel_from_numpy(A, B, C, H, W)[0].numpy()
    delta = np.zeros((H, W)); delta[0, 0] = 1
    plain = roesser(delta, *A[:, 0], *B[:, 0], *C[:, 0]) / np.sqrt(N)
    np.testing.assert_allclose(K[0], plain[0], atol=1e-12)
    np.testing.assert_allclose(K[:, 0], plain[:, 0], atol=1e-12)
    assert not np.allclose(K[1:, 1:], plain[1:, 1:])  # the interior is normalised


def test_roesser_oracle_gives_the_pascal_kernel_of_eq_28():
    one = lambda v: np.array([float(v)])
    delta = np.zeros((5, 5)); delta[0, 0] = 1
    K = roesser(delta, *map(one, [1, 1, 1, 0, 1, 0, 1, 0]))
    pascal = [[1, 1, 1, 1, 1], [0, 1, 2, 3, 4], [0, 0, 1, 3, 6], [0, 0, 0, 1, 4], [0, 0, 0, 0, 1]]
    np.testing.assert_array_equal(K, np.array(pascal, dtype=float))


def test_causal_convolution_with_the_impulse_response_is_the_recurrence(backend):
    """Paper Eq. 9-11: running the (plain) Roesser recurrence on an input equals the causal convolution with its
    impulse response, which is what fft_conv2d with origin (0, 0) computes."""
    A, B, C = random_constrained(1, 3, False, seed=3)
    params = (*A[:, 0], *B[:, 0], *C[:, 0])
    H, W = 5, 8
    u = np.random.default_rng(1).normal(size=(H, W))
    delta = np.zeros((H, W)); delta[0, 0] = 1
    impulse = roesser(delta, *params)
    y = ops.fft_conv2d(torch.from_numpy(u), torch.from_numpy(impulse))
    np.testing.assert_allclose(y.numpy(), roesser(u, *params), atol=1e-10)


def test_states_and_kernel_bounded_for_unit_parameters(backend):
    """docs/2d-ssm.md, 'Normalisation and edge relaxation': with A = B = 1 every normalised state is <= 1, so K / e
    stays in [0, 1] on a large grid."""
    A = torch.ones(4, 2, 1, dtype=torch.float64)
    C = torch.zeros(2, 2, 1, dtype=torch.float64)
    C[0] = 1  # K reads x^h only
    K = ops.ssm2d_kernel(A, A[:2], C, 40, 33, directions=2, parameterisation=None)[0, 0]
    scaled = K / reference.ssm2d.edge_factors(40, 33)
    assert scaled.min() >= 0 and scaled.max() <= 1 + 1e-12


# ---- parameterisations and directions -------------------------------------------------------------------

def stored_params(S, N, parameterisation, seed=0):
    """Stored (unconstrained) parameters, initialised as code-v1 (docs/2d-ssm.md, 'Initialisation')."""
    g = torch.Generator().manual_seed(seed)
    normal = lambda *shape, std=1.0: torch.randn(*shape, generator=g, dtype=torch.float64) * std
    if parameterisation == "real":
        return normal(4, S, N, std=0.2), normal(2, S, N, std=0.2), normal(2, S, N)
    A = 0.5 + 2.5 * torch.rand(4, S, N, 2, generator=g, dtype=torch.float64)
    return A, normal(2, S, N, 2, std=0.2), normal(2, S, N, 2)


def constrain_numpy(A, B, C, parameterisation):
    """The parameterisation (paper Sec. 3.2, App. E.1; docs/2d-ssm.md, 'Parameterisation') written out in NumPy."""
    A, B, C = A.numpy(), B.numpy(), C.numpy()
    sig = lambda z: 1 / (1 + np.exp(-z))
    if parameterisation == "real":
        return sig(A), sig(B), C
    polar = lambda r, angle_logit: r * np.exp(2j * np.pi * sig(angle_logit))
    Ac = polar(sig(A[..., 0]), A[..., 1])
    if parameterisation == "complex":
        return Ac, sig(B[..., 0]) + 1j * sig(B[..., 1]), C[..., 0] + 1j * C[..., 1]
    return Ac, polar(sig(B[..., 0]), B[..., 1]), polar(C[..., 0], C[..., 1])


@pytest.mark.parametrize("parameterisation", ["real", "complex", "complex_polar"])
@pytest.mark.parametrize("directions", [2, 4])
def test_parameterisations_and_direction_layout(backend, parameterisation, directions):
    n_ssm, N, H, W = 3, 5, 4, 6
    A, B, C = stored_params(directions * n_ssm, N, parameterisation)
    K = ops.ssm2d_kernel(A, B, C, H, W, directions=directions, parameterisation=parameterisation)
    assert K.shape == (directions, n_ssm, H, W) and K.dtype == torch.float64
    expected = np_kernels(*constrain_numpy(A, B, C, parameterisation), H, W)
    np.testing.assert_allclose(K.reshape(-1, H, W).numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("directions", [2, 4])
@pytest.mark.parametrize("grid", [(5, 7), (4, 4), (1, 5)], ids=lambda g: f"{g[0]}x{g[1]}")
def test_fused_kernel_equals_appendix_a_layer(backend, directions, grid):
    """docs/2d-ssm.md, 'Fused kernel': one convolution with the fused (2H-1, 2W-1) kernel == the NumPy reference's
    per-direction layer."""
    n_ssm, N, C = 2, 4, 5
    H, W = grid
    A, B, Cp = stored_params(directions * n_ssm, N, "real", seed=7)
    kernels = ops.ssm2d_kernel(A, B, Cp, H, W, directions=directions)
    fused = ops.ssm2d_kernel(A, B, Cp, H, W, directions=directions, fused=True)
    assert fused.shape == (n_ssm, 2 * H - 1, 2 * W - 1)
    torch.testing.assert_close(fused, ops.fuse_directions(kernels))
    rng = np.random.default_rng(0)
    x, D = rng.normal(size=(C, H, W)), rng.normal(size=C)
    expected = np_ssm2d_layer(x, kernels.numpy(), D, n_ssm, directions)
    y = ops.fft_conv2d(torch.from_numpy(x), fused[torch.arange(C) % n_ssm], origin=(H - 1, W - 1))
    y = y + torch.from_numpy(D)[:, None, None] * torch.from_numpy(x)
    np.testing.assert_allclose(y.numpy(), expected, atol=1e-10)


# ---- fft_conv2d -----------------------------------------------------------------------------------------

CONV_CASES = [  # x shape, kernel shape, origin
    ((5, 7), (5, 7), (0, 0)),
    ((2, 3, 4, 9), (3, 4, 9), (0, 0)),        # per-channel kernels broadcast over the batch
    ((3, 5, 3), (5, 3), (2, 1)),
    ((4, 6), (7, 11), (3, 5)),                # kernel larger than the input
    ((4, 6), (7, 11), (6, 10)),
    ((1, 1), (1, 1), (0, 0)),
    ((1, 8), (1, 3), (0, 1)),
    ((2, 5, 5), (1, 9, 9), (4, 4)),           # fused-kernel shape
]


@pytest.mark.parametrize("x_shape,k_shape,origin", CONV_CASES, ids=str)
def test_fft_conv2d_equals_dense_convolution(backend, x_shape, k_shape, origin):
    rng = np.random.default_rng(len(x_shape) + k_shape[-1])
    x, kernel = rng.normal(size=x_shape), rng.normal(size=k_shape)
    y = ops.fft_conv2d(torch.from_numpy(x), torch.from_numpy(kernel), origin=origin)
    np.testing.assert_allclose(y.numpy(), dense_conv2d(x, kernel, origin), atol=1e-10)
    y32 = ops.fft_conv2d(torch.from_numpy(x).float(), torch.from_numpy(kernel).float(), origin=origin)
    assert y32.dtype == torch.float32
    np.testing.assert_allclose(y32.numpy(), dense_conv2d(x, kernel, origin), atol=1e-4)


def test_fft_conv2d_matches_appendix_a_causal_conv():
    x, K = np.random.default_rng(2).normal(size=(2, 2, 7, 5))
    y = ops.fft_conv2d(torch.from_numpy(x), torch.from_numpy(K))
    np.testing.assert_allclose(y.numpy(), np_causal_conv_fft(x, K), atol=1e-12)


def test_non_contiguous_inputs(backend):
    A, B, C = stored_params(4, 3, "complex")
    want = ops.ssm2d_kernel(A, B, C, 5, 3, directions=2, parameterisation="complex")
    nc = lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)  # same values, transposed strides
    got = ops.ssm2d_kernel(nc(A), nc(B), nc(C), 5, 3, directions=2, parameterisation="complex")
    torch.testing.assert_close(got, want)
    x = torch.randn(3, 8, 10, dtype=torch.float64)[:, ::2, ::2]
    kernel = torch.randn(5, 4, dtype=torch.float64).T
    np.testing.assert_allclose(ops.fft_conv2d(x, kernel).numpy(), dense_conv2d(x.numpy(), kernel.numpy()),
                               atol=1e-10)


# ---- gradients ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("parameterisation", ["real", "complex", "complex_polar"])
def test_kernel_gradcheck(backend, parameterisation):
    A, B, C = (t.requires_grad_() for t in stored_params(2, 3, parameterisation, seed=5))
    fn = lambda A, B, C: ops.ssm2d_kernel(A, B, C, 4, 5, directions=2, parameterisation=parameterisation)
    assert torch.autograd.gradcheck(fn, (A, B, C))


def test_kernel_gradcheck_constrained_complex(backend):
    """parameterisation=None takes complex tensors directly; gradcheck uses PyTorch's conjugate convention."""
    A, B, C = (torch.from_numpy(t).requires_grad_() for t in random_constrained(2, 2, True, seed=4))
    fn = lambda A, B, C: ops.ssm2d_kernel(A, B, C, 3, 4, directions=2, parameterisation=None)
    assert torch.autograd.gradcheck(fn, (A, B, C))


@needs_kernel
@pytest.mark.parametrize("parameterisation", ["real", "complex"])
def test_compiled_backward_matches_oracle_autograd(monkeypatch, parameterisation):
    """The compiled adjoint recurrence vs autograd through the oracle: N = 19 (three CPU chunks), 9x6."""
    A, B, C = stored_params(4, 19, parameterisation, seed=9)
    weight = torch.randn(2, 2, 9, 6, dtype=torch.float64)

    def grads():
        leaves = [t.clone().requires_grad_() for t in (A, B, C)]
        K = ops.ssm2d_kernel(*leaves, 9, 6, directions=2, parameterisation=parameterisation)
        return torch.autograd.grad((K * weight).sum(), leaves)

    compiled = grads()
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "reference")
    for got, want in zip(compiled, grads()):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("x_shape,k_shape,origin", [((2, 2, 3, 4), (2, 3, 4), (0, 0)),
                                                    ((3, 4), (5, 6), (2, 4))], ids=str)
def test_fft_conv2d_gradcheck(backend, x_shape, k_shape, origin):
    x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
    kernel = torch.randn(k_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, k: ops.fft_conv2d(x, k, origin=origin), (x, kernel))


@needs_kernel
def test_opcheck_registrations():
    """Schema, fake (meta) kernels and autograd registration of the raw ops."""
    A, B, C = (torch.from_numpy(t).requires_grad_() for t in random_constrained(2, 3, False))
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.ssm_plugins.ssm2d_kernel_fwd.default, (A, B, C, 3, 4), test_utils=checks)
    x = torch.randn(2, 3, 4, 5, requires_grad=True)
    kernel = torch.randn(3, 4, 5, requires_grad=True)
    torch.library.opcheck(torch.ops.ssm_plugins.fft_conv2d.default, (x, kernel, 1, 2), test_utils=checks)


# ---- precision ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_parameters_compute_in_float32(backend, dtype):
    A, B, C = stored_params(4, 4, "real")
    want = ops.ssm2d_kernel(*(t.to(dtype).float() for t in (A, B, C)), 6, 7)
    got = ops.ssm2d_kernel(*(t.to(dtype) for t in (A, B, C)), 6, 7)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_bf16_large_grid_finite():
    """128 x 128 = 16384 tokens: kernel from bf16 parameters and bf16 convolution stay finite."""
    A, B, C = (t.to(torch.bfloat16) for t in stored_params(2, 4, "real"))
    K = ops.ssm2d_kernel(A, B, C, 128, 128, directions=2, fused=True)
    assert torch.isfinite(K).all()
    x = torch.randn(1, 1, 128, 128, dtype=torch.bfloat16)
    y = ops.fft_conv2d(x, K, origin=(127, 127))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


# ---- bad input ------------------------------------------------------------------------------------------

def _good():
    return stored_params(4, 3, "real")


@pytest.mark.parametrize("change,name", [
    (lambda a: dict(a, A=a["A"][:3]), "A"),
    (lambda a: dict(a, A=a["A"][:, :3]), "A"),                     # S not a multiple of directions
    (lambda a: dict(a, A=a["A"].long()), "A"),
    (lambda a: dict(a, B=a["B"][:, :, :2]), "B"),
    (lambda a: dict(a, C=a["C"][None]), "C"),
    (lambda a: dict(a, height=0), "height"),
    (lambda a: dict(a, width=2.5), "width"),
    (lambda a: dict(a, directions=3), "directions"),
    (lambda a: dict(a, parameterisation="polar"), "parameterisation"),
    (lambda a: dict(a, parameterisation="complex"), "A"),          # complex needs (4, S, N, 2)
])
def test_kernel_bad_input(change, name):
    A, B, C = _good()
    args = change(dict(A=A, B=B, C=C, height=3, width=4, directions=4, parameterisation="real"))
    with pytest.raises(ValueError, match=name):
        ops.ssm2d_kernel(args.pop("A"), args.pop("B"), args.pop("C"), args.pop("height"), args.pop("width"),
                         **args)


def test_fuse_directions_bad_input():
    with pytest.raises(ValueError, match="kernels"):
        ops.fuse_directions(torch.zeros(3, 2, 4, 4))
    with pytest.raises(ValueError, match="kernels"):
        ops.fuse_directions(torch.zeros(2, 4, 4))


@pytest.mark.parametrize("x,kernel,origin,name", [
    (torch.randn(5), torch.randn(3, 3), (0, 0), "x"),
    (torch.randn(4, 4).int(), torch.randn(3, 3), (0, 0), "x"),
    (torch.randn(4, 4), torch.randn(3), (0, 0), "kernel"),
    (torch.randn(2, 4, 4), torch.randn(3, 3, 3), (0, 0), "kernel"),
    (torch.randn(4, 4), torch.randn(3, 3), (3, 0), "origin"),
    (torch.randn(4, 4), torch.randn(3, 3), (0,), "origin"),
    (torch.randn(4, 0), torch.randn(3, 3), (0, 0), "x"),
])
def test_fft_conv2d_bad_input(x, kernel, origin, name):
    with pytest.raises(ValueError, match=name):
        ops.fft_conv2d(x, kernel, origin=origin)


# ---- FLOP counts ----------------------------------------------------------------------------------------

@needs_kernel
@pytest.mark.parametrize("parameterisation", ["real", "complex"])
def test_flop_counter_counts_the_kernel(parameterisation):
    S, N, H, W = 4, 3, 5, 6
    A, B, C = (t.requires_grad_() for t in stored_params(S, N, parameterisation))
    per_cell = 12 if parameterisation == "real" else 48  # documented in ssm2d._kernel_flops
    with FlopCounterMode(display=False) as counter:
        K = ops.ssm2d_kernel(A, B, C, H, W, directions=2, parameterisation=parameterisation)
    counts = counter.get_flop_counts()["Global"]
    assert counts[torch.ops.ssm_plugins.ssm2d_kernel_fwd] == per_cell * S * N * H * W > 0
    with FlopCounterMode(display=False) as counter:
        K.sum().backward()
    assert counter.get_flop_counts()["Global"][torch.ops.ssm_plugins.ssm2d_kernel_bwd] == 3 * per_cell * S * N * H * W


def test_flop_counter_counts_fft_conv2d():
    x = torch.randn(2, 3, 14, 14, requires_grad=True)
    kernel = torch.randn(3, 14, 14, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        y = ops.fft_conv2d(x, kernel)
        y.sum().backward()
    counts = counter.get_flop_counts()["Global"]
    # FFT grid 27 x 27 (= 3^3, already fast): rfft2 of 6 + 3 planes, 6 flops per product, irfft2 of 6.
    n = 27 * 27
    rfft = lambda planes: int(round(2.5 * planes * n * math.log2(n)))
    frequencies = 27 * 14
    assert counts[torch.ops.ssm_plugins.fft_conv2d] == rfft(6) + rfft(3) + 6 * 6 * frequencies + rfft(6) > 0
    assert counts[torch.ops.ssm_plugins.fft_conv2d_bwd] == rfft(6) + 2 * rfft(6) + 2 * rfft(3) + 12 * 6 * frequencies
    assert counts[torch.ops.ssm_plugins.fft_conv2d] == ssm2d_mod._fft_conv2d_flops(x.shape, kernel.shape, (0, 0))


# ---- CUDA -----------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("parameterisation", ["real", "complex"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(parameterisation, dtype):
    if not _backend.has_kernel("ssm2d_kernel_fwd", "cuda"):
        pytest.skip("extension built without CUDA")
    A, B, C = (t.to(dtype) for t in stored_params(8, 16, parameterisation, seed=11))
    weight = torch.randn(4, 2, 14, 9, dtype=dtype)
    results = {}
    for device in ("cpu", "cuda"):
        leaves = [t.to(device).requires_grad_() for t in (A, B, C)]
        K = ops.ssm2d_kernel(*leaves, 14, 9, directions=4, parameterisation=parameterisation)
        grads = torch.autograd.grad((K * weight.to(device)).sum(), leaves)
        x = torch.randn(2, 3, 14, 9, dtype=dtype, generator=torch.Generator().manual_seed(0)).to(device)
        y = ops.fft_conv2d(x, K[0, :1].expand(3, -1, -1))
        results[device] = [t.cpu() for t in (K, *grads, y)]
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)
    for got, want in zip(results["cuda"], results["cpu"]):
        torch.testing.assert_close(got, want, **tol)
