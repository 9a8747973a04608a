"""TSM2 / TSQS forecasters (ssm_plugins.models.tsm2) through timm: shapes, gradients, RevIN's scale/shift
equivariance, the dense weighted averaging, the timm contract of a forecaster (checkpoints, no downloads, meta build,
grad checkpointing, no_weight_decay) and clear errors."""
import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.models.tsm2 import TimeSeriesMixer

SMALL = dict(seq_len=48, pred_len=12, n_vars=3, patch_len=8, stride=4, embed_dim=16, depth=2, d_state=4, headdim=8,
             drop_rate=0.0)
NAMES = ["tsm2", "tsqs"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _model(name, **kwargs):
    torch.manual_seed(0)
    return timm.create_model(name, **dict(SMALL, **kwargs))


def test_registered_with_timm():
    assert set(timm.list_models(module="tsm2")) == set(NAMES)
    assert _model("tsm2").token_mixer == "s6" and _model("tsqs").token_mixer == "qs"


@pytest.mark.parametrize("name", NAMES)
def test_forecast_shape_and_every_parameter_learns(name):
    model = _model(name).train()
    x = torch.randn(2, 48, 3)
    y = model(x)
    assert y.shape == (2, 12, 3) and torch.isfinite(y).all()
    y.square().mean().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()] == []
    assert model.num_patches == (48 + 4 - 8) // 4 + 1  # PatchTST end padding by one stride


@pytest.mark.parametrize("name", NAMES)
def test_revin_makes_forecasts_scale_and_shift_equivariant(name):
    model = _model(name).eval()
    with torch.no_grad():
        for p in model.revin.parameters():  # any affine parameters
            p.add_(torch.rand_like(p))
        x = torch.randn(2, 48, 3)
        scale, shift = torch.tensor([3.0, 0.5, 10.0]), torch.tensor([-7.0, 2.0, 100.0])
        torch.testing.assert_close(model(x * scale + shift), model(x) * scale + shift, rtol=1e-4, atol=1e-3)
        plain = _model(name, revin=False).eval()
        assert (plain(x * scale + shift) - (plain(x) * scale + shift)).abs().max() > 1e-2


def test_dense_weighted_averaging_is_on_and_counted():
    dense, plain = _model("tsm2"), _model("tsm2", dense_wavg=False)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(dense) - count(plain) == 2 * (2 * 2 + 3)  # L(2L+3) scalars for L = 2 blocks
    plain.load_state_dict({k: v for k, v in dense.state_dict().items() if not k.startswith("stack.dense_")})
    x = torch.randn(2, 48, 3)
    with torch.no_grad():
        torch.testing.assert_close(dense.eval()(x), plain.eval()(x))  # identity init
    assert {"stack.dense_tok.0", "stack.dense_ch.1", "pos_embed", "revin.weight"} <= dense.no_weight_decay()
    assert "stack.blocks.0.token_mixer.fwd.A_log" in dense.no_weight_decay()


@pytest.mark.parametrize("variate_selection", ["history", "pooled"])
def test_variates_are_mixed_only_with_the_variate_mixer(variate_selection):
    x = torch.randn(1, 48, 3)
    moved = x.clone()
    moved[:, :, 2] = torch.randn(48)
    for variate_mixer, changes in ((True, True), (False, False)):
        model = _model("tsm2", variate_mixer=variate_mixer, variate_selection=variate_selection).eval()
        with torch.no_grad():
            delta = (model(moved)[:, :, 0] - model(x)[:, :, 0]).abs().max()
        assert (delta > 1e-6) == changes


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_round_trip_and_no_download(name, tmp_path, monkeypatch):
    source = _model(name).eval()
    path = tmp_path / "checkpoint.pth"
    torch.save({"state_dict": source.state_dict()}, path)
    loaded = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **SMALL).eval()
    x = torch.randn(2, 48, 3)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x))
    cfg = timm.models.get_pretrained_cfg(name)
    assert not cfg.url and cfg.hf_hub_id is None
    import timm.models._builder as builder

    monkeypatch.setattr(builder, "download_cached_file", lambda *a, **k: pytest.fail("download"))
    monkeypatch.setattr(builder, "load_state_dict_from_hf", lambda *a, **k: pytest.fail("download"))
    with pytest.raises(RuntimeError, match="No pretrained weights exist"):
        timm.create_model(name, pretrained=True, device="meta")


@pytest.mark.parametrize("name", NAMES)
def test_full_size_builds_on_meta(name):
    with torch.device("meta"):
        model = timm.create_model(name)
    assert all(p.is_meta for p in model.parameters())
    cpu = timm.create_model(name, n_vars=7, pred_len=96)
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in cpu.named_parameters()}
    assert model.seq_len == 512 and model.num_patches == 64  # look-back 512 (App. H.4), patches 16 / 8


def test_grad_checkpointing_is_exact_and_reset_classifier_changes_horizon():
    model = _model("tsqs").train()
    x = torch.randn(2, 48, 3)
    model(x).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.set_grad_checkpointing(True)
    model(x).sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)
    model.reset_classifier(24)
    assert model(x).shape == (2, 24, 3) and model.get_classifier().out_features == 24
    feats = model.forward_features(model.normalize(x)[0])
    assert feats.shape == (2, 3, model.num_patches, 16)
    assert model.forward_head(feats, pre_logits=True).shape == (2, 3, model.num_patches * 16)


def test_bad_input_raises_value_errors_naming_the_argument():
    model = _model("tsm2")
    for x in (torch.randn(2, 47, 3), torch.randn(2, 48, 4), torch.randn(48, 3)):
        with pytest.raises(ValueError, match=r"x must have shape \(batch, seq_len=48, n_vars=3\)"):
            model(x)
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        model(torch.ones(2, 48, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="patch_len"):
        TimeSeriesMixer(seq_len=8, patch_len=32, stride=8)
    with pytest.raises(ValueError, match="n_vars must be a positive int"):
        TimeSeriesMixer(n_vars=0)
    with pytest.raises(ValueError, match="features_only is not supported"):
        timm.create_model("tsm2", features_only=True)
    with pytest.raises(ValueError, match="token_mixer"):
        TimeSeriesMixer(**dict(SMALL, token_mixer="attention"))


def test_dlinear_decomposition_sums_back_to_the_input_and_its_trend_is_the_moving_average():
    from ssm_plugins.models.tsm2 import SeriesDecomposition

    torch.manual_seed(0)
    x = torch.randn(2, 60, 3)
    seasonal, trend = SeriesDecomposition(25)(x)
    torch.testing.assert_close(seasonal + trend, x, rtol=0, atol=1e-6)
    # the authors' moving_avg: the first / last value repeated 12 times at each end, mean of 25 steps
    padded = torch.cat([x[:, :1].expand(-1, 12, -1), x, x[:, -1:].expand(-1, 12, -1)], dim=1)
    torch.testing.assert_close(trend, padded.unfold(1, 25, 1).mean(-1), rtol=1e-5, atol=1e-6)
    ramp = torch.arange(60.0)[None, :, None]
    torch.testing.assert_close(SeriesDecomposition(25)(ramp)[1][:, 12:-12], ramp[:, 12:-12])  # a line is all trend
    with pytest.raises(ValueError, match="kernel_size must be a positive odd int"):
        SeriesDecomposition(24)


def test_dlinear_is_two_linear_maps_shared_by_the_variates():
    from ssm_plugins.models.tsm2 import DLinear

    torch.manual_seed(0)
    model = DLinear(seq_len=48, pred_len=12, n_vars=3)
    assert sum(p.numel() for p in model.parameters()) == 2 * (48 * 12 + 12)  # individual=False
    x = torch.randn(2, 48, 3)
    y = model(x)
    assert y.shape == (2, 12, 3)
    seasonal, trend = model.decomposition(x)
    expected = model.linear_seasonal[0](seasonal[:, :, 1]) + model.linear_trend[0](trend[:, :, 1])
    torch.testing.assert_close(y[:, :, 1], expected)  # variate 1 alone, the shared maps
    y.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    individual = DLinear(seq_len=48, pred_len=12, n_vars=3, individual=True)
    assert sum(p.numel() for p in individual.parameters()) == 3 * 2 * (48 * 12 + 12)
    assert individual(x).shape == (2, 12, 3)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, seq_len=48, n_vars=3\)"):
        model(torch.randn(2, 48, 4))
