"""configs_mmpretrain/{vim2,viqs,essm,myo} and the Table 13 configs of configs_mmdet/{vim2,viqs}: every derived config
changes exactly the one thing its comment names against the config it inherits; and the eSSM and Myo ImageNet
configs train end to end through the real ``mim train mmpretrain`` command line on the embedded imagenet_digits
(a checkpoint written, accuracy logged). That every config builds its model is tests/adapters' generic config test.
"""
import ast
import functools
import re
from pathlib import Path

import pytest
import torch

from _openmmlab import REPO, config_id, load, succeeded, tools_train
from ssm_plugins.openmmlab_tiny import logged_runs, mmpretrain_tiny_options

pytest.importorskip("mmpretrain")

FAMILIES = ("vim2", "viqs", "essm", "myo")
CONFIGS = sorted(p for family in FAMILIES for p in (REPO / "configs_mmpretrain" / family).glob("*.py"))
ROOTS = {REPO / "configs_mmpretrain" / "vim2" / "vim2-t_8xb128_in1k.py"}  # the Table 7 recipe itself
TABLE13 = sorted(p for family in ("vim2", "viqs") for p in (REPO / "configs_mmdet" / family).glob("*-t-k*_coco.py"))


@pytest.fixture(scope="module", autouse=True)
def _cached_package_config_lookup():
    """mmengine resolves every 'mmpretrain::' base by parsing the installed package's model-index YAML files (about
    1 s per config read on 2 busy cores); their content does not change while the tests run."""
    from mmengine.config import utils

    original, memo = utils._get_cfg_metainfo, {}

    def cached(package_path, cfg_path):
        # a '_base_/...' path is looked up too and raises ValueError (mmengine then takes it as a base path): the
        # outcome is memoised either way
        if (package_path, cfg_path) not in memo:
            try:
                memo[package_path, cfg_path] = (original(package_path, cfg_path), None)
            except ValueError as error:
                memo[package_path, cfg_path] = (None, error)
        result, error = memo[package_path, cfg_path]
        if error is not None:
            raise error
        return result

    utils._get_cfg_metainfo = cached
    yield
    utils._get_cfg_metainfo = original


@functools.lru_cache(maxsize=None)
def _config(path: Path):
    return load(path).to_dict()


def _parent(path: Path) -> Path:
    (node,) = [n for n in ast.parse(path.read_text()).body
               if isinstance(n, ast.Assign) and n.targets[0].id == "_base_"]
    (base,) = ast.literal_eval(node.value)
    return (path.parent / base).resolve()


def _flat(node, prefix=""):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    if isinstance(node, list):
        out = {f"{prefix}len": len(node)}
        for index, value in enumerate(node):
            out.update(_flat(value, f"{prefix}{index}."))
        return out
    return {prefix[:-1]: node}


def _changed(path: Path):
    """{dotted key: (inherited value, new value)} of what ``path`` changes against the config it inherits."""
    child, parent = _flat(_config(path)), _flat(_config(_parent(path)))
    return {k: (parent.get(k), child.get(k)) for k in set(child) | set(parent) if child.get(k) != parent.get(k)}


def _expected_change(path: Path):
    """(the keys a config may change, the keys it must change) by its name."""
    name = path.name
    if "px.py" in name:
        pipelines = ("test_pipeline", "val_dataloader.dataset.pipeline", "test_dataloader.dataset.pipeline")
        return pipelines, ("test_dataloader.dataset.pipeline.1.scale", "test_dataloader.dataset.pipeline.2.crop_size")
    if path.parent.name in ("essm", "myo"):  # another family (its drop path may equal ViM2-T's 0.1)
        return ("model.model_name", "model.drop_path_rate"), ("model.model_name",)
    if re.match(r"(vim2|viqs)-[sbl]_", name):
        return ("model.model_name", "model.drop_path_rate"), ("model.model_name", "model.drop_path_rate")
    if name.startswith("mask-rcnn_"):
        return ("pretrained", "model.backbone.conv_kernels", "model.backbone.init_cfg.checkpoint"), (
            "model.backbone.conv_kernels", "model.backbone.init_cfg.checkpoint")
    if "-k3" in name:
        return ("model.conv_kernels",), ("model.conv_kernels",)
    if re.match(r"vim2-t-(s4|hippo)[-_]", name):  # Table 3's LTI token mixers, each with the row's channel mixer
        return ("model.token_mixer", "model.channel_mixer"), ("model.token_mixer", "model.channel_mixer")
    if name.startswith("viqs-t-") and any(f"-{s.replace('_', '-')}_" in name for s in
                                          ("cross1", "cross2", "zigzag1", "zigzag2", "zigzag4", "local",
                                           "local_global")):
        return ("model.fixed_scans",), ("model.fixed_scans",)
    return ("model.model_name",), ("model.model_name",)


@pytest.mark.parametrize("path", [p for p in CONFIGS + TABLE13 if p not in ROOTS], ids=config_id)
def test_config_changes_one_thing_against_its_base(path):
    changed = _changed(path)
    allowed, required = _expected_change(path)
    assert set(required) <= set(changed), (path.name, sorted(changed))
    assert all(key.startswith(allowed) for key in changed), (path.name, sorted(changed))
    assert path.read_text().startswith("# ")  # the comment saying which paper table/row it is


def test_derived_configs_hold_what_they_name():
    from ssm_plugins.layers.switch_of_scans import SCAN_SETS

    from mmengine.config import ConfigDict

    for path in CONFIGS + TABLE13:
        cfg, name = ConfigDict(_config(path)), path.stem
        model = cfg.model.backbone if path.parts[-3] == "configs_mmdet" else cfg.model
        if "px" in name:  # Table 14: the 256/224 resize ratio at the test size, the model still built at 224
            size = int(name.rsplit("-", 1)[1][:-2])
            resize, crop = cfg.test_dataloader.dataset.pipeline[1:3]
            assert (resize.scale, crop.crop_size) == (int(size * 256 / 224), size), name
            assert "img_size" not in model
            assert cfg.val_dataloader.dataset.pipeline == cfg.test_dataloader.dataset.pipeline
        if "token_mixer" in model:  # vim2-t-<token mixer>[-mlp|-noqs]: Table 3's rows
            token_mixer, _, channel = name.split("_")[0].split("-", 2)[2].partition("-")
            assert model.token_mixer == token_mixer, name
            assert model.channel_mixer == {"": True, "mlp": "mlp", "noqs": False}[channel], name
        if "fixed_scans" in model:
            assert model.fixed_scans in SCAN_SETS and model.fixed_scans.replace("_", "-") in name, name
        if "conv_kernels" in model:
            digits = name.split("-k")[1].split("_")[0]
            assert "".join(str(k) for k in model.conv_kernels) == digits, name
            if path.parts[-3] == "configs_mmdet":
                assert model.init_cfg.checkpoint == f"checkpoints/{path.parent.name}_t_k{digits}_in1k.pth"
        if path.parent.name in ("vim2", "viqs") and path.parts[-3] == "configs_mmpretrain":
            size = name.split("_")[0].split("-")[1]
            assert model.drop_path_rate == {"t": 0.1, "s": 0.3, "b": 0.4, "l": 0.5}[size], name


TABLE3_LTI = [p for p in CONFIGS if re.match(r"vim2-t-(s4|hippo)[-_]", p.name)]


def test_table3_token_mixer_configs_build_through_mmpretrain():
    """Each of Table 3's S4 / HiPPO rows builds through MMPretrain's registry (a TimmClassifier passing the row's
    options to timm.create_model), here at a small width, and classifies."""
    from mmpretrain.registry import MODELS
    from ssm_plugins.layers.lti import LTITokenSSM

    assert len(TABLE3_LTI) == 6
    for path in TABLE3_LTI:
        cfg = dict(_config(path)["model"], img_size=64, embed_dim=32, depth=2, d_state=4, spm_inplanes=8,
                   num_classes=3)
        model = MODELS.build(cfg).eval()
        lti = [m for m in model.modules() if isinstance(m, LTITokenSSM)]
        assert len(lti) == 2 and {m.kind for m in lti} == {cfg["token_mixer"]}, path.name
        with torch.no_grad():
            assert model(torch.randn(1, 3, 64, 64), mode="tensor").shape == (1, 3), path.name


# ---- end to end: the toolbox's train.py as mim train runs it, on imagenet_digits ------------------------------------

RUNS = [REPO / "configs_mmpretrain" / "essm" / "essm-2d-tiny_8xb128_in1k.py",
        REPO / "configs_mmpretrain" / "myo" / "myonet-tiny_8xb128_in1k.py"]


@pytest.mark.slow  # about a minute each on 2 busy cores
@pytest.mark.parametrize("config", RUNS, ids=config_id)
def test_training_writes_a_checkpoint_and_logs_accuracy(config, tmp_path):
    from ssm_plugins.data.imagenet_digits import imagenet_digits

    # 16 training images in batches of 8 at 64 px, one epoch, then top-1/top-5 on 20 val images; eSSM and Myo
    # have no size-dependent weights (no img_size argument)
    options = mmpretrain_tiny_options(imagenet_digits(), epochs=1, images=16, val_images=20,
                                      model_image_size=False)
    succeeded(tools_train("mmpretrain", config, tmp_path, options))
    (records,) = logged_runs(tmp_path)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 2 and all(0 < loss < 10 for loss in losses), records
    (val,) = [r for r in records if "accuracy/top1" in r]
    assert 0.0 <= val["accuracy/top1"] <= 100.0 and 0.0 <= val["accuracy/top5"] <= 100.0
    assert val["accuracy/top5"] >= val["accuracy/top1"]
    checkpoint = torch.load(tmp_path / "epoch_1.pth", map_location="cpu", weights_only=False)
    # the timm model's own keys (TimmClassifier drops its 'model.' prefix), so the backbone configs load it as is
    import timm

    import ssm_plugins  # noqa: F401

    name = load(config).model.model_name
    keys = set(timm.create_model(name, num_classes=10).state_dict())
    assert set(checkpoint["state_dict"]) == keys
