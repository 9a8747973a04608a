"""configs_mmpretrain and the MMPretrain adapter: every config builds and references nothing to download; the
no-weight-decay constructor exempts exactly the model's no_weight_decay() parameters; and the papers' chain runs
end to end through the real command lines: ``mim train mmpretrain`` -> its checkpoint -> ``mim train mmdet`` (Mask
R-CNN) and ``mim train mmseg`` (UperNet) loading it through ``init_cfg=dict(type='Pretrained', ...)``."""
import functools
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from _openmmlab import (MMPRETRAIN_CONFIGS, MMPRETRAIN_VIM2, REPO, built_model, config_strings, load,
                        one_per_config_family, succeeded, tools_train)
from ssm_plugins.openmmlab_tiny import (logged_runs, mmdet_tiny_options, mmpretrain_tiny_options,
                                             mmseg_tiny_options)

pytest.importorskip("mmpretrain")
pytest.importorskip("mmdet")
pytest.importorskip("mmseg")


def test_there_are_configs():
    assert len(MMPRETRAIN_CONFIGS) >= 1


@functools.lru_cache(maxsize=4)
def _built(model_cfg: str):
    """A model from its config (repr as the cache key: configs that differ only in data/schedule share a build), on
    the meta device: the parameters' names, shapes and flags without the seconds of initialising up to 157M values."""
    from mmengine.config import ConfigDict
    from mmpretrain.registry import MODELS

    with torch.device("meta"):
        return MODELS.build(ConfigDict(eval(model_cfg)))  # noqa: S307 (our own repr of a config dict)


@pytest.mark.parametrize("path", one_per_config_family(MMPRETRAIN_CONFIGS))
def test_config_is_offline_and_its_pipelines_build(path):
    """Parses with its _base_ chain, imports only our adapter, references no URL, names a registered model (or
    backbone), and every pipeline step builds."""
    import timm
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS, TRANSFORMS

    cfg = load(path)
    urls = [(key, value) for key, value in config_strings(cfg.to_dict()) if "://" in value]
    assert urls == [], f"downloadable references left in {path.name}: {urls}"
    assert cfg.custom_imports == dict(imports=["ssm_plugins.mmpretrain"], allow_failed_imports=False)
    assert dict(type="RandomStateHook") in cfg.custom_hooks  # exact --resume (tests/adapters/test_resume.py)
    assert cfg.default_scope == "mmpretrain"
    init_default_scope(cfg.default_scope)
    assert MODELS.get(cfg.model.type) is not None, cfg.model.type
    if "model_name" in cfg.model:  # TimmClassifier and its multi-label twin
        assert cfg.model.model_name in timm.list_models(), cfg.model.model_name
    for loader in ("train_dataloader", "val_dataloader", "test_dataloader"):
        dataset = cfg[loader].dataset
        while "dataset" in dataset:  # a wrapper (TrainingFraction, Figure 3): the pipeline is its dataset's
            dataset = dataset.dataset
        assert dataset.get("pipeline"), (loader, dataset.type)
        for step in dataset.pipeline:
            TRANSFORMS.build(step)


@pytest.mark.slow  # full-size models (up to 157M parameters): 102 configs in 2-7 min on 2 cores
@pytest.mark.parametrize("path", one_per_config_family(MMPRETRAIN_CONFIGS))
def test_config_builds_model_and_optimizer(path):
    """The model builds at its paper size and the configured optimiser (constructor, paramwise_cfg) covers every
    trainable parameter exactly once."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope

    cfg = load(path)
    init_default_scope(cfg.default_scope)
    model = _built(repr(cfg.model.to_dict()))
    optim = build_optim_wrapper(model, cfg.optim_wrapper)
    grouped = [p for g in optim.optimizer.param_groups for p in g["params"]]
    assert len({id(p) for p in grouped}) == len(grouped)
    assert {id(p) for p in grouped} == {id(p) for p in model.parameters() if p.requires_grad}


def _small_vim2_classifier():
    from mmpretrain.registry import MODELS
    import ssm_plugins.mmpretrain  # noqa: F401

    # 12 blocks: names blocks.1.* and blocks.10.* both exist (a substring match would confuse them)
    return MODELS.build(dict(type="TimmClassifier", model_name="vim2_t", num_classes=10, img_size=32, embed_dim=32,
                             depth=12, n_interactions=2, spm_inplanes=16))


def test_no_decay_constructor_exempts_exactly_no_weight_decay_parameters():
    from mmengine.optim import build_optim_wrapper

    model = _small_vim2_classifier()
    optim = build_optim_wrapper(model, dict(
        constructor="TimmNoDecayOptimWrapperConstructor", optimizer=dict(type="AdamW", lr=1e-3, weight_decay=0.05),
        paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0)))
    decay = {id(p): g["weight_decay"] for g in optim.optimizer.param_groups for p in g["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {f"model.{n}" for n in model.model.no_weight_decay()}
    assert no_decay and "model.pos_embed" in no_decay
    assert any(n.endswith("A_log") for n in no_decay)
    # what paramwise_cfg's norm_decay_mult covers (mmengine's own test of "norm")
    norms = {id(p) for m in model.modules() if isinstance(m, (_BatchNorm, nn.GroupNorm, nn.LayerNorm))
             for p in m.parameters(recurse=False)}
    for pid, name in names.items():
        if name in no_decay or name.endswith(".bias") or pid in norms:
            assert decay[pid] == 0.0, name
        else:
            assert decay[pid] == 0.05, name
    assert decay[id(model.model.blocks[10].token_mixer.in_proj.weight)] == 0.05  # a plain weight keeps its decay


def test_no_decay_constructor_needs_paramwise_cfg():
    from mmengine.optim import build_optim_wrapper

    with pytest.raises(ValueError, match="paramwise_cfg"):
        build_optim_wrapper(_small_vim2_classifier(), dict(
            constructor="TimmNoDecayOptimWrapperConstructor", optimizer=dict(type="AdamW", lr=1e-3)))


def test_adapter_registers_the_backbones():
    from mmpretrain.registry import MODELS
    import ssm_plugins.mmpretrain  # noqa: F401

    for name in ("ViM2", "ViQS", "SwinSSM2D", "ESSM2D", "MyoNet"):
        assert MODELS.get(name) is not None, name


# ---- the chain: classify -> checkpoint -> detect and segment ---------------------------------------------------------

VIM2_CLS = REPO / "configs_mmpretrain" / "vim2" / "vim2-t_8xb128_in1k.py"
VIM2_DET = REPO / "configs_mmdet" / "vim2" / "mask-rcnn_vim2-t_fpn_1x_coco.py"
VIM2_SEG = REPO / "configs_mmseg" / "vim2" / "upernet_vim2-t_4xb4-160k_ade20k-512x512.py"
# a narrow, shallow ViM2-T (same classes and code paths): the chain runs in about a minute on 2 cores
SMALL = dict(embed_dim=64, depth=4, n_interactions=2, spm_inplanes=16)


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory):
    from ssm_plugins.data.imagenet_digits import imagenet_digits

    work_dir = tmp_path_factory.mktemp("mmpretrain_run")
    options = mmpretrain_tiny_options(imagenet_digits(), epochs=1, images=32, val_images=16, image_size=64)
    succeeded(tools_train("mmpretrain", VIM2_CLS, work_dir, options + [f"model.{k}={v}" for k, v in SMALL.items()]))
    (records,) = logged_runs(work_dir)
    (val,) = [r for r in records if "accuracy/top1" in r]
    assert 0.0 <= val["accuracy/top1"] <= 100.0
    checkpoint = work_dir / "epoch_1.pth"
    assert checkpoint.exists()
    return checkpoint


@pytest.mark.slow
def test_image_classification_inferencer_runs_the_checkpoint(classifier_checkpoint):
    # what a user calls after mim train (issue 32): MMPretrain's inferencer on the dumped config and the checkpoint
    from mmpretrain.apis import ImageClassificationInferencer

    from ssm_plugins.data.imagenet_digits import imagenet_digits

    config = classifier_checkpoint.parent / VIM2_CLS.name
    inferencer = ImageClassificationInferencer(model=str(config), pretrained=str(classifier_checkpoint), device="cpu")
    assert any(type(m).__module__.startswith("ssm_plugins.models.") for m in inferencer.model.modules())
    saved = torch.load(classifier_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    state = inferencer.model.state_dict()
    assert set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in state)
    image = sorted(Path(imagenet_digits()).glob("val/**/*.*"))[0]
    (result,) = inferencer(str(image))
    assert len(result["pred_scores"]) == 10 and 0 <= result["pred_label"] < 10
    assert abs(float(sum(result["pred_scores"])) - 1.0) < 1e-4


@pytest.mark.slow
def test_timm_loads_the_checkpoint_through_pretrained_cfg_overlay(classifier_checkpoint):
    """Issue 32: the file `mim train mmpretrain` wrote is a timm checkpoint too (mmpretrain's TimmClassifier saves
    the timm model's keys): timm.create_model(..., pretrained_cfg_overlay=dict(file=...)) loads every weight, once
    ssm_plugins.mmpretrain (or .openmmlab) lets torch.load's weights_only=True read mmengine's checkpoint meta."""
    import timm

    import ssm_plugins.mmpretrain  # noqa: F401

    saved = torch.load(classifier_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    def differing(**overlay):
        model = timm.create_model("vim2_t", pretrained=True, num_classes=10, img_size=64, **SMALL,
                                  pretrained_cfg_overlay=dict(file=str(classifier_checkpoint), **overlay))
        state = model.state_dict()
        assert set(state) == set(saved), sorted(set(state) ^ set(saved))[:10]
        return [k for k in state if not torch.equal(state[k], saved[k])]

    assert differing(num_classes=10) == []  # the checkpoint's own 10 classes: the head too
    # timm's fine-tuning convention: a pretrained_cfg of another class count (vim2_t's: 1000) keeps a new head
    assert differing() == ["head.weight", "head.bias"]


def _backbone_small(prefix):
    return [f"{prefix}.{k}={v}" for k, v in SMALL.items()]


@pytest.mark.slow
@pytest.mark.parametrize("toolbox", ["mmdet", "mmseg"])
def test_classification_checkpoint_initialises_detector_and_segmentor(toolbox, classifier_checkpoint, monkeypatch):
    """The checkpoint `mim train mmpretrain` wrote loads as is through the dense configs' init_cfg: the detector /
    segmentor that ``mim train`` builds from the config and options, initialised as its runner does
    (``model.init_weights()``), logs the file, misses no backbone key and holds the classifier's weights (except the
    token-grid weights, which are resampled to the detection / segmentation size). In this process: a ``mim train``
    of it repeats what tests/adapters/test_mim_train.py runs (the toolbox's command and runner)."""
    from ssm_plugins.data.ade_digits import ade_digits
    from ssm_plugins.data.coco_digits import coco_digits
    from ssm_plugins.openmmlab import backbones

    if toolbox == "mmdet":
        config = VIM2_DET
        options = mmdet_tiny_options(coco_digits(), epochs=1, images=4, val_images=4, lr=0.0,
                                     pretrained=classifier_checkpoint) + ["model.neck.in_channels=[64,64,64,64]"]
    else:
        config = VIM2_SEG
        options = mmseg_tiny_options(ade_digits(), iters=2, val_images=4, lr=0.0, pretrained=classifier_checkpoint) + [
            "model.decode_head.in_channels=[64,64,64,64]", "model.auxiliary_head.in_channels=64"]
    messages = []
    monkeypatch.setattr(backbones, "print_log", lambda message, *args, **kwargs: messages.append(message))
    model = built_model(toolbox, config, options + _backbone_small("model.backbone"))
    model.init_weights()
    log = "\n".join(messages)
    assert f"ViM2: loaded {classifier_checkpoint}" in log
    assert "ViM2: missing keys" not in log and "ViM2: unexpected keys" not in log
    assert "unused by the backbone" in log and "head.weight" in log  # the classifier head is set aside, and said so

    classifier = torch.load(classifier_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    dense = model.state_dict()
    same = resampled = 0
    for key, value in classifier.items():
        ours = dense.get(f"backbone.model.{key}")
        if ours is None or not value.is_floating_point() or "running_" in key:
            continue
        if ours.shape != value.shape:
            resampled += 1
        else:
            assert torch.equal(ours, value), key
            same += 1
    assert same > 50 and resampled >= 1, (same, resampled)


@pytest.mark.parametrize("epochs", [6, 1])
def test_warmup_cosine_options_fit_the_run(epochs):
    """mmpretrain_tiny_options(warmup_cosine=True): as --cfg-options parses them, one warm-up epoch from lr/10 and
    the config's cosine decay to 0 over the other epochs; a one-epoch run keeps the constant lr."""
    import argparse

    from mmengine.config import DictAction

    parser = argparse.ArgumentParser()
    parser.add_argument("--cfg-options", nargs="+", action=DictAction)
    options = mmpretrain_tiny_options("/data", epochs=epochs, lr=3e-3, warmup_cosine=True)
    cfg = load(MMPRETRAIN_VIM2)
    cfg.merge_from_dict(parser.parse_args(["--cfg-options", *options]).cfg_options)
    warmup, cosine = cfg.param_scheduler
    assert cfg.optim_wrapper.optimizer.lr == 3e-3 and cfg.train_cfg.max_epochs == epochs
    if epochs == 1:
        assert warmup.start_factor == 1.0
    else:
        assert (warmup.type, warmup.start_factor, warmup.end) == ("LinearLR", 0.1, 1)
        assert (cosine.type, cosine.begin, cosine.end, cosine.eta_min) == ("CosineAnnealingLR", 1, epochs, 0.0)
