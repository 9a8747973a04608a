"""The 2-D SSM family's spatial mixers (ssm_plugins.layers.spatial_mixers): which kind takes which option, the
models' timm kwargs, and build() against make_spatial_mixer."""
import dataclasses

import pytest
import torch
import torch.nn as nn

from ssm_plugins.layers import S4ND, SSM2D, MegaBlock, MultiHeadEMA
from ssm_plugins.layers.spatial_mixers import MIXER_OPTIONS, SPATIAL_MIXERS, SpatialMixerOptions, make_spatial_mixer

# every option set away from its default, so a layer that receives one shows it
NON_DEFAULT = dict(d_state=4, n_ssm=2, directions=2, complex=True, complex_param="polar", layernorm=True, fused=False)


def test_options_declare_each_default_once_and_the_table_covers_every_kind():
    fields = {f.name: f.default for f in dataclasses.fields(SpatialMixerOptions)}
    assert fields == dict(kind="ssm2d", d_state=16, n_ssm=8, directions=4, complex=False, complex_param="cartesian",
                          layernorm=False, fused=True, extra=None)
    assert set(MIXER_OPTIONS) == set(SPATIAL_MIXERS)
    assert MIXER_OPTIONS["ssm2d"] == tuple(NON_DEFAULT)  # the 2-D SSM takes every option
    assert MIXER_OPTIONS["s4nd"] == ("d_state", "n_ssm")
    assert MIXER_OPTIONS["ema"] == ("d_state",)
    assert MIXER_OPTIONS["none"] == ()


@pytest.mark.parametrize("kind, layer_type, taken", [
    ("ssm2d", SSM2D, NON_DEFAULT),
    ("s4nd", S4ND, dict(d_state=4, n_ssm=2)),
    ("ema", MultiHeadEMA, dict(d_state=4)),
    ("none", nn.Identity, {}),
])
def test_each_kind_takes_its_options_and_ignores_the_others(kind, layer_type, taken):
    options = SpatialMixerOptions(kind, **NON_DEFAULT)
    assert options.layer_kwargs() == taken
    layer = options.build(8)
    assert type(layer) is layer_type
    for name, value in taken.items():
        attribute = {"layernorm": "norm"}.get(name, name)
        got = getattr(layer, attribute)
        assert (isinstance(got, nn.LayerNorm) if name == "layernorm" else got == value), name
    if kind != "none":
        assert layer.input_fmt == "NHWC"
        assert layer(torch.randn(2, 3, 4, 8)).shape == (2, 3, 4, 8)


def test_extra_goes_to_the_layer_constructor():
    layer = SpatialMixerOptions("s4nd", d_state=4, extra=dict(init="lin", bidirectional=False)).build(8)
    assert layer.init == "lin" and not layer.bidirectional
    with pytest.raises(TypeError, match="bidirectional"):  # fixed by the factory (EMA: bidirectional, as Mega)
        SpatialMixerOptions("ema", extra=dict(bidirectional=False)).build(8)


def test_bad_kind_and_none_with_extra_raise():
    with pytest.raises(ValueError, match=r"spatial_mixer must be one of \('ssm2d', 's4nd', 'ema', 'none'\)"):
        SpatialMixerOptions("conv")
    with pytest.raises(ValueError, match=r"spatial_mixer='none' takes no extra arguments, got \['d_state'\]"):
        SpatialMixerOptions("none", extra=dict(d_state=4))
    assert isinstance(SpatialMixerOptions("none", extra={}).build(8), nn.Identity)
    with pytest.raises(TypeError, match="mixer_kwargs must be a dict"):
        SpatialMixerOptions("ssm2d", extra=[("d_state", 4)])


def test_pop_model_kwargs_takes_the_timm_kwargs_and_leaves_the_rest():
    kwargs = dict(embed_dim=16, spatial_mixer="s4nd", ssm_d_state=4, ssm_n_ssm=2, mixer_kwargs=dict(init="lin"))
    options = SpatialMixerOptions.pop_model_kwargs(kwargs, default_kind="ema")
    assert options == SpatialMixerOptions("s4nd", d_state=4, n_ssm=2, extra=dict(init="lin"))
    assert kwargs == dict(embed_dim=16)
    assert SpatialMixerOptions.pop_model_kwargs({}, default_kind="ema") == SpatialMixerOptions("ema")
    # an options object as spatial_mixer: the ssm_* kwargs update it
    given = SpatialMixerOptions("ssm2d", complex=True)
    assert (SpatialMixerOptions.pop_model_kwargs(dict(spatial_mixer=given, ssm_d_state=4), "ema")
            == SpatialMixerOptions("ssm2d", complex=True, d_state=4))


def test_mixer_kwargs_means_the_same_in_the_models_and_the_blocks():
    # one dict of the layer's keyword arguments: option names set the options, the others go to extra
    expected = SpatialMixerOptions("s4nd", d_state=4, extra=dict(init="lin"))
    mixer_kwargs = dict(d_state=4, init="lin")
    assert SpatialMixerOptions.from_mixer_kwargs("s4nd", mixer_kwargs) == expected
    model_kwargs = dict(spatial_mixer="s4nd", mixer_kwargs=mixer_kwargs)
    assert SpatialMixerOptions.pop_model_kwargs(model_kwargs, "ema") == expected
    torch.manual_seed(0)
    block = MegaBlock(8, 4, 8, 8, spatial_mixer="s4nd", mixer_kwargs=mixer_kwargs, max_positions=16)
    torch.manual_seed(0)
    assert _same_state(block, MegaBlock(8, 4, 8, 8, spatial_mixer=expected, max_positions=16))
    assert SpatialMixerOptions.from_mixer_kwargs("ema", None) == SpatialMixerOptions("ema")
    with pytest.raises(TypeError, match="ssm_d_state given twice: as a model kwarg and in mixer_kwargs"):
        SpatialMixerOptions.pop_model_kwargs(dict(ssm_d_state=8, mixer_kwargs=dict(d_state=4)), "ssm2d")
    with pytest.raises(TypeError, match="d_state given twice"):
        SpatialMixerOptions.from_mixer_kwargs("ssm2d", dict(d_state=4), d_state=8)
    with pytest.raises(TypeError, match="mixer_kwargs must be a dict or None, got list"):
        SpatialMixerOptions.from_mixer_kwargs("ssm2d", [("d_state", 4)])


def test_pop_model_kwargs_names_unknown_ssm_keys():
    with pytest.raises(TypeError, match=r"ssm_dstate, ssm_kind; the options are ssm_d_state, ssm_n_ssm, "
                                        r"ssm_directions, ssm_complex, ssm_complex_param, ssm_layernorm, ssm_fused"):
        SpatialMixerOptions.pop_model_kwargs(dict(ssm_dstate=4, ssm_kind="ema"), default_kind="ssm2d")
    with pytest.raises(ValueError, match="spatial_mixer must be one of"):
        SpatialMixerOptions.pop_model_kwargs(dict(spatial_mixer="conv"), default_kind="ssm2d")


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("kind", SPATIAL_MIXERS)
def test_build_equals_make_spatial_mixer_from_the_same_seed(kind):
    options = dict(NON_DEFAULT, complex=kind == "ssm2d")
    torch.manual_seed(0)
    built = SpatialMixerOptions(kind, **options).build(8, dtype=torch.float64)
    draw_after_built = torch.rand(1)
    torch.manual_seed(0)
    made = make_spatial_mixer(kind, 8, dtype=torch.float64, **options)
    assert type(built) is type(made) and repr(built) == repr(made) and _same_state(built, made)
    assert torch.equal(torch.rand(1), draw_after_built)  # the same random draws


@pytest.mark.parametrize("kind", ["ssm2d", "s4nd", "ema", "none"])
def test_mega_block_takes_the_options_object_or_the_old_call_form(kind):
    mixer_kwargs = None if kind == "none" else dict(d_state=4, n_ssm=2)
    torch.manual_seed(0)
    old = MegaBlock(8, 4, 8, 8, spatial_mixer=kind, mixer_kwargs=mixer_kwargs, max_positions=16)
    torch.manual_seed(0)
    new = MegaBlock(8, 4, 8, 8, spatial_mixer=SpatialMixerOptions(kind, **(mixer_kwargs or {})), max_positions=16)
    assert old.attn.spatial_mixer == new.attn.spatial_mixer == kind
    assert _same_state(old, new)
    with pytest.raises(ValueError, match="mixer_kwargs must be empty"):
        MegaBlock(8, 4, 8, 8, spatial_mixer=SpatialMixerOptions(kind), mixer_kwargs=dict(d_state=4))
