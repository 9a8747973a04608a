"""The eSSM paper's Fig. 7 baselines (ssm_plugins.layers.essm_baselines): Vanilla (dense A) and Diagonal, both
recurrent, against each other, against the FFT eSSM layer and against a direct convolution; the S4 (S4D) of
Figs. 1 / 6 and the DSS of Fig. 6 against their recurrences."""
import math

import pytest
import torch

from ssm_plugins.layers.essm import ESSM, essm_layer_param_count, hippo_legs_normal
from ssm_plugins.layers.essm_baselines import DSS, S4D, DiagonalRecurrentESSM, VanillaRecurrentSSM


def _params(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("glu", ["half_glu1", "gelu"])
def test_diagonal_recurrence_equals_the_fft_layer_with_the_same_parameters(glu):
    torch.manual_seed(0)
    fft = ESSM(8, d_state=6, n_heads=2, bidirectional=False, glu=glu)
    with torch.no_grad():  # spread the modes so that the test sees decay and oscillation
        fft.log_dt.uniform_(-3.0, 0.0)
        fft.Lambda_re.uniform_(-1.0, -0.1)
    recurrent = DiagonalRecurrentESSM(8, d_state=6, n_heads=2, glu=glu)
    recurrent.load_state_dict(fft.state_dict())
    x = torch.randn(3, 40, 8)
    torch.testing.assert_close(recurrent(x), fft(x), rtol=1e-4, atol=1e-4)
    assert _params(recurrent) == _params(fft) == essm_layer_param_count(8, 6, 2, glu, norm=False)


def test_diagonal_recurrent_layer_is_causal_only():
    with pytest.raises(ValueError, match="causal"):
        DiagonalRecurrentESSM(4, bidirectional=True)


def test_vanilla_with_a_diagonal_a_equals_the_diagonal_layer():
    torch.manual_seed(0)
    H, N = 6, 5
    vanilla = VanillaRecurrentSSM(H, N, glu="half_glu1").double()
    diagonal = DiagonalRecurrentESSM(H, N, conj_sym=False, glu="half_glu1").double()
    a = -torch.linspace(0.2, 2.0, N, dtype=torch.float64)
    with torch.no_grad():
        vanilla.A.copy_(torch.diag(a))
        vanilla.log_dt.uniform_(-2.0, 0.0)
        diagonal.Lambda_re.copy_(a[None])
        diagonal.Lambda_im.zero_()
        diagonal.log_dt.copy_(vanilla.log_dt[None])
        diagonal.B.copy_(vanilla.B[None])
        diagonal.C.copy_(vanilla.C[None])
        diagonal.D.copy_(vanilla.D[None])
        diagonal.gate.load_state_dict(vanilla.gate.state_dict())
    x = torch.randn(2, 30, H, dtype=torch.float64)
    torch.testing.assert_close(vanilla(x), diagonal(x), rtol=1e-10, atol=1e-10)


def test_vanilla_recurrence_equals_the_direct_convolution_with_its_powers_of_a():
    torch.manual_seed(0)
    layer = VanillaRecurrentSSM(4, 3, glu="gelu", channels_last=False).double()
    with torch.no_grad():
        layer.log_dt.fill_(-1.0)
    u = torch.randn(2, 4, 12, dtype=torch.float64)
    A_bar, B_bar = layer.discretize()
    kernel = torch.stack([layer.C @ torch.linalg.matrix_power(A_bar, j) @ B_bar for j in range(12)])  # (L, M, H)
    direct = torch.stack([sum(kernel[j] @ u[:, :, t - j].T for j in range(t + 1)).T for t in range(12)], -1)
    torch.testing.assert_close(layer.ssm(u), direct + layer.D[:, None] * u, rtol=1e-10, atol=1e-10)
    # ZOH of x' = Δ ⊙ (A x + B u) against its closed form Ā = exp(ΔA), B̄ = (ΔA)^-1 (Ā - I) ΔB
    dA = torch.exp(layer.log_dt)[:, None] * layer.A
    torch.testing.assert_close(A_bar, torch.linalg.matrix_exp(dA))
    torch.testing.assert_close(B_bar, torch.linalg.solve(dA, A_bar - torch.eye(3, dtype=torch.float64))
                               @ (torch.exp(layer.log_dt)[:, None] * layer.B))


def test_parameter_counts_at_the_papers_fig7_size():
    # H = M = N = 64, one head; without the gate the diagonal core is 2N + N + NH + MN + M = 8,448
    vanilla = VanillaRecurrentSSM(64, 64, glu="gelu")
    diagonal = DiagonalRecurrentESSM(64, 64, glu="gelu")
    assert _params(vanilla) == 3 * 64 * 64 + 64 + 64 == 12_416
    assert _params(diagonal) == _params(ESSM(64, 64, glu="gelu")) == 8_448
    assert _params(VanillaRecurrentSSM(64, 64)) == 12_416 + 64 * 64 + 64  # + the gate


def test_vanilla_is_initialised_from_hippo_and_is_stable():
    layer = VanillaRecurrentSSM(8, 8)
    eig = torch.linalg.eigvals(layer.A.double())
    torch.testing.assert_close(eig.real, torch.full((8,), -0.5, dtype=torch.float64), rtol=0, atol=1e-6)
    A_bar, _ = layer.discretize()
    assert torch.linalg.eigvals(A_bar.double()).abs().max() < 1
    assert torch.all(layer.D == 1)
    y = layer(torch.randn(2, 16, 8))
    assert y.shape == (2, 16, 8) and torch.isfinite(y).all()


def _s4d_by_recurrence(layer: S4D, u: torch.Tensor) -> torch.Tensor:
    """S4D's SSM step by step (complex128, B = 1, ZOH): x_t = exp(ΔA) x_(t-1) + (exp(ΔA) - 1)/A u_t, y = 2 Re(C x)."""
    dt = layer.log_dt.double().exp()[:, None]
    A = torch.complex(-layer.log_A_real.double().exp(), layer.A_imag.double())
    a_bar, b_bar = torch.exp(dt * A), (torch.exp(dt * A) - 1) / A
    C = torch.view_as_complex(layer.C.double().contiguous())
    x = u.double().transpose(1, 2)  # (B, H, L)

    def scan(c, steps):
        state, out = torch.zeros(*x.shape[:2], A.shape[1], dtype=torch.complex128), {}
        for t in steps:
            state = a_bar * state + b_bar * x[..., t, None]
            out[t] = 2 * (c * state).sum(-1).real
        return torch.stack([out[t] for t in range(x.shape[-1])], -1)

    y = scan(C[0], range(x.shape[-1]))
    if layer.bidirectional:
        y = y + scan(C[1], reversed(range(x.shape[-1])))
    y = torch.nn.functional.gelu(y + layer.D.double()[:, None] * x).transpose(1, 2)
    return torch.nn.functional.glu(layer.output_linear.double()(y), dim=-1)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_s4d_convolution_equals_its_recurrence(bidirectional):
    torch.manual_seed(0)
    layer = S4D(6, 8, bidirectional=bidirectional).double()
    with torch.no_grad():
        layer.log_dt.uniform_(-3.0, -0.5)
    u = torch.randn(2, 33, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(u), _s4d_by_recurrence(layer, u), rtol=1e-9, atol=1e-9)


def test_s4d_parameters_and_the_bidirectional_cost():
    H, N = 16, 64
    # log Δ (H), A real / imaginary (H N/2 each), C (H N/2 complex), D (H), Linear(H, 2H)
    assert _params(S4D(H, N)) == H + H * N + H * N + H + 2 * H * H + 2 * H
    assert _params(S4D(H, N, bidirectional=True)) - _params(S4D(H, N)) == H * N  # a second C (Fig. 6)
    assert _params(ESSM(H, H, n_heads=H, bidirectional=True)) == _params(ESSM(H, H, n_heads=H, bidirectional=False))
    with pytest.raises(ValueError, match="d_state must be even"):
        S4D(4, 7)
    with pytest.raises(ValueError, match="shape \\(B, L, d_model\\) with d_model=4"):
        S4D(4, 8)(torch.randn(2, 5, 3))


def _dss_by_recurrence(layer: DSS, u: torch.Tensor) -> torch.Tensor:
    """DSS's SSM step by step (complex128): x_t = e^(Δλ) x_(t-1) + b u_t, y = Re(W x), with b = (e^(Δλ) - 1)/λ
    ('exp') or 1 / (λ Σ_(r<L) e^(rΔλ)) ('softmax': Proposition 1's normalisation, the sum taken directly)."""
    lam = layer.eigenvalues().detach().to(torch.complex128)
    dt_lam = layer.log_dt.detach().double().exp()[:, None] * lam  # (H, N/2)
    length = u.shape[1]
    if layer.version == "exp":
        b = (dt_lam.exp() - 1) / lam
    else:
        b = 1 / (lam * torch.exp(dt_lam[..., None] * torch.arange(length, dtype=torch.float64)).sum(-1))
    W = torch.view_as_complex(layer.W.detach().double().contiguous())
    x = u.double().transpose(1, 2)  # (B, H, L)

    def scan(w, steps):
        state, out = torch.zeros(*x.shape[:2], lam.shape[0], dtype=torch.complex128), {}
        for t in steps:
            state = dt_lam.exp() * state + b * x[..., t, None]
            out[t] = (w * state).sum(-1).real
        return torch.stack([out[t] for t in range(length)], -1)

    y = scan(W[0], range(length))
    if layer.bidirectional:
        y = y + scan(W[1], reversed(range(length)))
    y = torch.nn.functional.gelu(y + layer.D.detach().double()[:, None] * x).transpose(1, 2)
    return torch.nn.functional.glu(layer.output_linear.double()(y), dim=-1)


@pytest.mark.parametrize("version", ["softmax", "exp"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_dss_convolution_equals_its_recurrence(version, bidirectional):
    torch.manual_seed(0)
    layer = DSS(5, 8, bidirectional=bidirectional, version=version, epsilon=0.0).double()
    with torch.no_grad():
        layer.log_dt.uniform_(-3.0, -0.5)
        if version == "softmax":  # an eigenvalue with Re λ > 0: DSS_softmax's kernel stays finite and exact
            layer.Lambda[1, 0] = 0.3
    u = torch.randn(2, 29, 5, dtype=torch.float64)
    torch.testing.assert_close(layer(u), _dss_by_recurrence(layer, u), rtol=1e-8, atol=1e-8)


def test_dss_softmax_kernel_stays_finite_where_the_direct_sum_overflows():
    layer = DSS(2, 4).double()
    with torch.no_grad():
        layer.Lambda[:, 0] = 5.0  # e^(l Δ λ) at l = 4095, Δ up to 0.1: e^2047, beyond float64
        layer.log_dt.fill_(math.log(0.1))
    k = layer.kernel(4096)
    assert torch.isfinite(k).all() and k.abs().max() > 0


def test_dss_initialisation_parameters_and_the_bidirectional_cost():
    H, N = 16, 64
    layer = DSS(H, N)
    # DSS's skew-HiPPO init: -1/2 + iω, ω > 0, the eigenvalues of HiPPO-LegS's normal part at size N
    lam = layer.eigenvalues().detach().to(torch.complex128)
    normal = torch.linalg.eigvals(hippo_legs_normal(N))
    torch.testing.assert_close(lam.real, torch.full((N // 2,), -0.5, dtype=torch.float64))
    torch.testing.assert_close(lam.imag.sort().values, normal.imag[normal.imag > 0].sort().values, rtol=1e-5,
                               atol=1e-5)
    # log Δ (H), Λ (N/2 complex, shared by the channels), W (H N/2 complex), D (H), Linear(H, 2H)
    assert _params(layer) == H + N + H * N + H + 2 * H * H + 2 * H
    assert _params(DSS(H, N, version="exp")) == _params(layer)
    assert _params(DSS(H, N, bidirectional=True)) - _params(layer) == H * N  # a second W (Fig. 6)
    with pytest.raises(ValueError, match="version"):
        DSS(4, 8, version="clip")
    with pytest.raises(ValueError, match="d_state must be even"):
        DSS(4, 7)
    with pytest.raises(ValueError, match="shape \\(B, L, d_model\\) with d_model=4"):
        DSS(4, 8)(torch.randn(2, 5, 3))
