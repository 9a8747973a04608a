"""ViM2 / ViQS timm models (MambaMixer, arXiv:2403.19888 v2, Sec. 3): registration, router behaviour, scan modes
and ablation flags, no_weight_decay names, checkpoints at another resolution, the dense pyramid, constructor
ValueErrors.
The timm contract (forward/backward, features_only, round trip, ...) is tests/models/test_contract.py."""
import functools

import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)

MODELS = timm.list_models(module="vim2")
REQUIRED = {"vim2_t", "viqs_t", "vim2_s", "viqs_s", "vim2_b", "viqs_b", "vim2_l",
            *(f"{base}_{suffix}" for base in ("vim2_t", "viqs_t")
              for suffix in ("noqs", "mlp", "fb", "nolst", "noconv", "nosos", "noattn"))}
TINY = dict(img_size=64, embed_dim=32, depth=4, n_interactions=2, spm_inplanes=8, headdim=16, d_state=4,
            num_classes=10)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@functools.lru_cache(maxsize=None)
def _tiny(name, **overrides):
    torch.manual_seed(0)
    return timm.create_model(name, **dict(TINY, **overrides))


def test_family_is_registered():
    assert REQUIRED <= set(MODELS), MODELS


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_registered_tiny_config_forward(name):
    torch.manual_seed(0)
    model = timm.create_model(name, img_size=64).eval()
    assert model.embed_dim == 192 and len(model.blocks) == {"vim2_t": 36, "viqs_t": 30}[name]  # Table 15 fit
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 1000)


def test_router_picks_scan_and_logs_probs():
    torch.manual_seed(0)
    model = timm.create_model("vim2_t", **TINY).eval()
    with torch.no_grad():
        model.sos.router.weight.zero_()
        model.sos.router.bias.zero_()
        model.sos.router.bias[5] = 10.0
        model(torch.randn(2, 3, 64, 64))
    assert model.last_router_probs.argmax(-1).tolist() == [5, 5]


@pytest.mark.parametrize("overrides", [dict(scan_mode="fixed"), dict(sos_top_n=2), dict(conv_branch=False),
                                       dict(channel_mixer=False), dict(lst_concat=False), dict(global_pool="avg"),
                                       dict(norm="rmsnorm")])
def test_ablation_flags(overrides):
    torch.manual_seed(0)
    model = timm.create_model("viqs_t", **dict(TINY, **overrides))
    out = model(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 10)
    out.sum().backward()


def test_no_weight_decay_names_exist():
    model = _tiny("vim2_t")
    params = dict(model.named_parameters())
    names = model.no_weight_decay()
    assert {"pos_embed", "cls_token", "blocks.0.token_mixer.fwd.A_log", "blocks.0.token_mixer.bwd.dt_bias",
            "blocks.0.token_mixer.D", "blocks.0.channel_mixer.gamma", "spm.level_embed",
            "interactions.1.lambda_v"} <= names
    assert all(n in params for n in names)


def test_constructor_value_errors():
    with pytest.raises(ValueError, match="n_interactions"):
        timm.create_model("viqs_t", **dict(TINY, n_interactions=3))
    with pytest.raises(ValueError, match="channel_mixer"):
        timm.create_model("viqs_t", **dict(TINY, channel_mixer="attention"))
    with pytest.raises(ValueError, match="scan_mode"):
        timm.create_model("viqs_t", **dict(TINY, scan_mode="random"))
    with pytest.raises(ValueError, match="img_size"):
        timm.create_model("viqs_t", **dict(TINY, img_size=48))


@pytest.mark.parametrize("name", ["vim2_t_noqs", "viqs_t_nosos", "vim2_t_mlp"])
def test_ablation_variants(name):
    torch.manual_seed(0)
    model = timm.create_model(name, **TINY)
    assert (model.blocks[0].channel_mixer is None) == name.endswith("noqs")
    assert (model.blocks[0].channel_kind == "mlp") == name.endswith("mlp")
    assert model.scan_mode == ("fixed" if name.endswith("nosos") else "sos")
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)


def test_pretrained_file_at_another_resolution(tmp_path):
    source = _tiny("viqs_t", num_classes=1000).eval()  # timm drops a classifier whose size differs from the cfg's
    path = tmp_path / "checkpoint.pth"
    torch.save(source.state_dict(), path)
    bigger = timm.create_model("viqs_t", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)),
                               **dict(TINY, img_size=128, num_classes=1000)).eval()
    assert bigger.pos_embed.shape == (1, 1 + 64, 32)
    assert bigger.blocks[0].channel_mixer.fwd.x_proj.weight.shape[1] == 1 + 64
    with torch.no_grad():
        assert torch.isfinite(bigger(torch.randn(1, 3, 128, 128))).all()


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_features_only_pyramid_trains(name):
    """Dense pyramid (docs/mambamixer.md, 'Dense outputs') at strides 4/8/16/32; every parameter of the dense
    backbone gets a gradient (DDP)."""
    torch.manual_seed(0)
    model = timm.create_model(name, features_only=True, **{k: v for k, v in TINY.items() if k != "num_classes"})
    assert model.feature_info.reduction() == [4, 8, 16, 32] and model.feature_info.channels() == [32] * 4
    feats = model(torch.randn(2, 3, 64, 96))
    sum(f.square().mean() for f in feats).backward()
    assert all(p.grad is not None for p in model.parameters())
    partial = timm.create_model(name, features_only=True, out_indices=(1, 3),
                                **{k: v for k, v in TINY.items() if k != "num_classes"})
    assert [f.shape[-1] for f in partial(torch.randn(1, 3, 64, 64))] == [8, 2]


@pytest.mark.parametrize("out_indices", [(0, 1, 2, 3), (1, 3), (3,)])
def test_features_only_builds_only_what_its_levels_use(out_indices):
    # every parameter of a features_only model gets a gradient (DistributedDataParallel needs it)
    torch.manual_seed(0)
    model = timm.create_model("vim2_t", features_only=True, out_indices=out_indices,
                              **{k: v for k, v in TINY.items() if k != "num_classes"})
    assert model.model.pyramid_up is not None if 0 in out_indices else model.model.pyramid_up is None
    sum(f.square().mean() for f in model(torch.randn(1, 3, 64, 64))).backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_router_importance_loss():
    torch.manual_seed(0)
    model = timm.create_model("viqs_t", **dict(TINY, sos_importance_weight=0.5))
    model(torch.randn(2, 3, 64, 64))
    assert model.router_aux_loss.requires_grad and model.router_aux_loss >= 0
    model.router_aux_loss.backward()
    assert model.sos.router.weight.grad.abs().sum() > 0
    assert model.last_scan_ids.shape == (2, 1)


def test_layer_decay_follows_depth():
    # timm's layer-wise lr decay groups parameters by group_matcher: stem first, the interaction feeding a
    # group of blocks just before its first block, head last
    from timm.models import group_parameters
    from timm.optim import create_optimizer_v2

    model = _tiny("vim2_t")
    groups = group_parameters(model, model.group_matcher())
    layer_of = {name: layer for layer, names in groups.items() for name in names}
    assert layer_of["patch_embed.proj.weight"] == layer_of["sos.lst_proj.weight"] == 0
    first_of_second_group = len(model.blocks) // model.n_interactions
    assert layer_of["blocks.0.norm1.weight"] < layer_of["interactions.1.lambda_v"]
    assert layer_of["interactions.1.lambda_v"] < layer_of[f"blocks.{first_of_second_group}.norm1.weight"]
    assert layer_of["blocks.3.norm1.weight"] < layer_of["head.weight"] == max(groups)
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, layer_decay=0.5)
    scale = {p: g["lr_scale"] for g in optimizer.param_groups for p in g["params"]}  # applied by the scheduler
    params = dict(model.named_parameters())
    stem, last_block, head = (scale[params[n]] for n in ("patch_embed.proj.weight", "blocks.3.norm1.weight",
                                                          "head.weight"))
    assert stem < last_block < head


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_inference_path_equals_the_autograd_path(name):
    """Without grad the token mixer works in place (fewer (batch, E, L) temporaries): the same logits, bit for bit,
    as with autograd recording, under no_grad and inference_mode."""
    model = _tiny(name).eval()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    want = model(x)
    assert want.requires_grad
    with torch.no_grad():
        assert torch.equal(model(x), want)
    with torch.inference_mode():
        assert torch.equal(model(x), want)


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_chunked_qs_form_equals_the_scan_kernels(monkeypatch, name):
    """qs_mix's chunked form (CUDA's default for these mixers, SSM_PLUGINS_QS) inside the models: the logits and
    gradients of the scan kernels. 101 tokens: the channel mixers' one chunk (Q itself) and viqs' token mixer's two."""
    model = _tiny(name, img_size=160, drop_path_rate=0.0)
    x = torch.randn(2, 3, 160, 160, generator=torch.Generator().manual_seed(3))
    runs = {}
    for algorithm in ("scan", "chunked"):
        monkeypatch.setenv("SSM_PLUGINS_QS", algorithm)
        model.zero_grad()
        logits = model(x)
        logits.square().sum().backward()
        runs[algorithm] = logits.detach(), [p.grad.clone() for p in model.parameters()]
    (want, want_grads), (got, got_grads) = runs["scan"], runs["chunked"]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * w.abs().max().item())


class _HostToDeviceCopies(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the shape of every tensor copied from the CPU to another device."""

    def __init__(self):
        super().__init__()
        self.copies = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket is torch.ops.aten._to_copy:
            src, dst = args[0], kwargs.get("device")
        elif func.overloadpacket is torch.ops.aten.copy_:
            src, dst = args[1], args[0].device
        else:
            src = dst = None
        if isinstance(src, torch.Tensor) and src.device.type == "cpu" and dst is not None \
                and torch.device(dst).type != "cpu":
            self.copies.append(tuple(src.shape))
        return func(*args, **kwargs)


@pytest.mark.filterwarnings("ignore:ssm_plugins. the compiled extension has no meta kernel")
@pytest.mark.parametrize("name", ["vim2_t", "viqs_t", "vim2_t_nosos"])
def test_training_step_copies_nothing_from_the_host_after_the_first(name):
    """Switch of Scans' window ids, scan orders and fixed scan ids are built on the host: copied to the model's
    device once, not in every forward (on a GPU each copy from pageable memory waits for the stream; vim2_t's step
    made three). The meta device stands in for the GPU: the copies are the same aten calls."""
    model = timm.create_model(name, **TINY).to("meta")
    x = torch.randn(2, 3, 64, 64, device="meta")
    model(x).sum().backward()  # the first step fills the caches
    with _HostToDeviceCopies() as seen:
        model(x).sum().backward()
    assert seen.copies == []


@pytest.mark.parametrize("token_mixer, extra", [
    ("s6_bi", {"D": (64,), "fwd.A_log": (64, 8), "fwd.dt_proj.weight": (64, 2), "bwd.A_log": (64, 8),
               "bwd.dt_proj.weight": (64, 2), "fwd.x_proj.weight": (18, 32), "bwd.x_proj.weight": (18, 32)}),
    ("qs", {"gamma_bias": (4,), "gamma_proj.weight": (4, 64), "fwd.A_log": (4,), "bwd.A_log": (4,),
            "fwd.x_proj.weight": (20, 32), "bwd.x_proj.weight": (20, 32)}),
])
def test_token_mixer_keeps_its_checkpoint_keys(token_mixer, extra):
    """The 2-D token mixer builds only the grid conv and the linear gate, under the keys (and shapes) every
    checkpoint written so far holds, so those checkpoints load strictly; the 1-D mixer's convolutions are absent."""
    from ssm_plugins.models.vim2 import VisionTokenMixer

    mixer = VisionTokenMixer(32, d_state=8, token_mixer=token_mixer, headdim=16)
    expected = {"in_proj.weight": (64, 32), "gate_proj.weight": (64, 32), "out_proj.weight": (32, 64),
                "conv2d.weight": (64, 1, 3, 3), "conv2d.bias": (64,), "fwd.dt_bias": extra["fwd.A_log"][:1],
                "bwd.dt_bias": extra["bwd.A_log"][:1], **extra}
    assert {k: tuple(v.shape) for k, v in mixer.state_dict().items()} == expected
    assert not hasattr(mixer, "conv") and not hasattr(mixer, "gate_convs")
    mixer.load_state_dict({k: torch.zeros(s) for k, s in expected.items()}, strict=True)
