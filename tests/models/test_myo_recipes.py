"""The Myo hparams files of the sequence recipes (recipes_sequence/sequential_images and LRA, issue #11): each
holds S5's settings for its task (docs/myosotis.md, 'S5 settings'; ``PAPER_RECIPES``) and builds the registered
model; one file of each recipe runs one batch of its (generated, official-format) data through the recipe's train.py
in the default suite, the others are marked slow. The runs use the files' own full-size models."""
import json
import sys
from pathlib import Path

import pytest
import timm
import torch

import _forked

pytest.importorskip("speechbrain")
from hyperpyyaml import load_hyperpyyaml  # noqa: E402

import ssm_plugins  # noqa: E402,F401  (registers the models)
from ssm_plugins.models.myo import PAPER_RECIPES, myo_param_groups  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {"sequential_images": ("myo_smnist", "myo_zmnist", "myo_scifar", "myo_zcifar"),
           "LRA": ("myo_listops", "myo_pathfinder", "myo_pathx")}
FILES = [(folder, name) for folder, names in RECIPES.items() for name in names]
# make test: one hparams file per recipe through train.py; the others (same recipe, other data and sizes; 20-45 s
# each) in make test-all, their settings checked in make test by test_hparams_file_holds_the_s5_settings
DEFAULT_RUNS = {"myo_zmnist", "myo_listops"}

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _hparams_path(folder, name):
    return ROOT / "recipes_sequence" / folder / "hparams" / f"{name}.yaml"


def test_every_sequence_model_has_an_hparams_file():
    assert sorted(name for _, name in FILES) == sorted(PAPER_RECIPES)
    for folder, name in FILES:
        assert _hparams_path(folder, name).is_file(), (folder, name)


@pytest.mark.parametrize("folder,name", FILES, ids=[name for _, name in FILES])
def test_hparams_file_holds_the_s5_settings(folder, name, tmp_path):
    with open(_hparams_path(folder, name)) as f:
        hparams = load_hyperpyyaml(f, {"data_folder": str(tmp_path), "output_folder": str(tmp_path / "out")})
    recipe = PAPER_RECIPES[name]
    for key, hkey in (("lr", "lr"), ("lr_ssm", "lr_ssm"), ("weight_decay", "weight_decay"),
                      ("opt_config", "opt_config"), ("batch_size", "batch_size"), ("epochs", "number_of_epochs")):
        assert hparams[hkey] == recipe[key], (name, key)
    model = hparams["model"]
    registered = timm.create_model(name, device="meta")
    assert type(model) is type(registered) and model.tree == "perfect"
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in registered.named_parameters()}
    groups = hparams["param_groups"](model)
    assert groups == myo_param_groups(model, recipe["lr"], recipe["lr_ssm"], recipe["weight_decay"],
                                      recipe["opt_config"])
    # 1 warm-up epoch, then cosine over the remaining steps down to 0 (S5)
    base_lr = groups[0]["lr"]
    optimizer = torch.optim.AdamW(groups)
    scheduler = hparams["lr_scheduler"](optimizer)
    steps = hparams["steps_per_epoch"]
    for step, expected in ((steps // 2, 0.5), (steps, 1.0), (hparams["number_of_epochs"] * steps, 0.0)):
        scheduler.step_update(step)
        assert abs(optimizer.param_groups[0]["lr"] / base_lr - expected) < 0.01, (step, expected)
    assert hparams["lr_scheduler_interval"] == "step" and hparams["mask_padding"] is True


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from ssm_plugins.data.lra import lra
    from ssm_plugins.data.seq_images import seq_images

    root = tmp_path_factory.mktemp("myo_data")
    return {"sequential_images": seq_images(root / "seq"), "LRA": lra(root / "lra")}


def _data_folder(data, folder, name):
    if folder == "LRA":
        return data[folder]
    return data[folder] / ("mnist" if "mnist" in name else "cifar10")


@pytest.mark.parametrize("folder,name", [(f, n) if n in DEFAULT_RUNS else
                                         pytest.param(f, n, marks=[pytest.mark.slow, pytest.mark.exhaustive])
                                         for f, n in FILES], ids=[name for _, name in FILES])
def test_hparams_file_runs_one_batch_through_train_py(folder, name, data, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "train.py", str(_hparams_path(folder, name)),
               f"--data_folder={_data_folder(data, folder, name)}", f"--output_folder={out}", "--device=cpu",
               "--noprogressbar", "--debug", "--debug_batches=1", "--debug_epochs=1", "--batch_size=2",
               "--num_workers=0"]
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    result = _forked.run(command, cwd=ROOT / "recipes_sequence" / folder, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads((out / "test_stats.json").read_text())
    params = sum(p.numel() for p in timm.create_model(name, device="meta").parameters())
    assert stats["parameters"] == params and stats["epochs"] == 1
    assert 0.0 <= stats["test"]["accuracy"] <= 1.0 and stats["test"]["loss"] >= 0


# ---- the S5 baseline of Tables 2 / 4 (ssm_plugins/models/s5.py): S5 with its Myo twin's settings --------------

S5_FILES = ("s5_zmnist", "s5_zcifar")
_SAME_AS_TWIN = ("lr", "lr_ssm", "weight_decay", "opt_config", "batch_size", "number_of_epochs", "steps_per_epoch",
                 "embed_dim", "depth", "state_size", "blocks", "dropout", "dataset", "mean", "std", "valid_fraction",
                 "split_seed", "augment")


@pytest.mark.parametrize("name", S5_FILES)
def test_s5_hparams_file_holds_its_myo_twins_settings(name, tmp_path):
    from ssm_plugins.models.s5 import PAPER_RECIPES as S5_RECIPES, S5Sequence

    overrides = {"data_folder": str(tmp_path), "output_folder": str(tmp_path / "out")}
    with open(_hparams_path("sequential_images", name)) as f:
        hparams = load_hyperpyyaml(f, overrides)
    with open(_hparams_path("sequential_images", name.replace("s5_", "myo_"))) as f:
        twin = load_hyperpyyaml(f, overrides)
    assert {k: hparams[k] for k in _SAME_AS_TWIN} == {k: twin[k] for k in _SAME_AS_TWIN}
    recipe = S5_RECIPES[name]
    assert (hparams["lr"], hparams["lr_ssm"], hparams["weight_decay"], hparams["opt_config"], hparams["batch_size"],
            hparams["number_of_epochs"]) == (recipe["lr"], recipe["lr_ssm"], recipe["weight_decay"],
                                             recipe["opt_config"], recipe["batch_size"], recipe["epochs"])
    assert hparams["order"] == "morton" and hparams["pad_to"] is None
    model = hparams["model"]
    registered = timm.create_model(name, device="meta")
    assert type(model) is S5Sequence and not model.blocks[0].ssm.bidirectional
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in registered.named_parameters()}
    # the same SSM, GLU and encoder parameters as the Myo twin (which adds only its level embeddings)
    twin_shapes = {n: p.shape for n, p in twin["model"].named_parameters() if n != "level_embed"}
    assert {n: p.shape for n, p in model.named_parameters()} == twin_shapes
    assert hparams["param_groups"](model) == myo_param_groups(model, recipe["lr"], recipe["lr_ssm"],
                                                              recipe["weight_decay"], recipe["opt_config"])


@pytest.mark.parametrize("name", [n if n == "s5_zmnist" else pytest.param(n, marks=[pytest.mark.slow,
                                                                                      pytest.mark.exhaustive])
                                  for n in S5_FILES])
def test_s5_hparams_file_runs_one_batch_through_train_py(name, data, tmp_path):
    test_hparams_file_runs_one_batch_through_train_py("sequential_images", name, data, tmp_path)


@pytest.mark.slow
@pytest.mark.exhaustive  # make test-all: 70 s
def test_s5_zmnist_tiny_run_learns(data, tmp_path):
    """The README's tiny run (recipes_sequence/README.md; 46 % on 2026-12-03, 79 s at two threads): S5 learns the
    generated digits in Morton order well above chance (10 %), the control for the Myo rows' tiny runs."""
    out = tmp_path / "run"
    command = [sys.executable, "train.py", str(_hparams_path("sequential_images", "s5_zmnist")),
               f"--data_folder={data['sequential_images'] / 'mnist'}", f"--output_folder={out}", "--device=cpu",
               "--noprogressbar", "--embed_dim=32", "--depth=2", "--state_size=32", "--num_workers=0",
               "--number_of_epochs=20", "--batch_size=10", "--steps_per_epoch=27", "--lr=0.01", "--lr_ssm=0.004"]
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    result = _forked.run(command, cwd=ROOT / "recipes_sequence" / "sequential_images", env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "test_stats.json").read_text())["test"]["accuracy"] >= 0.3
