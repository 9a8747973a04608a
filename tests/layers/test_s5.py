"""S5SSM / S5Block (ssm_plugins/layers/s5.py), the S5 baseline of the Myosotis paper: the chunked scan against S5's
recurrence written step by step (``s5/ssm.py``: ``discretize_zoh``, ``apply_ssm``), parameters and init shared
with MyoSSM, causality, the reverse scan and the padding mask."""
import pytest
import torch

from ssm_plugins.layers import MyoSSM, S5Block, S5SSM
from ssm_plugins.layers.s5 import s5_recurrence


def _s5_step_by_step(layer: S5SSM, u: torch.Tensor) -> torch.Tensor:
    """S5's apply_ssm, one step after the other, in complex128 (u: (B, L, H) float64)."""
    lam = torch.complex(layer.Lambda_re.double(), layer.Lambda_im.double())
    if layer.clip_eigs:
        lam = torch.complex(layer.Lambda_re.double().clamp(max=-1e-4), layer.Lambda_im.double())
    delta = layer.log_step.double().exp()
    lambda_bar = torch.exp(lam * delta)
    b_bar = ((lambda_bar - 1) / lam)[:, None] * torch.view_as_complex(layer.B.double().contiguous())
    c = torch.view_as_complex(layer.C.double().contiguous())
    scale = 2 if layer.conj_sym else 1
    batch, length, _ = u.shape

    def scan(steps):
        state, out = torch.zeros(batch, lam.numel(), dtype=torch.complex128), {}
        for k in steps:
            state = lambda_bar * state + u[:, k].to(torch.complex128) @ b_bar.T
            out[k] = state
        return torch.stack([out[k] for k in range(length)], dim=1)

    y = scale * (scan(range(length)) @ c.T).real
    if layer.C_reverse is not None:
        c_rev = torch.view_as_complex(layer.C_reverse.double().contiguous())
        y = y + scale * (scan(reversed(range(length))) @ c_rev.T).real
    return y + layer.D.double() * u


@pytest.mark.parametrize("conj_sym,bidirectional,clip_eigs", [(True, False, False), (False, False, True),
                                                               (True, True, False)])
def test_layer_equals_s5_step_by_step_recurrence(conj_sym, bidirectional, clip_eigs):
    torch.manual_seed(0)
    layer = S5SSM(6, 8, blocks=2, conj_sym=conj_sym, bidirectional=bidirectional, clip_eigs=clip_eigs,
                  dt_min=0.01, dt_max=0.5).double()
    with torch.no_grad():
        layer.Lambda_re[0] = 0.01  # an unstable mode: clip_eigs decides whether it is clipped
    u = torch.randn(2, 37, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(u), _s5_step_by_step(layer, u), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("length,chunk", [(300, 32), (32, 32), (7, 32), (65, 8), (1, 4)])
def test_chunked_recurrence_equals_the_loop_at_any_length(length, chunk):
    torch.manual_seed(1)
    v = torch.randn(2, length, 5, dtype=torch.complex128)
    a = torch.exp(torch.complex(-torch.rand(5, dtype=torch.float64) * 0.05, torch.rand(5, dtype=torch.float64) * 3))
    state, want = torch.zeros(2, 5, dtype=torch.complex128), []
    for k in range(length):
        state = a * state + v[:, k]
        want.append(state)
    want = torch.stack(want, 1)
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        x_re, x_im = s5_recurrence(v.real.to(dtype), v.imag.to(dtype), a.real.to(dtype), a.imag.to(dtype),
                                   chunk=chunk)
        assert x_re.dtype == dtype
        torch.testing.assert_close(torch.complex(x_re, x_im).to(torch.complex128), want, rtol=tol, atol=tol)
    back_re, back_im = s5_recurrence(v.real.flip(1), v.imag.flip(1), a.real, a.imag, reverse=True, chunk=chunk)
    torch.testing.assert_close(torch.complex(back_re, back_im).flip(1), want)


def test_parameters_and_initialisation_are_myossms():
    torch.manual_seed(3)
    myo = MyoSSM(12, 16, blocks=2, C_init="lecun_normal")
    torch.manual_seed(3)
    s5 = S5SSM(12, 16, blocks=2, C_init="lecun_normal")
    assert {n: p for n, p in s5.named_parameters()}.keys() == {n for n, _ in myo.named_parameters()}
    for (name, a), (_, b) in zip(myo.named_parameters(), s5.named_parameters()):
        assert torch.equal(a, b), name
    # S5's count: Λ re/im and log Δ (P_c each), B̃ and C̃ (P_c x H complex), D (H)
    p_c, h = 8, 12
    assert sum(p.numel() for p in s5.parameters()) == 3 * p_c + 4 * p_c * h + h
    bidirectional = S5SSM(12, 16, blocks=2, bidirectional=True)
    assert sum(p.numel() for p in bidirectional.parameters()) == 3 * p_c + 6 * p_c * h + h
    assert not torch.equal(bidirectional.C, bidirectional.C_reverse)


def test_causal_unless_bidirectional():
    torch.manual_seed(4)
    u = torch.randn(1, 20, 4)
    changed = u.clone()
    changed[:, 12] += 1.0
    causal = S5SSM(4, 8)
    diff = (causal(changed) - causal(u)).abs().amax(dim=(0, 2))
    assert diff[:12].max() == 0 and diff[12:].min() > 1e-3
    both = S5SSM(4, 8, bidirectional=True)
    assert (both(changed) - both(u)).abs().amax(dim=(0, 2))[:12].min() > 1e-3


def test_padded_steps_never_reach_the_valid_ones():
    torch.manual_seed(5)
    block = S5Block(4, 8, norm="layer", bidirectional=True).eval()
    u = torch.randn(2, 10, 4)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[:, 7:] = True
    garbage = u.clone()
    garbage[:, 7:] = 100 * torch.randn(2, 3, 4)
    torch.testing.assert_close(block(garbage, padding_mask=mask)[:, :7], block(u, padding_mask=mask)[:, :7])
    assert not torch.allclose(block(garbage)[:, :7], block(u)[:, :7])  # without the mask they do


def test_block_is_myoblock_with_gelu_and_the_s5_recurrence():
    torch.manual_seed(6)
    block = S5Block(8, 8, dropout=0.0).eval()
    x = torch.randn(3, 15, 8)
    z = block.norm(x.reshape(-1, 8)).reshape(x.shape)
    y = torch.nn.functional.gelu(block.ssm(z))
    torch.testing.assert_close(block(x), x + y * torch.sigmoid(block.gate(y)))


def test_bf16_input_runs_the_scan_in_float32():
    layer = S5SSM(4, 8)
    u = torch.randn(2, 16, 4)
    out = layer(u.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), layer(u.bfloat16().float()), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bad,match", [(torch.randn(2, 5, 3), r"shape \(B, L, dim\) with dim=4, got"),
                                       (torch.randn(5, 4), r"shape \(B, L, dim\)"),
                                       (torch.randn(2, 5, 4, dtype=torch.complex64), "must be real")])
def test_bad_input_names_the_argument(bad, match):
    with pytest.raises(ValueError, match=match):
        S5SSM(4, 8)(bad)
