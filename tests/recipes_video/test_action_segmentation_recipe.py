"""The temporal action segmentation recipe (recipes_video/action_segmentation) on a generated release in MS-TCN's
layout: the three hparams files (ASMambaMixer, ASQSMixer, the SS-TCN control) differ only in the block, a short run
of each learns far past the chance rate and writes MS-TCN's metrics and its last checkpoint, and bad options are
refused."""
import json
from pathlib import Path

import pytest

from _scripts import hparams_blocks, load_script

pytest.importorskip("speechbrain")

from ssm_plugins.data.action_segmentation import write_release  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes_video" / "action_segmentation"
HPARAMS = ("asm2_gtea.yaml", "asqs_gtea.yaml", "sstcn_gtea.yaml")
# a CPU-size model and run (same classes and code paths as the hparams defaults)
SHORT = ["--num_layers=3", "--num_f_maps=16", "--num_frames=64", "--number_of_epochs=6", "--lr=0.005",
         "--channel_mask_rate=0.0", "--dropout=0.0"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def recipe():
    return load_script(RECIPE / "train.py", "action_segmentation_train")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ms-tcn-data")
    write_release(str(folder), "gtea", videos=2, frames=(60, 90), feature_dim=2048, noise=2.0)
    return folder


def _run(recipe, hparams, data, out, *overrides):
    return recipe.main([str(RECIPE / "hparams" / hparams), f"--data_folder={data}", f"--output_folder={out}",
                        "--device=cpu", "--noprogressbar", *SHORT, *overrides])


def test_the_hparams_files_differ_only_in_the_block():
    assert hparams_blocks(RECIPE / "hparams", HPARAMS) == {
        "asm2_gtea.yaml": "mambamixer", "asqs_gtea.yaml": "qsmixer", "sstcn_gtea.yaml": "none"}


@pytest.mark.parametrize("hparams", HPARAMS)
def test_short_run_learns_and_writes_the_metrics(recipe, hparams, data, tmp_path):
    result = _run(recipe, hparams, data, tmp_path, "--split=2")
    stats = json.loads((tmp_path / "test_stats.json").read_text())
    assert stats == json.loads(json.dumps(result))
    assert stats["epochs"] == 6 and set(stats["test"]) == {"acc", "edit", "f1@10", "f1@25", "f1@50"}
    # 11 actions (chance 9 %); the generated features separate them, so a short run is far above chance
    assert stats["test"]["acc"] > 40.0, stats
    losses = [float(line.split("loss: ")[1].split(",")[0]) for line in
              (tmp_path / "train_log.txt").read_text().splitlines() if "loss: " in line]
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    assert len(list((tmp_path / "save").glob("CKPT*"))) == 1  # the last epoch's checkpoint, which was tested


def test_bad_options_are_refused(recipe, data, tmp_path):
    with pytest.raises(ValueError, match="batch_size must be 1"):
        _run(recipe, "asm2_gtea.yaml", data, tmp_path / "a", "--batch_size=2")
    with pytest.raises(ValueError, match="mapping.txt has 11 actions but num_classes is 12"):
        _run(recipe, "asm2_gtea.yaml", data, tmp_path / "b", "--num_classes=12")
    with pytest.raises(ValueError, match="split must be 1 .. 4 for gtea"):
        _run(recipe, "asm2_gtea.yaml", data, tmp_path / "c", "--split=5")
