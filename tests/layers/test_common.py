"""The layer helpers of ssm_plugins.layers._common: stochastic depth and the argument checks."""
import pytest
import torch
import torch.nn as nn

from ssm_plugins.layers._common import DropPath, choice, drop_path, is_positive_int, make_mixer_norm, positive_int


def test_drop_path_zeroes_whole_samples_and_scales_the_kept_ones():
    torch.manual_seed(0)
    x = torch.ones(4000, 3, 5)
    y = drop_path(x, 0.25, training=True)
    per_sample = y.reshape(len(x), -1)
    kept = per_sample[:, 0] != 0
    assert torch.equal(per_sample[kept], torch.full_like(per_sample[kept], 1 / 0.75))  # scaled by 1/keep
    assert torch.all(per_sample[~kept] == 0)  # a sample is dropped whole
    assert abs(kept.float().mean().item() - 0.75) < 0.03
    assert abs(y.mean().item() - 1.0) < 0.05  # the expectation is x


def test_drop_path_is_the_identity_in_eval_and_at_zero():
    x = torch.randn(3, 4)
    assert drop_path(x, 0.5, training=False) is x
    assert drop_path(x, 0.0, training=True) is x
    module = DropPath(0.5).eval()
    assert module(x) is x and module.extra_repr() == "prob=0.5"


@pytest.mark.parametrize("prob", [1.0, -0.1, True, "0.1"])
def test_drop_path_module_rejects_bad_rates(prob):
    with pytest.raises(ValueError, match=r"^drop_path must be a float in \[0, 1\), got "):
        DropPath(prob)


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "4", None])
def test_positive_int_names_the_argument_and_what_was_expected(value):
    assert not is_positive_int(value)
    with pytest.raises(ValueError, match=rf"^d_state must be a positive int, got {value!r}$"):
        positive_int("d_state", value)


def test_positive_int_returns_the_value_and_takes_a_minimum():
    assert positive_int("dim", 7) == 7
    assert is_positive_int(2, minimum=2) and not is_positive_int(1, minimum=2)


def test_choice_and_mixer_norm():
    assert choice("norm", "rmsnorm", ("layernorm", "rmsnorm")) == "rmsnorm"
    with pytest.raises(ValueError, match=r"^norm must be one of \('layernorm', 'rmsnorm'\), got 'batch'$"):
        make_mixer_norm("batch", 8)
    norm = make_mixer_norm("layernorm", 8)
    assert isinstance(norm, nn.LayerNorm) and norm.eps == 1e-6
    assert isinstance(make_mixer_norm("rmsnorm", 8), nn.RMSNorm)


def test_eigh_fixed_phase_gives_the_same_vectors_whatever_phases_eigh_returns(monkeypatch):
    # eigh leaves each eigenvector's phase free (LAPACK's choice can differ between CPUs); the HiPPO inits project
    # B / C on these vectors, so they must not depend on it
    from ssm_plugins.layers._common import eigh_fixed_phase
    from ssm_plugins.layers.essm import hippo_diagonal_init

    torch.manual_seed(0)
    matrix = torch.randn(6, 6, dtype=torch.complex128)
    matrix = matrix + matrix.conj().T
    values, vectors = eigh_fixed_phase(matrix)
    torch.testing.assert_close(matrix @ vectors, vectors * values, rtol=0, atol=1e-12)
    assert torch.all(vectors[0].real > 0) and torch.all(vectors[0].imag.abs() < 1e-15)
    expected = hippo_diagonal_init(4)[1]
    real_eigh = torch.linalg.eigh
    phases = torch.exp(1j * torch.rand(8, dtype=torch.float64) * 6.28)

    def rotated(m):
        w, v = real_eigh(m)
        return w, v * phases[:v.shape[1]]

    monkeypatch.setattr(torch.linalg, "eigh", rotated)
    torch.testing.assert_close(hippo_diagonal_init(4)[1], expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(eigh_fixed_phase(matrix)[1], vectors, rtol=0, atol=1e-12)
