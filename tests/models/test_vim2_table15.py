"""ViM2 / ViQS sizes against Table 15 (issue 4), the "w/o SoS" mode's gradients, and the SViM2 / SViQS sequence
backbones of Table 1 (MambaMixer, arXiv:2403.19888 v2: Sec. 3, App. G, App. H.1, App. I.5; our sizes:
docs/mambamixer.md, 'Variant sizes', 'Plain sequence backbones')."""
import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import ssm_plugins  # noqa: F401  (registers the models)
from _contract import assert_checkpoint_round_trip, assert_grad_checkpointing_is_exact

# model: (paper params M, paper GFLOPs) of Table 15
TABLE15 = {"vim2_t": (13.2, 2.1), "viqs_t": (10.1, 1.9), "vim2_s": (28.0, 5.3), "viqs_s": (23.0, 4.7),
           "vim2_b": (74.0, 17.9), "viqs_b": (45.0, 9.0), "vim2_l": (122.0, 23.2)}
# The Tiny rows cannot meet both targets (ViM2-T: 13.2M at 2.1G is 159 MACs per parameter; see vim2.py): their
# parameters are matched and the FLOPs excess measured at the fit is the bound guarded here.
TINY_FLOP_EXCESS = {"vim2_t": 0.40, "viqs_t": 0.21}
SMALL = dict(img_size=64, embed_dim=32, depth=4, n_interactions=2, spm_inplanes=8, headdim=16, d_state=4,
             num_classes=10, drop_path_rate=0.0)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _gmacs(model, size):
    """Multiply-adds (the paper's "FLOPs", calibrated on timm's DeiT/Swin/ResNet rows), scans included."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, model.in_chans, size, size))
    return counter.get_total_flops() / 2e9


@pytest.mark.parametrize("name", list(TABLE15))
def test_parameters_and_flops_against_table15(name):
    paper_params, paper_gflops = TABLE15[name]
    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(params / paper_params - 1) <= 0.10, f"{name}: {params:.2f}M vs paper {paper_params}M"
    flops = _gmacs(model, 224)
    if name in TINY_FLOP_EXCESS:
        assert paper_gflops <= flops <= paper_gflops * (1 + TINY_FLOP_EXCESS[name]), f"{name}: {flops:.2f} GMACs"
    else:
        assert abs(flops / paper_gflops - 1) <= 0.15, f"{name}: {flops:.2f} GMACs vs paper {paper_gflops}"


def test_flop_convention_reproduces_a_baseline_row():
    # Table 15's Swin-T row: 29M, 4.5 GFLOPs; the counter's multiply-adds reproduce it
    model = timm.create_model("swin_tiny_patch4_window7_224").eval()
    assert _gmacs(model, 224) == pytest.approx(4.5, rel=0.02)


def _grads_after_backward(model, size=64, batch=2):
    model.train()
    model.zero_grad()
    model(torch.randn(batch, 3, size, size)).logsumexp(-1).mean().backward()
    return {n for n, p in model.named_parameters() if p.grad is None}


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
@pytest.mark.parametrize("overrides", [dict(scan_mode="fixed"), dict(scan_mode="fixed", lst_concat=False),
                                       dict(scan_mode="sos"), dict(scan_mode="sos", sos_top_n=2),
                                       dict(scan_mode="sos", sos_top_n=2, cross_scan_attn=False)])
def test_every_parameter_gets_a_gradient(name, overrides):
    # DistributedDataParallel(find_unused_parameters=False) stops on a parameter without a gradient
    torch.manual_seed(0)
    model = timm.create_model(name, **dict(SMALL, **overrides))
    assert _grads_after_backward(model) == set()
    if overrides["scan_mode"] == "fixed":
        assert model.sos.router is None and model.last_router_probs is None
        assert model.last_scan_ids.tolist() == [[0, 1, 2, 3]] * 2  # the four cross-scans C1-C4
    else:
        assert model.sos.router is not None and model.last_router_probs.shape == (2, 16)


def test_fixed_mode_is_the_plain_sum_of_the_cross_scans():
    # "w/o SoS": the token mixer output is the sum over C1-C4, whatever the image
    torch.manual_seed(0)
    model = timm.create_model("viqs_t", **dict(SMALL, scan_mode="fixed")).eval()
    block = model.blocks[0].token_mixer
    u = torch.randn(2, 1 + 4 * 4, 32)
    orders, inverses = model.sos.scan_index(torch.tensor([[0, 1, 2, 3]] * 2), (4, 4))
    with torch.no_grad():
        summed = block(u, (4, 4), model.sos, orders, inverses, torch.ones(2, 4))
        single = sum(block(u, (4, 4), model.sos, orders[:, j:j + 1], inverses[:, j:j + 1], torch.ones(2, 1))
                     for j in range(4))
    torch.testing.assert_close(summed, single)


def test_routed_checkpoint_loads_into_the_fixed_scan_model(tmp_path):
    torch.manual_seed(0)
    routed = timm.create_model("vim2_t", **dict(SMALL, num_classes=1000)).eval()
    path = tmp_path / "routed.pth"
    torch.save(routed.state_dict(), path)
    fixed = timm.create_model("vim2_t", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)),
                              **dict(SMALL, num_classes=1000, scan_mode="fixed"))
    torch.testing.assert_close(fixed.blocks[0].token_mixer.in_proj.weight, routed.blocks[0].token_mixer.in_proj.weight)
    assert "sos.router.weight" not in fixed.state_dict()


# ---- SViM2 / SViQS ------------------------------------------------------------------------------------------------

SEQ = {"svim2_b16": dict(img_size=64, embed_dim=32, depth=3, headdim=16, d_state=4, num_classes=7),
       "sviqs_b16": dict(img_size=64, embed_dim=32, depth=3, headdim=16, d_state=4, num_classes=7),
       "svim2_scifar": dict(img_size=8, embed_dim=32, depth=2, headdim=16, d_state=4),
       "sviqs_scifar": dict(img_size=8, embed_dim=32, depth=2, headdim=16, d_state=4)}


def test_sequence_backbones_are_registered_with_the_paper_layout():
    assert {"svim2_b16", "sviqs_b16", "svim2_scifar", "sviqs_scifar"} <= set(timm.list_models("s*"))
    for name in SEQ:
        cfg = timm.models.get_pretrained_cfg(name)
        assert not cfg.url and cfg.hf_hub_id is None
    b16 = timm.create_model("sviqs_b16", depth=1)  # ViT-base layer shape: D 768, inner 3072, patch 16
    assert b16.embed_dim == 768 and b16.blocks[0].token_mixer.inner == 3072 and b16.patch_size == 16
    assert b16.blocks[0].token_mixer.token_mixer == "qs"
    scifar = timm.create_model("svim2_scifar")
    assert (scifar.embed_dim, len(scifar.blocks), scifar.patch_size, scifar.num_classes) == (512, 6, 1, 10)
    assert scifar.blocks[0].token_mixer.causal and scifar.pos_embed is None


@pytest.mark.parametrize("name", list(SEQ))
def test_sequence_forward_backward_two_sizes(name):
    torch.manual_seed(0)
    model = timm.create_model(name, **SEQ[name]).train()
    size = SEQ[name]["img_size"]
    for shape in ((size, size), (size // 2, size + size // 2)):
        model.zero_grad()
        out = model(torch.randn(2, 3, *shape))
        assert out.shape == (2, model.num_classes) and torch.isfinite(out).all()
        out.square().sum().backward()
        assert all(p.grad is not None for p in model.parameters())
    names = model.no_weight_decay()
    assert "blocks.0.token_mixer.fwd.A_log" in names and "blocks.0.channel_mixer.gamma" in names
    assert names <= dict(model.named_parameters()).keys()


@pytest.mark.parametrize("name", ["svim2_b16", "sviqs_scifar"])
def test_sequence_features_and_intermediates(name):
    kwargs = {k: v for k, v in SEQ[name].items() if k != "num_classes"}
    size, patch = kwargs["img_size"], (16 if name.endswith("b16") else 1)
    model = timm.create_model(name, features_only=True, out_indices=(0, 1), **kwargs)
    assert model.feature_info.reduction() == [patch, patch] and model.feature_info.channels() == [32, 32]
    feats = model(torch.randn(1, 3, size, 2 * size))
    assert [tuple(f.shape) for f in feats] == [(1, 32, size // patch, 2 * size // patch)] * 2
    full = timm.create_model(name, **kwargs)
    final, inter = full.forward_intermediates(torch.randn(1, 3, size, size), indices=1, output_fmt="NLC")
    assert final.shape == inter[0].shape == (1, (size // patch) ** 2, 32)


def test_svim2_scifar_token_mixer_is_causal():
    # with the (token-axis) channel mixer off, a pixel cannot change the features of earlier pixels
    torch.manual_seed(0)
    model = timm.create_model("svim2_scifar", **dict(SEQ["svim2_scifar"], channel_mixer=False)).eval()
    x = torch.randn(1, 3, 8, 8)
    y = x.clone()
    y[..., 5, 3] += 1.0  # pixel 43 of 64
    with torch.no_grad():
        a = model.forward_intermediates(x, indices=1, output_fmt="NLC", intermediates_only=True)[0]
        b = model.forward_intermediates(y, indices=1, output_fmt="NLC", intermediates_only=True)[0]
    torch.testing.assert_close(a[:, :43], b[:, :43])
    assert (a[:, 43:] - b[:, 43:]).abs().max() > 1e-4


@pytest.mark.parametrize("name", ["svim2_b16", "sviqs_scifar"])
def test_sequence_round_trip_and_grad_checkpointing(name, tmp_path):
    size = SEQ[name]["img_size"]
    kwargs = dict(SEQ[name], num_classes=timm.models.get_pretrained_cfg(name).num_classes)
    assert_checkpoint_round_trip(name, kwargs, (1, 3, size, size), tmp_path)
    torch.manual_seed(0)
    model = timm.create_model(name, **dict(SEQ[name], drop_path_rate=0.0))
    assert_grad_checkpointing_is_exact(model, torch.randn(2, 3, size, size))


def test_sequence_checkpoint_from_another_resolution(tmp_path):
    torch.manual_seed(0)
    source = timm.create_model("sviqs_b16", **dict(SEQ["sviqs_b16"], num_classes=1000))
    path = tmp_path / "b16.pth"
    torch.save(source.state_dict(), path)
    bigger = timm.create_model("sviqs_b16", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)),
                               **dict(SEQ["sviqs_b16"], num_classes=1000, img_size=96)).eval()
    assert bigger.pos_embed.shape == (1, 36, 32)
    assert bigger.blocks[0].channel_mixer.fwd.x_proj.weight.shape[1] == 36
    with torch.no_grad():
        assert torch.isfinite(bigger(torch.randn(1, 3, 96, 96))).all()


def test_sequence_value_errors():
    model = timm.create_model("svim2_b16", **SEQ["svim2_b16"])
    with pytest.raises(ValueError, match="multiples of patch_size 16"):
        model(torch.randn(1, 3, 64, 40))
    with pytest.raises(ValueError, match=r"\(batch, 3, H, W\)"):
        model(torch.randn(1, 64, 64))
    with pytest.raises(ValueError, match="img_size"):
        timm.create_model("svim2_b16", **dict(SEQ["svim2_b16"], img_size=72))
    with pytest.raises(ValueError, match="global_pool"):
        timm.create_model("svim2_b16", **dict(SEQ["svim2_b16"], global_pool="token"))


def test_fixed_scan_mode_trains_under_ddp(tmp_path):
    # the DDP (gloo, 2 CPU processes, find_unused_parameters=False) check of test_vim2_training, for "w/o SoS"
    import torch.multiprocessing as mp
    from test_vim2_training import _worker

    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path), "fixed", 1), nprocs=2, join=True)
    torch.testing.assert_close(torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt"))
