"""benchmarks.dense_control: a row for every registered backbone family, its configs as mim reads them, and (slow,
make test-all) one family against the ResNet-18 control on the real problem."""
import pytest
import torch

from benchmarks import dense_control


def test_every_registered_family_has_a_row():
    assert set(dense_control.registered_families()) <= set(dense_control.FAMILIES)


@pytest.mark.parametrize("toolbox", ["mmdet", "mmseg"])
def test_every_row_builds_its_model_from_the_config_and_options(toolbox, tmp_path, monkeypatch):
    # the derived configs (ESSM2D, MyoNet, the control) and the options make a model of the right widths; the
    # coco_digits / ade_digits folders are not needed to read a config
    import argparse

    from mmengine.config import Config, DictAction
    from mmengine.registry import init_default_scope

    import ssm_plugins.mmdet  # noqa: F401
    import ssm_plugins.mmseg  # noqa: F401

    registry = __import__(f"{toolbox}.registry", fromlist=["MODELS"]).MODELS
    for module in ("ssm_plugins.data.coco_digits", "ssm_plugins.data.ade_digits"):
        monkeypatch.setattr(f"{module}.{module.rsplit('.', 1)[1]}", lambda: tmp_path / "data")
    for name in dense_control.FAMILIES:
        config, options = dense_control.spec(name, toolbox, tmp_path / name)
        cfg = Config.fromfile(str(config))
        parsed = argparse.Namespace()
        DictAction(option_strings=["--cfg-options"], dest="cfg_options")(None, parsed, options)
        cfg.merge_from_dict(parsed.cfg_options)
        init_default_scope(toolbox)
        channels = dense_control.out_channels(name)
        backbone = dict(cfg.model.backbone, init_cfg=None)
        if name == dense_control.CONTROL:
            assert backbone["type"] == "ResNet"
            resnet = registry.build(backbone)
            resnet.eval()  # (mmdet's ResNet.train returns None)
            with torch.no_grad():
                outs = resnet(torch.zeros(1, 3, 64, 64))
            assert [o.shape[1] for o in outs] == channels
        else:
            assert backbone["type"] == dense_control.FAMILIES[name][0]
            assert list(registry.build(dict(backbone, device="meta")).out_channels) == channels, name
        if toolbox == "mmdet":
            assert list(cfg.model.neck.in_channels) == channels and cfg.model.neck.out_channels == 64, name
        else:
            assert list(cfg.model.decode_head.in_channels) == channels, name
            assert cfg.model.auxiliary_head.in_channels == channels[2], name


@pytest.mark.slow
@pytest.mark.exhaustive  # minutes: make test-all, not CI's make test
def test_vim2_detects_within_0_1_map50_of_the_resnet18_control(tmp_path):
    # issue 30: before the adapter returned NCHW maps, ViM2 reached bbox mAP50 0.000 where ResNet-18 reached 0.53
    results = {name: dense_control.run(name, "mmdet", tmp_path / name) for name in (dense_control.CONTROL, "ViM2")}
    control, ours = (results[n]["coco/bbox_mAP_50"] for n in (dense_control.CONTROL, "ViM2"))
    assert control >= 0.3, results
    assert ours >= control - 0.1, results


def test_chain_transfer_groups_name_the_grid_dependent_weights(tmp_path):
    # benchmarks.chain_transfer (issue 30's bisection of the main job's checkpoint): each --drop group matches the
    # weights it names in the main job's classifier, and the probe reads a checkpoint of it
    import timm

    from benchmarks import chain_transfer
    from ssm_plugins.openmmlab_tiny import CPU_PLAIN_MIXER

    state = timm.create_model("vim2_t", num_classes=10, img_size=64, **CPU_PLAIN_MIXER).state_dict()
    matched = {g: sorted(k for k in state if match(k)) for g, match in chain_transfer.GROUPS.items()}
    assert matched["pos_embed"] == ["pos_embed"]
    assert matched["sos"] and all(k.startswith("sos.") for k in matched["sos"])
    # the channel mixers' token-axis weights: (rows, 1 + 4 x 4 tokens) in every block, both directions
    assert len(matched["channel_x_proj"]) == 2 * CPU_PLAIN_MIXER["depth"]
    assert {state[k].shape[1] for k in matched["channel_x_proj"]} == {17}
    assert matched["bn_stats"] and all(k.startswith(("spm.", "mrfp.")) for k in matched["bn_stats"])  # conv branch
    torch.save({"state_dict": state}, tmp_path / "epoch_1.pth")
    rows = chain_transfer.probe(tmp_path / "epoch_1.pth", [64, 96], ["channel_x_proj"])
    assert [(r["canvas"], r["place"]) for r in rows] == [(64, "centre"), (96, "centre"), (96, "corner"),
                                                         (96, "random")]
    assert all(0 <= r["top1"] <= 100 for r in rows)


def test_chain_control_is_the_main_jobs_classifier_with_a_resnet18(tmp_path):
    # benchmarks.chain_transfer control (issue 30): the main job's classification config and options with only the
    # model swapped for mmpretrain's ResNet-18 classifier, and the detector's ResNet-18 loading its backbone weights
    import argparse

    from mmengine.config import Config, DictAction
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS

    from benchmarks import chain_transfer

    job = chain_transfer.resnet18_chain_job(tmp_path)
    spec = job.RUNS["mmpretrain"]
    options = spec["options"](tmp_path / "data", 1.0, None)
    vim2 = chain_transfer._main_job().RUNS["mmpretrain"]["options"](tmp_path / "data", 1.0, None)
    dropped = set(vim2) - set(options)
    assert dropped and all(o.startswith("model.") for o in dropped) and set(options) < set(vim2)
    cfg = Config.fromfile(str(spec["config"]))
    parsed = argparse.Namespace()
    DictAction(option_strings=["--cfg-options"], dest="cfg_options")(None, parsed, options)
    cfg.merge_from_dict(parsed.cfg_options)
    init_default_scope("mmpretrain")
    model = MODELS.build(cfg.model)
    assert type(model.backbone).__name__ == "ResNet" and model.backbone.depth == 18
    assert model.head.num_classes == 10 and cfg.optim_wrapper.optimizer.lr == 3e-3
    config, _ = dense_control.spec(dense_control.CONTROL, "mmdet", tmp_path / "det", init_checkpoint="c.pth")
    assert "'checkpoint': 'c.pth', 'prefix': 'backbone.'" in config.read_text()
