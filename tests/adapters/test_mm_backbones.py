"""OpenMMLab backbones (ssm_plugins.openmmlab, registered by ssm_plugins.mmdet and ssm_plugins.mmseg): registry
builds, strides/channels at odd sizes, out_indices, frozen_stages, norm_eval, with_cp, Pretrained from a timm
classifier checkpoint at another resolution, ValueErrors, gradients, and mmengine checkpoints under torch's
default weights_only."""
import math
import pickle

import numpy as np
import pytest
import timm
import torch
from torch.nn.modules.batchnorm import _BatchNorm

import ssm_plugins.mmdet  # noqa: F401  (registers in mmdet's MODELS)
import ssm_plugins.mmseg  # noqa: F401
from ssm_plugins.openmmlab import BACKBONES, ESSM2D, MyoNet, SwinSSM2D, ViM2, ViQS

# small widths/depths of each family (forwarded to timm.create_model), so a test takes seconds
SMALL = {
    ViM2: dict(img_size=64, embed_dim=32, depth=4, n_interactions=4, spm_inplanes=8, headdim=16, d_state=4),
    ViQS: dict(img_size=64, embed_dim=32, depth=4, n_interactions=4, spm_inplanes=8, headdim=16, d_state=4),
    SwinSSM2D: dict(img_size=64, embed_dim=16, depths=(1, 1, 2, 1), num_heads=(1, 1, 2, 2)),
    ESSM2D: dict(embed_dim=(16, 32, 64, 128), depths=(1, 1, 1, 1)),
    MyoNet: dict(dims=(16, 32, 64, 128), depths=(1, 1, 1, 1)),
}
SMALL_CHANNELS = {ViM2: (32,) * 4, ViQS: (32,) * 4, SwinSSM2D: (16, 32, 64, 128), ESSM2D: (16, 32, 64, 128),
                  MyoNet: (16, 32, 64, 128)}
FAMILIES = pytest.mark.parametrize("cls", BACKBONES, ids=lambda c: c.__name__)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _small(cls, seed=0, **kwargs):
    torch.manual_seed(seed)
    return cls(**dict(SMALL[cls], **kwargs))


def _expected_shapes(batch, channels, height, width, strides=(4, 8, 16, 32)):
    return [(batch, c, math.ceil(height / s), math.ceil(width / s)) for c, s in zip(channels, strides)]


@pytest.mark.parametrize("scope", ["mmdet", "mmseg"])
def test_built_from_both_registries_by_config(scope):
    from mmengine.registry import DefaultScope
    registry = (__import__(f"{scope}.registry", fromlist=["MODELS"])).MODELS
    for cls in BACKBONES:
        assert registry.get(cls.__name__) is cls  # the same class in both toolboxes, not a copy
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(dict(type="ViM2", arch="tiny", out_indices=(0, 1, 2, 3), **SMALL[ViM2]))
    assert type(model) is ViM2 and model.model_name == "vim2_t" and model.out_channels == (32,) * 4
    with torch.no_grad():
        outs = model.eval()(torch.randn(1, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == _expected_shapes(1, (32,) * 4, 64, 64)


@FAMILIES
def test_four_maps_at_strides_4_to_32_at_an_odd_size(cls):
    model = _small(cls).train()
    assert model.out_channels == SMALL_CHANNELS[cls] and model.strides == (4, 8, 16, 32)
    outs = model(torch.randn(2, 3, 97, 131))
    assert [tuple(o.shape) for o in outs] == _expected_shapes(2, model.out_channels, 97, 131)
    assert all(torch.isfinite(o).all() for o in outs)


def test_arch_names_map_to_the_timm_models_and_channels():
    expected = {(ViM2, "tiny"): ("vim2_t", 192), (ViM2, "small"): ("vim2_s", 320), (ViM2, "base"): ("vim2_b", 768),
                (ViM2, "large"): ("vim2_l", 768), (ViQS, "tiny"): ("viqs_t", 192), (ViQS, "small"): ("viqs_s", 320),
                (ViQS, "base"): ("viqs_b", 576)}
    for (cls, arch), (name, dim) in expected.items():
        assert cls.arch_zoo[arch] == name
        model = cls(arch=arch, img_size=64, device="meta")  # the real widths, built without memory
        assert model.out_channels == (dim,) * 4
    assert SwinSSM2D.arch_zoo == {"tiny": "swin_tiny_patch4_window7_224_ssm2d"}
    assert ESSM2D.arch_zoo == {"tiny": "essm_2d_tiny"}
    assert MyoNet.arch_zoo == {"tiny": "myonet_tiny", "small": "myonet_small", "base": "myonet_base"}
    assert SwinSSM2D(device="meta").out_channels == (96, 192, 384, 768)
    assert MyoNet(arch="base", device="meta").out_channels == (128, 256, 512, 1024)


@FAMILIES
def test_backward_reaches_every_trainable_parameter(cls):
    # DistributedDataParallel (find_unused_parameters=False) needs a gradient for every parameter
    model = _small(cls).train()
    outs = model(torch.randn(2, 3, 64, 96))
    sum(o.square().mean() for o in outs).backward()
    # (a gradient may be exactly zero at initialisation: ViM2's interactions start with lambda_v = 0)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing
    assert sum(bool(p.grad.any()) for p in model.parameters()) > 0.8 * len(list(model.parameters()))


@FAMILIES
def test_maps_reach_roi_align_as_nchw(cls):
    # mmcv's CPU RoIAlign reads its input's memory as contiguous NCHW whatever the strides, and an FPN's convs pass a
    # channels-last layout on: every family's maps came out channels-last, so Mask R-CNN's box and mask heads were
    # trained on scrambled RoI features (bbox mAP50 0.000 against ResNet-18's 0.53, mask loss stuck at ln 2)
    from mmcv.ops import RoIAlign
    from mmdet.models.necks import FPN

    model = _small(cls).train()
    torch.manual_seed(0)
    fpn = FPN(list(model.out_channels), 8, num_outs=4)
    rois = torch.tensor([[0, 4.0, 6.0, 40.0, 50.0], [1, 10.0, 3.0, 60.0, 33.0]])
    align = RoIAlign(7, spatial_scale=1 / 4, sampling_ratio=0)
    for size in ((64, 64), (70, 100)):  # as given, and padded then cropped back
        outs = model(torch.randn(2, 3, *size))
        assert all(o.is_contiguous() for o in outs)
        p2 = fpn(outs)[0]
        torch.testing.assert_close(align(p2, rois), align(p2.contiguous(), rois))


@pytest.mark.parametrize("cls", [ViM2, SwinSSM2D, MyoNet], ids=lambda c: c.__name__)
def test_out_indices_subset(cls):
    model = _small(cls, out_indices=(1, 3)).train()
    assert model.out_channels == tuple(SMALL_CHANNELS[cls][i] for i in (1, 3)) and model.strides == (8, 32)
    outs = model(torch.randn(1, 3, 70, 100))
    assert [tuple(o.shape) for o in outs] == _expected_shapes(1, model.out_channels, 70, 100, (8, 32))
    sum(o.square().mean() for o in outs).backward()
    # the levels not asked for are not built, so no parameter is left without a gradient
    assert all(p.grad is not None for p in model.parameters())


def _stage_params(model, index):
    items = model._stage_modules(index)
    params = [i for i in items if isinstance(i, torch.nn.Parameter)]
    params += [p for i in items if isinstance(i, torch.nn.Module) for p in i.parameters()]
    return params, [i for i in items if isinstance(i, torch.nn.Module)]


@FAMILIES
def test_frozen_stages_freeze_and_stay_in_eval(cls):
    model = _small(cls, frozen_stages=2)
    model.train()
    frozen_ids = set()
    for index in range(3):
        params, modules = _stage_params(model, index)
        assert params
        assert not any(p.requires_grad for p in params)
        assert not any(m.training for module in modules for m in module.modules())
        frozen_ids.update(id(p) for p in params)
    later, later_modules = _stage_params(model, 3)
    assert later and all(p.requires_grad for p in later) and all(m.training for m in later_modules)
    trainable = [n for n, p in model.named_parameters() if id(p) not in frozen_ids]
    assert trainable and all(p.requires_grad for n, p in model.named_parameters() if id(p) not in frozen_ids)
    # the frozen part gets no gradient, the rest does
    sum(o.mean() for o in model(torch.randn(1, 3, 64, 64))).backward()
    assert all(p.grad is None for n, p in model.named_parameters() if id(p) in frozen_ids)


def test_plain_mixer_stages_are_stem_and_interaction_groups():
    model = _small(ViM2, frozen_stages=0)
    stem = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert {"model.pos_embed", "model.cls_token", "model.patch_embed.proj.weight"} <= stem
    assert any(n.startswith("model.spm.") for n in stem) and any(n.startswith("model.sos.") for n in stem)
    assert not any(n.startswith(("model.blocks.", "model.pyramid_")) for n in stem)
    model = _small(ViM2, frozen_stages=4)  # everything but the pyramid's ConvT and BatchNorms
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        n for n, _ in model.named_parameters() if n.startswith("model.pyramid_")}


def test_no_weight_decay_names_are_parameters_of_the_backbone():
    names = _small(ViM2).no_weight_decay()
    assert {"model.pos_embed", "model.cls_token", "model.blocks.0.channel_mixer.gamma"} <= names
    assert names <= {n for n, _ in _small(ViM2).named_parameters()}
    assert any("relative_position_bias_table" in n for n in _small(SwinSSM2D).no_weight_decay())


def test_norm_eval_keeps_batchnorm_statistics():
    model = _small(ViM2, norm_eval=True).train()
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert norms and not any(m.training for m in norms)
    before = [m.running_mean.clone() for m in norms]
    model(torch.randn(2, 3, 64, 64))
    assert all(torch.equal(m.running_mean, b) for m, b in zip(norms, before))
    plain = _small(ViM2).train()
    assert all(m.training for m in plain.modules() if isinstance(m, _BatchNorm))


@pytest.mark.parametrize("cls", [ViM2, ESSM2D], ids=lambda c: c.__name__)
def test_with_cp_gives_the_same_outputs_and_gradients(cls):
    x = torch.randn(2, 3, 64, 64)
    results = []
    for with_cp in (False, True):
        model = _small(cls, seed=0, with_cp=with_cp, drop_path_rate=0.1).train()
        torch.manual_seed(5)
        outs = model(x)
        sum((o * torch.linspace(0, 1, o.numel()).view_as(o)).sum() for o in outs).backward()
        results.append((outs, {n: p.grad for n, p in model.named_parameters()}))
    (ref_outs, ref_grads), (outs, grads) = results
    for a, b in zip(outs, ref_outs):
        torch.testing.assert_close(a, b)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, msg=name)


@pytest.mark.parametrize("cls,wrap", [(ViM2, None), (ViQS, "state_dict"), (SwinSSM2D, "model"), (MyoNet, None)],
                         ids=["ViM2-raw", "ViQS-state_dict", "SwinSSM2D-model", "MyoNet-raw"])
def test_pretrained_from_a_timm_classifier_at_another_resolution(cls, wrap, tmp_path):
    kwargs = dict(SMALL[cls])
    small_size = kwargs.pop("img_size", None)
    torch.manual_seed(1)
    classifier = timm.create_model(cls.arch_zoo["tiny"], num_classes=7,
                                   **(dict(img_size=small_size) if small_size else {}), **kwargs)
    weights = classifier.state_dict()
    path = tmp_path / "classifier.pth"
    torch.save({wrap: weights} if wrap else weights, path)
    torch.manual_seed(2)
    backbone = cls(**dict(kwargs, img_size=128), init_cfg=dict(type="Pretrained", checkpoint=str(path)))
    fresh = {k: v.clone() for k, v in backbone.model.state_dict().items()}
    backbone.init_weights()
    loaded = backbone.model.state_dict()
    assert not any(k.startswith("head") for k in loaded)
    same_shape = [k for k, v in loaded.items() if k in weights and weights[k].shape == v.shape]
    assert len(same_shape) > 0.8 * len(loaded)
    for key in same_shape:
        assert torch.equal(loaded[key], weights[key]), key
    if cls in (ViM2, ViQS):  # resampled to the 8x8 token grid of 128 px
        assert weights["pos_embed"].shape[1] == 1 + 16 and loaded["pos_embed"].shape[1] == 1 + 64
        assert not torch.equal(loaded["pos_embed"], fresh["pos_embed"])
        key = "blocks.0.channel_mixer.fwd.x_proj.weight"
        assert loaded[key].shape[1] == 1 + 64 and not torch.equal(loaded[key], fresh[key])
    with torch.no_grad():
        outs = backbone.eval()(torch.randn(1, 3, 96, 160))
    assert [tuple(o.shape) for o in outs] == _expected_shapes(1, backbone.out_channels, 96, 160)


def test_pretrained_with_prefix_loads_a_detector_checkpoint(tmp_path):
    source = _small(ViM2, seed=3)
    path = tmp_path / "detector.pth"
    torch.save({"state_dict": {f"backbone.{k}": v for k, v in source.state_dict().items()} | {
        "neck.conv.weight": torch.zeros(1)}}, path)
    target = _small(ViM2, seed=4, init_cfg=dict(type="Pretrained", checkpoint=str(path), prefix="backbone."))
    target.init_weights()
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key


def test_bad_arguments_and_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"arch must be one of \['base', 'small', 'tiny'\]"):
        ViQS(arch="large")
    for bad in ((4,), (2, 1), (), (0, 0), (1.0,)):
        with pytest.raises(ValueError, match="out_indices"):
            _small(ViM2, out_indices=bad)
    with pytest.raises(ValueError, match=r"frozen_stages must be an int in -1..4"):
        _small(ViM2, frozen_stages=5)
    with pytest.raises(ValueError, match=r"frozen_stages must be an int in -1..2"):
        _small(ViM2, frozen_stages=3, depth=2, n_interactions=2)
    with pytest.raises(ValueError, match="pad_size_divisor must be a positive multiple of 32"):
        _small(ViM2, pad_size_divisor=16)
    model = _small(MyoNet)
    for shape in ((3, 64, 64), (1, 1, 64, 64), (1, 3, 0, 64)):
        with pytest.raises(ValueError, match=r"x must have shape \(B, 3, H, W\)"):
            model(torch.zeros(shape))
    with pytest.raises(ValueError, match="checkpoint"):
        _small(ViM2, init_cfg=dict(type="Pretrained")).init_weights()


@pytest.mark.parametrize("cls", [ViM2, ViQS], ids=lambda c: c.__name__)
def test_channel_mixer_at_an_odd_detection_size(cls):
    # the channel mixer's token-axis weights are resampled to the padded 801x1335 -> 832x1344 grid (52x84)
    model = _small(cls, img_size=128).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 801, 1335))
    assert [tuple(o.shape) for o in outs] == _expected_shapes(1, (32,) * 4, 801, 1335)
    assert all(torch.isfinite(o).all() for o in outs)


def test_vim2_tiny_at_800x1333():
    model = ViM2(arch="tiny", img_size=800).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 800, 1333))
    assert [tuple(o.shape) for o in outs] == _expected_shapes(1, (192,) * 4, 800, 1333)
    assert all(torch.isfinite(o).all() for o in outs)


# ---- mmengine checkpoints under torch.load(weights_only=True) -----------------------------------------------------

def _train_toy_runner(work_dir, max_iters, resume=False, load_from=None):
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Toy(BaseModel):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, inputs, target, mode="tensor"):
            out = self.linear(inputs)
            return {"loss": (out - target).square().mean()} if mode == "loss" else out

    data = [dict(inputs=torch.randn(2), target=torch.randn(1)) for _ in range(8)]
    runner = Runner(
        model=Toy(), work_dir=str(work_dir), experiment_name=f"toy{max_iters}{resume}",
        train_dataloader=dict(dataset=data, sampler=dict(type="DefaultSampler", shuffle=True), batch_size=2,
                              collate_fn=dict(type="default_collate")),
        optim_wrapper=dict(optimizer=dict(type="AdamW", lr=1e-2)),
        param_scheduler=dict(type="MultiStepLR", by_epoch=False, milestones=[2]),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type="CheckpointHook", interval=2, by_epoch=False)),
        randomness=dict(seed=0), resume=resume, load_from=load_from)
    runner.train()
    return runner


class _NotAllowlisted:
    pass


class _GetattrOnOtherClass:
    def __reduce__(self):  # pickled as getattr(np.ndarray, 'tofile')
        return getattr, (np.ndarray, "tofile")


def test_mmengine_checkpoints_load_with_default_weights_only(tmp_path):
    from mmengine.runner import load_checkpoint

    runner = _train_toy_runner(tmp_path, max_iters=4)
    path = tmp_path / "iter_4.pth"
    checkpoint = torch.load(path)  # torch's default: weights_only=True
    assert checkpoint["meta"]["iter"] == 4 and "train/loss" in checkpoint["message_hub"]["log_scalars"]
    model = type(runner.model)()
    load_checkpoint(model, str(path))
    assert torch.equal(model.linear.weight, runner.model.linear.weight)
    resumed = _train_toy_runner(tmp_path, max_iters=6, resume=True, load_from=str(path))
    assert resumed.iter == 6  # continued from iteration 4, not restarted
    # the allowlist is narrow: other classes, and getattr on anything but HistoryBuffer, are still refused
    for obj in (_NotAllowlisted(), _GetattrOnOtherClass()):
        torch.save({"state_dict": {}, "extra": obj}, tmp_path / "bad.pth")
        with pytest.raises(pickle.UnpicklingError):
            torch.load(tmp_path / "bad.pth")
