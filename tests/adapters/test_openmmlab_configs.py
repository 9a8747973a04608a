"""configs_mmdet / configs_mmseg: the papers' COCO Mask R-CNN and ADE20K UperNet configs build, predict, follow the
papers' protocol (MambaMixer, arXiv:2403.19888 v2, App. G; docs/mambamixer.md, 'COCO and ADE20K protocol') and
reference nothing to download."""
import re

import pytest
import torch

from _openmmlab import (CONFIG_ALIASES, MMDET_CONFIGS, MMSEG_CONFIGS, REPO, build, config_id, config_strings,
                        is_alias, load, toolbox_of)

pytest.importorskip("mmdet")
pytest.importorskip("mmseg")

ALL_CONFIGS = MMDET_CONFIGS + MMSEG_CONFIGS
ONE_X = [p for p in MMDET_CONFIGS if p.name.endswith("_1x_coco.py")]
MS_3X = [p for p in MMDET_CONFIGS if p.name.endswith("_ms-3x_coco.py")]
MODELS = ["vim2-t", "vim2-s", "viqs-t", "viqs-s", "swin-t-p4-w7-ssm2d"]


def test_every_model_has_its_three_configs():
    names = {p.name for p in ALL_CONFIGS}
    for model in MODELS:
        assert {f"mask-rcnn_{model}_fpn_1x_coco.py", f"mask-rcnn_{model}_fpn_ms-3x_coco.py",
                f"upernet_{model}_4xb4-160k_ade20k-512x512.py"} <= names, model


def test_every_config_folder_is_named_after_its_family():
    """One folder name per family across configs_mmpretrain, configs_mmdet and configs_mmseg (ssm2d, vim2, ...)."""
    pretrain = {p.name for p in (REPO / "configs_mmpretrain").iterdir() if p.is_dir() and p.name != "_base_"}
    assert {p.parent.name for p in ALL_CONFIGS} <= pretrain


@pytest.mark.parametrize("path", CONFIG_ALIASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_moved_configs_former_path_loads_the_same_config(path):
    (base,) = re.findall(r"^_base_ = \['(.+)'\]$", path.read_text(), flags=re.M)
    target = (path.parent / base).resolve()
    assert target.parent.name == "ssm2d" and target.name == path.name and not is_alias(target)
    assert load(path).to_dict() == load(target).to_dict()


def test_the_run_options_former_module_path_imports_the_same_functions():
    import ssm_plugins.data.openmmlab_tiny as former
    import ssm_plugins.openmmlab_tiny as tiny

    public = [name for name in vars(tiny) if not name.startswith("_") and callable(getattr(tiny, name))]
    assert {"mmdet_tiny_options", "mmseg_tiny_options", "mmpretrain_tiny_options", "mim"} <= set(public)
    assert all(getattr(former, name) is getattr(tiny, name) for name in public)


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=config_id)
def test_config_is_offline_and_loads_its_adapter(path):
    cfg = load(path)
    urls = [(key, value) for key, value in config_strings(cfg.to_dict()) if "://" in value]
    assert urls == [], f"downloadable references left in {path.name}: {urls}"
    assert cfg.custom_imports == dict(imports=[f"ssm_plugins.{toolbox_of(path)}"], allow_failed_imports=False)
    assert dict(type="RandomStateHook") in cfg.custom_hooks  # exact --resume (tests/adapters/test_resume.py)
    assert cfg.load_from is None
    init = cfg.model.backbone.init_cfg
    assert init["type"] == "Pretrained" and init["checkpoint"].startswith("checkpoints/")


@pytest.mark.parametrize("path", MMDET_CONFIGS, ids=config_id)
def test_mmdet_config_follows_the_paper_protocol(path):
    cfg = load(path)
    assert cfg.optim_wrapper.optimizer == dict(type="AdamW", lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05)
    epochs, steps = (12, [8, 11]) if path in ONE_X else (36, [27, 33])
    warmup, decay = cfg.param_scheduler
    assert cfg.train_cfg.max_epochs == epochs and decay.milestones == steps and decay.end == epochs
    assert warmup.type == "LinearLR" and warmup.end == 1000 and warmup.start_factor == 0.001
    assert cfg.train_dataloader.batch_size == 2 and cfg.auto_scale_lr.base_batch_size == 16  # 8 GPUs x 2
    _check_no_decay_from_the_model(cfg)
    assert cfg.model.backbone.drop_path_rate == (0.3 if "-s_" in path.name else 0.2)


@pytest.mark.parametrize("path", MS_3X, ids=config_id)
def test_ms_3x_config_is_its_1x_model_with_multiscale_training(path):
    one_x = load(path.with_name(path.name.replace("_ms-3x_", "_1x_")))
    cfg = load(path)
    assert cfg.model == one_x.model and cfg.optim_wrapper == one_x.optim_wrapper
    resize = cfg.train_dataloader.dataset.pipeline[3]
    assert resize.type == "RandomChoice"
    short_sides = sorted(min(s) for s in resize.transforms[0][0].scales)
    assert short_sides[0] == 480 and short_sides[-1] == 800 and resize.transforms[1][1].type == "RandomCrop"


@pytest.mark.parametrize("path", MMSEG_CONFIGS, ids=config_id)
def test_mmseg_config_follows_the_paper_protocol(path):
    cfg = load(path)
    assert cfg.optim_wrapper.optimizer == dict(type="AdamW", lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01)
    assert cfg.train_dataloader.batch_size == 4  # x 4 GPUs = 16
    assert cfg.train_cfg.max_iters == 160000
    warmup, poly = cfg.param_scheduler
    assert (warmup.type, warmup.end, poly.type, poly.power, poly.end) == ("LinearLR", 1500, "PolyLR", 1.0, 160000)
    assert cfg.model.backbone.img_size == 512 and cfg.crop_size == (512, 512)
    assert cfg.model.auxiliary_head.type == "FCNHead" and cfg.model.auxiliary_head.loss_decode.loss_weight == 0.4
    assert cfg.model.decode_head.type == "UPerHead" and cfg.model.decode_head.num_classes == 150
    _check_no_decay_from_the_model(cfg)


def _check_no_decay_from_the_model(cfg):
    """Weight decay has one source: the backbone's timm ``no_weight_decay()`` (our constructor), not a second
    hand-kept list of name substrings in the configs (which also matched ``blocks.10`` for ``blocks.1``)."""
    assert cfg.optim_wrapper.constructor == "TimmNoDecayOptimWrapperConstructor"
    assert cfg.optim_wrapper.paramwise_cfg.norm_decay_mult == 0
    ours = {"pos_embed", "A_log", "dt_bias", "token_mixer.D", "lambda_v", "ssm.A_logit", "ssm.D"}
    assert not ours & set(cfg.optim_wrapper.paramwise_cfg.get("custom_keys", {}))


@pytest.mark.parametrize("path", [p for p in ALL_CONFIGS if "_1x_coco" in p.name or "upernet" in p.name],
                         ids=config_id)
def test_optimiser_exempts_exactly_no_weight_decay_and_norms(path):
    """The optimiser the config builds, on its backbone at a small size: weight decay 0 on exactly the norms, the
    Swin base config's custom_keys ('norm', position tables) and what the timm model's no_weight_decay() names."""
    from mmengine.optim import build_optim_wrapper
    from torch.nn.modules.batchnorm import _BatchNorm
    from test_mm_backbones import SMALL

    from ssm_plugins import openmmlab

    cfg = load(path)
    cls = getattr(openmmlab, cfg.model.backbone.type)
    torch.manual_seed(0)
    backbone = cls(**{**SMALL[cls], "arch": cfg.model.backbone.get("arch", "tiny")})
    optim = build_optim_wrapper(backbone, cfg.optim_wrapper)
    decay = {id(p): g["weight_decay"] for g in optim.optimizer.param_groups for p in g["params"]}
    named_nwd = {f"model.{n}" for n in backbone.model.no_weight_decay()}
    assert any(n.endswith(("A_log", "A_logit")) for n in named_nwd), sorted(named_nwd)[:5]
    norms = {id(p) for m in backbone.modules() if isinstance(m, (_BatchNorm, torch.nn.GroupNorm, torch.nn.LayerNorm))
             for p in m.parameters(recurse=False)}
    base_keys = tuple(cfg.optim_wrapper.paramwise_cfg.get("custom_keys", {}))  # the base config's
    full = cfg.optim_wrapper.optimizer.weight_decay
    for name, p in backbone.named_parameters():
        exempt = name in named_nwd or id(p) in norms or any(k in name for k in base_keys)
        assert decay[id(p)] == (0.0 if exempt else full), name


def _predict_detection(model, height, width):
    from mmdet.structures import DetDataSample

    sample = DetDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                         scale_factor=(1.0, 1.0)))
    image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        (result,) = model.test_step(dict(inputs=[image], data_samples=[sample]))
    pred = result.pred_instances
    n = len(pred)
    assert pred.bboxes.shape == (n, 4) and pred.masks.shape == (n, height, width) and pred.scores.shape == (n,)
    assert torch.isfinite(pred.bboxes).all() and torch.isfinite(pred.scores).all()
    assert ((pred.labels >= 0) & (pred.labels < 80)).all()


def _predict_segmentation(model, height, width):
    from mmseg.structures import SegDataSample

    sample = SegDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width)))
    image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        (result,) = model.test_step(dict(inputs=[image], data_samples=[sample]))
    seg = result.pred_sem_seg.data
    assert seg.shape == (1, height, width) and seg.min() >= 0 and seg.max() < 150
    assert result.seg_logits.data.shape == (150, height, width)


def _predict(path, model, size):
    (_predict_detection if toolbox_of(path) == "mmdet" else _predict_segmentation)(model, *size)


def _assert_no_decay_on_the_backbone_s_list(cfg, model):
    """paramwise_cfg exempts every parameter the timm model lists in no_weight_decay() (and the norms)."""
    from mmengine.optim import build_optim_wrapper

    decay = {}
    for group in build_optim_wrapper(model, cfg.optim_wrapper).optimizer.param_groups:
        for param in group["params"]:
            decay[id(param)] = group["weight_decay"]
    params = dict(model.backbone.named_parameters())
    exempt = model.backbone.no_weight_decay()
    assert exempt and all(decay[id(params[name])] == 0 for name in exempt), \
        sorted(name for name in exempt if decay[id(params[name])] != 0)
    assert any(value > 0 for value in decay.values())


# the ms-3x configs hold the same model as their 1x config (checked above), so only 1x and UperNet are built; of the
# Table 13 kernel-size variants (-k3, -k357, -k3579: only the conv branch's kernels differ, checked in
# test_mmpretrain_families.py) the largest
BUILT = [p for p in ONE_X if not re.search(r"-k(3|357)_", p.name)] + MMSEG_CONFIGS


@pytest.mark.parametrize("path", BUILT, ids=config_id)
def test_config_builds_and_predicts_at_an_odd_size(path):
    cfg, model = build(path)
    levels = cfg.model.neck.in_channels if toolbox_of(path) == "mmdet" else cfg.model.decode_head.in_channels
    assert list(model.backbone.out_channels) == list(levels)
    if toolbox_of(path) == "mmseg":
        assert cfg.model.auxiliary_head.in_channels == model.backbone.out_channels[2]
    _assert_no_decay_on_the_backbone_s_list(cfg, model)
    # neither side a multiple of 32: the backbone pads and crops (UperNet's 512-channel head is kept small)
    _predict(path, model, (203, 317) if toolbox_of(path) == "mmdet" else (101, 163))


# one config per backbone family at the papers' input size: 1333x800 (COCO 1x) and 512x512 (ADE20K crop)


def _vim2_t_first(paths):
    """make test: the ViM2-T config (the sizes are the point; test_config_builds_and_predicts_at_an_odd_size builds
    every family); make test-all: the others too."""
    return [pytest.param(p, id=config_id(p), marks=() if "_vim2-t_" in p.name else pytest.mark.exhaustive)
            for p in paths]


@pytest.mark.slow  # about 10-25 s each on 2 cores
@pytest.mark.parametrize("path", _vim2_t_first([p for p in ONE_X if p.name.startswith(
    ("mask-rcnn_vim2-t_", "mask-rcnn_viqs-t_", "mask-rcnn_swin"))]))
def test_detector_predicts_at_coco_size(path):
    _predict(path, build(path)[1], (800, 1333))


@pytest.mark.parametrize("path", _vim2_t_first([p for p in MMSEG_CONFIGS if "-s_" not in p.name]))
def test_segmentor_predicts_at_ade20k_crop_size(path):
    _predict(path, build(path)[1], (512, 512))
