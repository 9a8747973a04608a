"""The LTI token mixers of MambaMixer's Table 3 (layers/lti.py): their FFT convolutions against the recurrences
they stand for, HiPPO-LegS against its closed form, and the mixers inside MambaMixer / ViM2 blocks."""
import math

import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.layers.lti import LTITokenSSM, fft_conv, hippo_legs
from ssm_plugins.layers.mambamixer import SelectiveTokenMixer


def _recurrence(model: LTITokenSSM, x: torch.Tensor, direction: int = 0) -> torch.Tensor:
    """y_t = C h_t, h_t = Ā h_{t-1} + B̄ x_t, step by step in float64 (S4D: complex diagonal, ZOH, 2 Re)."""
    x = x.double()
    dt = model.log_dt.detach().double().exp()
    if model.kind == "s4":
        A = torch.complex(-model.log_A_real.detach().double().exp(), model.A_imag.detach().double())
        A_bar, B_bar = torch.exp(dt[:, None] * A), (torch.exp(dt[:, None] * A) - 1) / A
        C = torch.view_as_complex(model.C.detach().double()[direction].contiguous())
        state = torch.zeros(x.shape[0], *A.shape, dtype=A.dtype)
        ys = []
        for t in range(x.shape[1]):
            state = A_bar * state + B_bar * x[:, t, :, None]
            ys.append(2 * (C * state).sum(-1).real)
        return torch.stack(ys, 1)
    A, B = hippo_legs(model.d_state)
    eye = torch.eye(model.d_state, dtype=torch.float64)
    left = eye - dt[:, None, None] / 2 * A
    A_bar = torch.linalg.solve(left, eye + dt[:, None, None] / 2 * A)  # (H, N, N)
    B_bar = torch.linalg.solve(left, dt[:, None, None] * B[:, None])[..., 0]  # (H, N)
    C = model.C.detach().double()[direction]
    state = torch.zeros(x.shape[0], model.channels, model.d_state, dtype=torch.float64)
    ys = []
    for t in range(x.shape[1]):
        state = torch.einsum("hnm,bhm->bhn", A_bar, state) + B_bar * x[:, t, :, None]
        ys.append((C * state).sum(-1))
    return torch.stack(ys, 1)


def test_hippo_legs_is_the_closed_form():
    A, B = hippo_legs(3)
    r3, r5, r15 = math.sqrt(3), math.sqrt(5), math.sqrt(15)
    torch.testing.assert_close(A, torch.tensor([[-1.0, 0, 0], [-r3, -2, 0], [-r5, -r15, -3]], dtype=torch.float64))
    torch.testing.assert_close(B, torch.tensor([1.0, r3, r5], dtype=torch.float64))


@pytest.mark.parametrize("kind", ["s4", "hippo"])
def test_convolution_is_the_recurrence(kind):
    torch.manual_seed(0)
    model = LTITokenSSM(5, d_state=8, kind=kind, dt_min=0.05, dt_max=0.5)  # Δ large enough for a long memory
    x = torch.randn(2, 37, 5)
    torch.testing.assert_close(model(x).double(), _recurrence(model, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["s4", "hippo"])
def test_bidirectional_adds_the_reversed_sequence_through_its_own_kernel(kind):
    torch.manual_seed(0)
    model = LTITokenSSM(4, d_state=6, kind=kind, bidirectional=True, dt_min=0.05, dt_max=0.5)
    x = torch.randn(3, 20, 4)
    expected = _recurrence(model, x) + _recurrence(model, x.flip(1), direction=1).flip(1)
    torch.testing.assert_close(model(x).double(), expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(model.C[0], model.C[1])  # two kernels, not one used twice


def test_fft_conv_is_causal_and_not_circular():
    x, k = torch.zeros(1, 8), torch.arange(1.0, 9.0)[None]
    x[0, -1] = 1.0  # only the last step: a circular convolution would wrap it onto the first outputs
    torch.testing.assert_close(fft_conv(x, k), torch.tensor([[0.0] * 7 + [1.0]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(fft_conv(x, k, reverse=True), k.flip(-1), atol=1e-5, rtol=0)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="d_state must be even"):
        LTITokenSSM(4, d_state=5, kind="s4")
    with pytest.raises(ValueError, match="kind must be one of"):
        LTITokenSSM(4, kind="s5")
    with pytest.raises(ValueError, match=r"x must have shape \(batch, L, 4\), got \(2, 3\)"):
        LTITokenSSM(4)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="token_mixer must be one of"):
        timm.create_model("vim2_t", img_size=64, embed_dim=32, depth=2, token_mixer="s6")


@pytest.mark.parametrize("kind", ["s4", "hippo"])
def test_token_mixer_is_causal_by_default_and_sees_the_future_when_not(kind):
    torch.manual_seed(0)
    x = torch.randn(1, 12, 8)
    later = x.clone()
    later[:, 8:] += 1.0
    for causal in (None, False):
        mixer = SelectiveTokenMixer(8, d_state=4, token_mixer=kind, causal=causal)
        change = (mixer(x)[:, :8] - mixer(later)[:, :8]).abs().max().item()  # FFT rounding: 1e-8, not 0
        assert (change < 1e-6) == (causal is None), (causal, change)
    assert SelectiveTokenMixer(8, token_mixer=kind).no_weight_decay_names[0] == "D"


@pytest.mark.parametrize("kind", ["s4", "hippo"])
def test_vim2_with_an_lti_token_mixer_trains_every_parameter(kind):
    torch.manual_seed(0)
    model = timm.create_model("vim2_t", img_size=64, embed_dim=32, depth=2, n_interactions=2, spm_inplanes=8,
                              d_state=4, token_mixer=kind, num_classes=3)
    assert not any(".token_mixer.fwd." in n or ".token_mixer.bwd." in n for n, _ in model.named_parameters())
    model(torch.randn(2, 3, 64, 64)).logsumexp(-1).sum().backward()
    mixers = [(n, p) for n, p in model.named_parameters() if ".token_mixer." in n]
    assert mixers and all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in mixers)
    assert {f"blocks.0.token_mixer.lti.{n}" for n in model.blocks[0].token_mixer.lti.no_weight_decay_names} <= \
        set(model.no_weight_decay())
