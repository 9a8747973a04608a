"""The ViM2 / ViQS options behind the paper's ablation and study configs (configs_mmpretrain/, configs_mmdet/):
Table 4 "w/ f+b" (the naive forward + backward channel mixer) and "w/o Attn", Table 12's fixed scan sets, Table 13's
kernel sets, Table 14's test at a higher resolution than the model was built for (MambaMixer, arXiv:2403.19888 v2,
Table 4, App. I.1-I.3)."""
import functools

import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.layers.mambamixer import ForwardBackwardChannelMixer
from ssm_plugins.layers.switch_of_scans import SCAN_NAMES, SCAN_SETS, SwitchOfScans, resolve_scans, scan_orders
from ssm_plugins.models.vim2 import checkpoint_filter_fn

TINY = dict(img_size=64, embed_dim=32, depth=4, n_interactions=2, spm_inplanes=8, headdim=16, d_state=4,
            num_classes=10, drop_path_rate=0.0)
# Table 4 parameters (M) of the "w/ f+b" rows and of the full models
TABLE4_FB = {"vim2_t_fb": 16.8, "viqs_t_fb": 13.0}
TABLE4_FULL = {"vim2_t": 13.2, "viqs_t": 10.1}

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _params(name, **kwargs):
    model = timm.create_model(name, device="meta", **kwargs)
    return sum(p.numel() for p in model.parameters()) / 1e6


@functools.lru_cache(maxsize=None)
def _tiny(name, **overrides):
    torch.manual_seed(0)
    return timm.create_model(name, **dict(TINY, **overrides))


# ---- Table 4 "w/ f+b": the naive forward + backward channel mixer ---------------------------------------------------


@pytest.mark.parametrize("name", list(TABLE4_FB))
def test_fb_variant_parameters_against_table4(name):
    """Our f+b models against Table 4 (16.8M ViM2, 13.0M ViQS): within 10%, and each block's f+b mixer costs
    more than twice the QS mixer it replaces (two blocks, each with its own projections, conv and gate)."""
    ours, full = _params(name), _params(name[:-3])
    assert abs(ours / TABLE4_FB[name] - 1) <= 0.10, f"{name}: {ours:.2f}M vs paper {TABLE4_FB[name]}M"
    qs_mixers = full - _params(name[:-3], channel_mixer=False)
    assert ours - full > qs_mixers, (ours, full, qs_mixers)
    # the paper's increase is 3.6M (ViM2) / 2.9M (ViQS); ours is of the same size
    paper_increase = TABLE4_FB[name] - TABLE4_FULL[name[:-3]]
    assert abs((ours - full) / paper_increase - 1) <= 0.25, (ours - full, paper_increase)


def _reference_direction(direction, u, weight):
    """One direction of the f+b mixer, computed directly: causal conv and the S6 recurrence along the channels."""
    batch, length, dim = u.shape
    v = u @ direction.in_proj.weight.t()  # (batch, L, dim)
    k = direction.conv.kernel_size[0]
    taps = direction.conv.weight.reshape(k)
    padded = torch.nn.functional.pad(v, (k - 1, 0))
    v = torch.stack([(padded[..., c:c + k] * taps).sum(-1) for c in range(dim)], dim=-1) + direction.conv.bias
    v = torch.nn.functional.silu(v)
    sel = u.transpose(1, 2) @ weight.t()  # (batch, dim, 1 + 2N)
    n = direction.d_state
    dt = torch.nn.functional.softplus(sel[..., 0] + direction.dt_bias)  # (batch, dim)
    B, C = sel[..., 1:1 + n], sel[..., 1 + n:]
    a = -torch.exp(direction.A_log)
    h = u.new_zeros(batch, length, n)
    out = []
    for c in range(dim):  # the channels are the sequence, the L tokens the features
        h = torch.exp(dt[:, c, None, None] * a) * h + dt[:, c, None, None] * B[:, None, c, :] * v[:, :, c, None]
        out.append((h * C[:, None, c, :]).sum(-1) + direction.D * v[:, :, c])
    y = torch.stack(out, dim=-1)
    return y * torch.nn.functional.silu(u @ direction.gate_proj.weight.t())


def test_fb_mixer_is_a_forward_and_a_reversed_s6_block():
    torch.manual_seed(0)
    mixer = ForwardBackwardChannelMixer(6, 5, d_state=3).double()
    u = torch.randn(2, 5, 6, dtype=torch.float64)
    expected = (_reference_direction(mixer.fwd, u, mixer.fwd.x_proj.weight)
                + _reference_direction(mixer.bwd, u.flip(-1), mixer.bwd.x_proj.weight).flip(-1))
    torch.testing.assert_close(mixer(u), expected)
    # the two directions have their own projections, convolutions and gates: nothing is shared
    fwd, bwd = dict(mixer.fwd.named_parameters()), dict(mixer.bwd.named_parameters())
    assert set(fwd) == set(bwd) >= {"in_proj.weight", "conv.weight", "gate_proj.weight", "x_proj.weight", "A_log"}
    assert all(fwd[n].data_ptr() != bwd[n].data_ptr() for n in fwd)


def test_fb_mixer_directions_are_causal_each_way():
    """With channel-local projections (identity W_in and gate), a change at channel c reaches the forward block's
    outputs at channels >= c only and the backward block's at channels <= c only: the sum is non-causal."""
    torch.manual_seed(0)
    mixer = ForwardBackwardChannelMixer(8, 5, d_state=3).double()
    with torch.no_grad():
        for direction in (mixer.fwd, mixer.bwd):
            direction.in_proj.weight.copy_(torch.eye(8))
            direction.gate_proj.weight.copy_(torch.eye(8))
    u = torch.randn(1, 5, 8, dtype=torch.float64)
    bumped = u.clone()
    bumped[..., 4] += 1.0
    with torch.no_grad():
        fwd = mixer.fwd(bumped, mixer.fwd.x_proj.weight) - mixer.fwd(u, mixer.fwd.x_proj.weight)
        bwd = (mixer.bwd(bumped.flip(-1), mixer.bwd.x_proj.weight)
               - mixer.bwd(u.flip(-1), mixer.bwd.x_proj.weight)).flip(-1)
        total = mixer(bumped) - mixer(u)
    assert fwd[..., :4].abs().max() == 0 and fwd[..., 4:].abs().min() > 0
    assert bwd[..., 5:].abs().max() == 0 and bwd[..., :5].abs().min() > 0
    assert total.abs().min() > 0  # every channel sees channel 4


def test_fb_mixer_resamples_at_another_grid():
    torch.manual_seed(0)
    mixer = ForwardBackwardChannelMixer(8, 1 + 16, d_state=3, token_grid=(4, 4), num_prefix_tokens=1)
    u = torch.randn(2, 17, 8)
    torch.testing.assert_close(mixer(u, (4, 4)), mixer(u))  # identical at the training grid
    bigger = mixer(torch.randn(2, 1 + 36, 8), (6, 6))
    assert bigger.shape == (2, 37, 8) and torch.isfinite(bigger).all()
    with pytest.raises(ValueError, match="token_grid"):
        ForwardBackwardChannelMixer(8, 17, token_grid=(4, 5), num_prefix_tokens=1)
    with pytest.raises(ValueError, match="u must have"):
        mixer(torch.randn(2, 18, 8))


@pytest.mark.parametrize("name", ["vim2_t_fb", "viqs_t_fb"])
def test_fb_variant_trains(name):
    """A few AdamW steps on one batch lower the loss, every parameter gets a gradient, and the f+b parameters are
    exempt from weight decay through no_weight_decay()."""
    torch.manual_seed(0)
    model = timm.create_model(name, **TINY).train()
    assert type(model.blocks[0].channel_mixer) is ForwardBackwardChannelMixer
    assert {"blocks.0.channel_mixer.fwd.A_log", "blocks.0.channel_mixer.bwd.dt_bias",
            "blocks.3.channel_mixer.bwd.D"} <= model.no_weight_decay()
    images, labels = torch.randn(4, 3, 64, 64), torch.tensor([0, 1, 2, 3])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(4):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            assert [n for n, p in model.named_parameters() if p.grad is None] == []
            # (the conv branch starts silent: lambda_v = 0 at init) the f+b mixers' weights all learn
            assert all(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if ".channel_mixer." in n)
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses


def test_noattn_variants_only_sum_when_several_scans_are_routed():
    """'w/o Attn' builds no cross-scan attention; with the top-1 routing of the registered models it is the same
    network as the full one (same parameters, same output), with top-2 it differs."""
    for name in ("vim2_t", "viqs_t"):
        assert _params(f"{name}_noattn") == _params(name)
    full, noattn = _tiny("viqs_t"), _tiny("viqs_t_noattn")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(noattn.eval()(x), full.eval()(x))
    attn2, sum2 = _tiny("viqs_t", sos_top_n=2), _tiny("viqs_t_noattn", sos_top_n=2)
    assert attn2.sos.attn_q is not None and sum2.sos.attn_q is None
    with torch.no_grad():
        assert not torch.allclose(attn2.eval()(x), sum2.eval()(x))


# ---- Table 12: fixed scan sets -----------------------------------------------------------------------------------

# Every scan of the sets written out on a 3 x 4 grid (row-major ids 0..11):
#    0  1  2  3
#    4  5  6  7
#    8  9 10 11
GRID_3X4 = {
    "C1": list(range(12)),
    "C2": [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11],
    "C3": list(range(11, -1, -1)),
    "C4": [11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0],
    "Z1": [0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11],  # row snake
    "Z4": [11, 10, 9, 8, 4, 5, 6, 7, 3, 2, 1, 0],  # row snake of the 180-degree rotation
    "Z5": [0, 4, 8, 9, 5, 1, 2, 6, 10, 11, 7, 3],  # column snake
    "Z8": [11, 7, 3, 2, 6, 10, 9, 5, 1, 0, 4, 8],  # column snake of the rotation
    "L1": [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11],  # 2 x 2 windows (the bottom row's are partial)
    "L2": [11, 10, 9, 8, 7, 6, 3, 2, 5, 4, 1, 0],
    "L3": list(range(12)),  # one 7 x 7 window covers the whole grid
    "L4": list(range(11, -1, -1)),
}
TABLE12 = {"cross1": ["C1"], "cross2": ["C1", "C2"], "cross4": ["C1", "C2", "C3", "C4"], "zigzag1": ["Z1"],
           "zigzag2": ["Z1", "Z5"], "zigzag4": ["Z1", "Z4", "Z5", "Z8"], "local": ["L1", "L2", "L3", "L4"],
           "local_global": ["L1", "L2", "L3", "L4", "C1", "C2", "C3", "C4"]}


@pytest.mark.parametrize("scan_set", list(TABLE12))
def test_scan_sets_are_the_permutations_they_name(scan_set):
    assert SCAN_SETS[scan_set] == tuple(TABLE12[scan_set])
    ids = resolve_scans(scan_set)
    orders, inverses = scan_orders(3, 4)
    assert orders[list(ids)].tolist() == [GRID_3X4[name] for name in TABLE12[scan_set]]
    sos = SwitchOfScans(8, fixed_scans=scan_set)
    got_orders, got_inverses = sos.scan_index(torch.tensor([ids, ids]), (3, 4))
    assert got_orders[1].tolist() == [GRID_3X4[name] for name in TABLE12[scan_set]]
    x = torch.arange(12)
    assert all(x[o][i].tolist() == x.tolist() for o, i in zip(got_orders[0], got_inverses[0]))


@pytest.mark.parametrize("scan_set", ["cross2", "zigzag4", "local_global"])
def test_model_with_a_fixed_scan_set_scans_every_image_with_it(scan_set):
    model = _tiny("viqs_t", fixed_scans=scan_set)
    assert model.sos.router is None and model.scan_mode == "fixed"
    assert [SCAN_NAMES[i] for i in model.fixed_scans] == TABLE12[scan_set]
    out = model(torch.randn(3, 3, 64, 64))
    assert out.shape == (3, 10)
    assert model.last_scan_ids.tolist() == [list(model.fixed_scans)] * 3
    out.sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_fixed_scans_by_name_id_or_set_are_the_same_model():
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        by_set = _tiny("viqs_t", fixed_scans="zigzag2").eval()(x)
        by_names = _tiny("viqs_t", fixed_scans=("Z1", "Z5")).eval()(x)
        by_ids = _tiny("viqs_t", fixed_scans=(4, 8)).eval()(x)
        other = _tiny("viqs_t", fixed_scans="cross2").eval()(x)
    torch.testing.assert_close(by_names, by_set)
    torch.testing.assert_close(by_ids, by_set)
    assert not torch.allclose(other, by_set)  # same weights (seed), other scans
    # "w/o SoS" (scan_mode='fixed') is Cross-Scan (4)
    assert _tiny("viqs_t_nosos").fixed_scans == resolve_scans("cross4") == (0, 1, 2, 3)


def test_fixed_scans_value_errors():
    for bad, match in (("spiral", "fixed_scans must be one of"), (("C1", "C1"), "each once"), (("X9",), "entries"),
                       ((16,), "entries"), ((), "at least one"), (3, "fixed_scans must be a scan set name")):
        with pytest.raises(ValueError, match=match):
            timm.create_model("viqs_t", **dict(TINY, fixed_scans=bad))


# ---- Table 13: kernel sets of the multi-resolution convs ----------------------------------------------------------


@pytest.mark.parametrize("kernels", [(3,), (3, 5), (3, 5, 7), (3, 5, 7, 9)])
def test_conv_kernel_sets(kernels):
    model = _tiny("vim2_t", conv_kernels=kernels)
    for mrfp in model.mrfp:
        for level in mrfp.dwconvs:  # each of the 3 resolutions has its own depthwise convs, one per kernel
            assert [conv.kernel_size for conv in level] == [(k, k) for k in kernels]
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)


# ---- Table 14: tested above the training resolution ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_model_built_at_train_size_tests_at_a_larger_one_as_a_resampled_model(name):
    """The Table 14 test configs keep the model at its training size and feed it larger images: the position
    embedding and the channel mixers' token-axis weights are then resampled on the fly. That equals building the
    model at the test size and loading the checkpoint through checkpoint_filter_fn (timm's pretrained path)."""
    trained = _tiny(name).eval()
    resized = timm.create_model(name, **dict(TINY, img_size=128)).eval()
    resized.load_state_dict(checkpoint_filter_fn(trained.state_dict(), resized))
    x = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        on_the_fly, loaded = trained(x), resized(x)
    assert trained.pos_embed.shape[1] == 1 + 16 and resized.pos_embed.shape[1] == 1 + 64
    torch.testing.assert_close(on_the_fly, loaded, rtol=1e-4, atol=1e-5)


def test_partial_checkpoint_keeps_the_models_own_values_for_what_it_lacks():
    """A checkpoint of part of the model (here the convolutional stem only, no pos_embed or cls_token): the filter
    passes what it has and fills the dense-only weights, and never indexes a top-level name as a module path
    (it raised IndexError on 'pos_embed' when a detector loaded such a checkpoint)."""
    model = _tiny("vim2_t")
    stem = {k: v + 1.0 for k, v in model.state_dict().items() if k.startswith("spm.") and v.is_floating_point()}
    out = checkpoint_filter_fn(stem, model)
    assert all(torch.equal(out[k], v) for k, v in stem.items())
    assert "pos_embed" not in out and "cls_token" not in out
    missing = model.load_state_dict(out, strict=False).missing_keys
    assert "pos_embed" in missing and not any(k.startswith("spm.") for k in missing)
