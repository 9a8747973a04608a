"""The temporal action localisation recipe (recipes_video/action_localization) on a generated release in the
layout ActionFormer-family code reads for HACS (ActivityNet-format JSON, SlowFast pickles): the three hparams files
(ActionMambaMixer, ActionQSMixer, the ActionFormer control) differ only in the block, a short run of each trains,
writes ActivityNet's mAP and keeps its last checkpoint, the mixer localises the generated actions, and bad options
are refused."""
import json
from pathlib import Path

import pytest
import torch

from _scripts import hparams_blocks, load_script

pytest.importorskip("speechbrain")

from ssm_plugins.data.action_localization import write_release  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes_video" / "action_localization"
HPARAMS = ("am2_hacs.yaml", "aqs_hacs.yaml", "actionformer_hacs.yaml")
# a CPU-size model and run (same classes and code paths as the hparams defaults): 16-dim SlowFast-layout features
SHORT = ["--num_classes=4", "--features_dim=24", "--seq_len=64", "--embed_dim=16", "--warmup_epochs=1",
         "--batch_size=4", "--drop_path=0.0", "--lr=0.005", "--init_loss_norm=20"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def recipe():
    return load_script(RECIPE / "train.py", "action_localization_train")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hacs")
    write_release(str(folder), "hacs", videos=12, classes=4, slow_dim=16, fast_dim=8, seed=0)
    return folder


def recipe_model(hparams):
    """The model a short run of ``hparams`` builds (the SHORT sizes; hyperpyyaml reads overrides as YAML)."""
    from hyperpyyaml import load_hyperpyyaml

    overrides = "\n".join(["data_folder: unused"] + [o[2:].replace("=", ": ", 1) for o in SHORT])
    return load_hyperpyyaml((RECIPE / "hparams" / hparams).read_text(), overrides)["model"]


def _run(recipe, hparams, data, out, *overrides):
    keys = {o.split("=")[0] for o in overrides}
    short = [o for o in SHORT if o.split("=")[0] not in keys]
    return recipe.main([str(RECIPE / "hparams" / hparams), f"--data_folder={data}", f"--output_folder={out}",
                        "--device=cpu", "--noprogressbar", *short, *overrides])


def test_the_hparams_files_differ_only_in_the_block():
    assert hparams_blocks(RECIPE / "hparams", HPARAMS) == {
        "am2_hacs.yaml": "mambamixer", "aqs_hacs.yaml": "qsmixer", "actionformer_hacs.yaml": "attention"}


@pytest.mark.parametrize("hparams", HPARAMS)
def test_short_run_trains_and_writes_the_metrics(recipe, hparams, data, tmp_path):
    result = _run(recipe, hparams, data, tmp_path, "--number_of_epochs=4")
    stats = json.loads((tmp_path / "test_stats.json").read_text())
    assert stats == json.loads(json.dumps(result))
    assert stats["epochs"] == 4 and stats["test_subset"] == "validation"
    assert {"mAP@0.5", "mAP@0.75", "mAP@0.95", "mAP"} <= set(stats["test"])
    assert all(0.0 <= v <= 100.0 for v in stats["test"].values())
    losses = [float(line.split("train loss: ")[1].split(",")[0]) for line in
              (tmp_path / "train_log.txt").read_text().splitlines() if "train loss: " in line]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    (checkpoint,) = (tmp_path / "save").glob("CKPT*")  # the last epoch's checkpoint, which was tested
    # AdamW's two groups: 0.05 on the matrices, none on vectors nor on the mixers' A_log (2-D, Mamba's rule)
    groups = torch.load(checkpoint / "optimizer.ckpt", weights_only=False)["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]
    model = recipe_model(hparams)
    no_decay = {n for n, p in model.named_parameters() if p.dim() <= 1 or n in model.no_weight_decay()}
    assert [len(g["params"]) for g in groups] == [sum(1 for _ in model.parameters()) - len(no_decay), len(no_decay)]
    assert hparams == "actionformer_hacs.yaml" or any(n.endswith("A_log") for n in no_decay)


def test_the_mixer_localises_the_generated_actions(recipe, data, tmp_path):
    stats = _run(recipe, "am2_hacs.yaml", data, tmp_path, "--number_of_epochs=20")["test"]
    # 3 validation videos, 1-3 actions each of 4 classes: most found at tIoU 0.5 (measured 53 %)
    assert stats["mAP@0.5"] > 25.0, stats


def test_bad_options_are_refused(recipe, data, tmp_path):
    with pytest.raises(ValueError, match="4 action classes in its training videos but num_classes is 5"):
        _run(recipe, "am2_hacs.yaml", data, tmp_path / "a", "--num_classes=5")
    with pytest.raises(ValueError, match="have 24 channels but features_dim is 2304"):
        _run(recipe, "am2_hacs.yaml", data, tmp_path / "b", "--features_dim=2304")
    with pytest.raises(ValueError, match="seq_len must be divisible"):
        _run(recipe, "am2_hacs.yaml", data, tmp_path / "c", "--seq_len=60")
