"""The sequence-classification recipes (issue 11): LRA/ and sequential_images/ train.py with their hparams files.

On tiny files the project generates in the official formats (``ssm_plugins.data.lra`` / ``seq_images``):
one short end-to-end run per recipe family that must learn above chance (ListOps, sMNIST), and every eSSM / Mega
hparams file builds its model and runs one training, valid and test batch (SpeechBrain's ``--debug`` mode). The
readers, tokenisers and pixel orders are checked against the formats' definitions.
"""
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from _scripts import load_script

from ssm_plugins.data import lra
from ssm_plugins.data.seq_images import (load_cifar10, load_mnist, pixel_order, read_idx, seq_images,
                                         write_idx, SequentialImages)

ROOT = Path(__file__).resolve().parents[2] / "recipes_sequence"
TINY = ["--d_model=16", "--depth=1", "--d_state=16", "--n_heads=4", "--num_workers=0"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _train_module(recipe):
    return _script(recipe, "train.py")


def _script(recipe, name):
    return load_script(ROOT / recipe / name, f"{name[:-3]}_{recipe}")


def _run(recipe, hparams, data, out, *overrides, result_keys=()):
    """train.py's command line in this process; returns test_stats.json."""
    module = _train_module(recipe)
    module.main(module.dataio_prep, result_keys=result_keys,
                argv=[str(ROOT / recipe / "hparams" / hparams), f"--data_folder={data}",
                      f"--output_folder={out}", *overrides])
    return json.loads((Path(out) / "test_stats.json").read_text())


@pytest.fixture(scope="module")
def lra_root(tmp_path_factory):
    return lra.lra(tmp_path_factory.mktemp("data") / "lra")


@pytest.fixture(scope="module")
def images_root(tmp_path_factory):
    return seq_images(tmp_path_factory.mktemp("data") / "seq_images")


# ---- formats ----------------------------------------------------------------------------------------------------


def test_listops_tokens_and_labels_follow_the_lra_format(lra_root):
    source = "( ( ( [MAX 2 ) ( ( ( [MIN 7 ) 3 ) ] ) ) ] )"
    ids = lra.tokenize_listops(source)
    assert [lra.LISTOPS_VOCAB[i] for i in ids] == ["[MAX", "2", "[MIN", "7", "3", "]", "]"]
    assert len(lra.LISTOPS_VOCAB) == 17 and lra.LISTOPS_VOCAB[0] == "<pad>"
    header, first = (lra_root / "lra_release/listops-1000/basic_train.tsv").read_text().splitlines()[:2]
    assert header == "Source\tTarget"
    # the generated labels are the values of the expressions: evaluate the first one independently
    tokens = first.split("\t")[0].replace("(", " ").replace(")", " ").split()
    ops = {"[MIN": min, "[MAX": max, "[MED": lambda v: int(np.median(v)), "[SM": lambda v: sum(v) % 10}

    def evaluate(pos):
        op, values, pos = tokens[pos], [], pos + 1
        while tokens[pos] != "]":
            if tokens[pos] in ops:
                value, pos = evaluate(pos)
            else:
                value, pos = int(tokens[pos]), pos + 1
            values.append(value)
        return ops[op](values), pos + 1

    assert evaluate(0)[0] == int(first.split("\t")[1])
    examples = lra.read_listops(lra_root, "valid")
    assert len(examples) == 100 and all(0 <= label < 10 for _, label in examples)
    assert len(lra.read_listops(lra_root, "train", max_length=5)[0][0]) <= 5


def test_byte_level_text_and_aan_pairs(lra_root):
    ids = lra.encode_bytes("Ab\u00e9", max_length=10)
    assert ids.tolist() == [ord("A") + 1, ord("b") + 1, 0xC3 + 1, 0xA9 + 1]  # UTF-8 bytes + 1, 0 = padding
    assert int(ids.max()) < lra.BYTE_VOCAB_SIZE
    train = lra.read_imdb(lra_root, "train")
    assert len(train) == 160 and {label for _, label in train} == {0, 1}
    pairs = lra.read_aan(lra_root, "test")
    assert len(pairs) == 40 and {p[2] for p in pairs} == {0, 1}
    fields = (lra_root / "lra_release/tsv_data/new_aan_pairs.test.tsv").read_text().splitlines()[0].split("\t")
    assert len(fields) == 5 and fields[0] in ("0.0", "1.0")


def test_pathfinder_metadata_and_images(lra_root):
    paths, labels = lra.read_pathfinder(lra_root, "pathfinder")
    assert len(paths) == 200 and set(labels.tolist()) == {0, 1} and all(p.is_file() for p in paths)
    item = lra.PathfinderImages(paths[:1], labels[:1])[0]
    assert item["x"].shape == (1024, 1) and -1.0 <= float(item["x"].min()) and float(item["x"].max()) <= 1.0
    assert lra.PathfinderImages(*lra.read_pathfinder(lra_root, "pathx"))[0]["x"].shape == (16384, 1)
    splits = lra.split_indices(200, (0.8, 0.1, 0.1), seed=42)
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(200))
    with pytest.raises(FileNotFoundError, match="data_folder"):
        lra.read_pathfinder(lra_root / "aclImdb", "pathfinder")


def test_idx_round_trip_gz_and_bad_magic(tmp_path, images_root):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        write_idx(tmp_path / name, array)
        np.testing.assert_array_equal(read_idx(tmp_path / name), array)
    raw = gzip.decompress((images_root / "mnist/train-labels-idx1-ubyte.gz").read_bytes())
    assert raw[:4] == b"\x00\x00\x08\x01"  # the official labels file header
    (tmp_path / "bad").write_bytes(b"\x00\x00\x09\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="not a uint8 IDX"):
        read_idx(tmp_path / "bad")
    images, labels = load_mnist(images_root / "mnist", "train")
    assert images.shape == (300, 28, 28, 1) and images.dtype == np.uint8 and labels.shape == (300,)
    with pytest.raises(FileNotFoundError, match="data_folder"):
        load_mnist(tmp_path, "test")


def test_cifar10_pickles_and_grayscale(images_root):
    images, labels = load_cifar10(images_root / "cifar10", "train")
    assert images.shape == (300, 32, 32, 3) and set(labels.tolist()) == set(range(10))
    gray, _ = load_cifar10(images_root / "cifar10", "train", grayscale=True)
    expected = np.round(images[0].astype(np.float64) @ [0.2989, 0.5870, 0.1140])
    np.testing.assert_allclose(gray[0, ..., 0], expected, atol=1)


def test_pixel_orders():
    grid = torch.arange(16).reshape(4, 4)
    assert pixel_order(4, 4, "row").tolist() == list(range(16))
    assert grid.flatten()[pixel_order(4, 4, "snake")].tolist()[:8] == [0, 1, 2, 3, 7, 6, 5, 4]
    morton = grid.flatten()[pixel_order(4, 4, "morton")].tolist()
    assert morton[:8] == [0, 1, 4, 5, 2, 3, 6, 7]  # 2x2 blocks first: each run of 4 leaves is a quadtree node
    assert sorted(pixel_order(28, 28, "morton").tolist()) == list(range(784))
    perm = pixel_order(28, 28, "permuted", seed=3)
    assert torch.equal(perm, pixel_order(28, 28, "permuted", seed=3)) and sorted(perm.tolist()) == list(range(784))
    with pytest.raises(ValueError, match="needs a seed"):
        pixel_order(4, 4, "permuted")
    with pytest.raises(ValueError, match="order must be one of"):
        pixel_order(4, 4, "spiral")
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28, 1) % 251
    padded = SequentialImages(images, np.array([0, 1]), order="morton", pad_to=32)[1]["x"]
    assert padded.shape == (1024, 1) and float(padded[0]) == 0.0  # the zero border comes first in Z order


# ---- end-to-end runs ------------------------------------------------------------------------------------------


def test_listops_recipe_learns_above_chance(lra_root, tmp_path):
    """ListOps (10 classes, the most frequent 13 %) in 8 epochs of a small eSSM on 400 generated expressions."""
    stats = _run("LRA", "essm_listops.yaml", lra_root, tmp_path / "run",
                 "--d_model=32", "--depth=2", "--d_state=32", "--n_heads=4", "--num_workers=0",
                 "--number_of_epochs=8", "--batch_size=20", "--lr=0.005", "--lr_ssm=0.002", result_keys=("task",))
    _, labels = zip(*lra.read_listops(lra_root, "test"))
    majority = np.bincount(labels).max() / len(labels)
    assert stats["task"] == "listops" and 1 <= stats["epochs"] <= 8  # the epoch of the best valid checkpoint
    assert stats["test"]["accuracy"] > majority + 0.1, (stats, majority)
    assert (tmp_path / "run" / "train_log.txt").read_text().count("valid accuracy") == 8
    # eSSM Figs. 8-9 from the run's best checkpoint: both trained layers, their λ moved from HiPPO, Re λ <= -ε
    plot = _script("LRA", "plot_essm_parameters.py")
    layers = plot.main([str(tmp_path / "run" / "save"), "--out", str(tmp_path / "figures")])
    assert [layer["name"] for layer in layers] == ["blocks.0.ssm", "blocks.1.ssm"]
    from ssm_plugins.layers.essm import hippo_diagonal_init

    init = hippo_diagonal_init(32 // 4, True, "paper")[0].to(torch.complex128).repeat(4)
    for layer in layers:
        assert layer["lambda"].shape == (32,) and layer["re_max"] <= -1e-4
        assert not torch.allclose(layer["lambda"], init, atol=1e-6)  # trained: not the initial eigenvalues
    for name in ("essm_eigenvalues.png", "essm_log_dt.png"):
        assert (tmp_path / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FileNotFoundError, match="no SpeechBrain checkpoint"):
        plot.main([str(tmp_path / "figures")])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plot.main([str(tmp_path / "missing")])


def test_smnist_recipe_learns_above_chance(images_root, tmp_path):
    """sMNIST (784-step pixel sequences, 10 balanced classes) in a short run of a small eSSM; psMNIST order."""
    stats = _run("sequential_images", "essm_smnist.yaml", images_root / "mnist", tmp_path / "run",
                 "--d_model=32", "--depth=2", "--d_state=32", "--n_heads=8", "--num_workers=0",
                 "--number_of_epochs=10", "--batch_size=10", "--lr=0.005", "--lr_ssm=0.002", result_keys=("order",))
    # chance is 0.1. Six epochs at lr 0.01 were on the edge (0.17-0.43 over seeds 1234 / 1 / 2; the fixed-phase HiPPO
    # init moved seed 1234 from 0.24 to 0.19). Ten at half that lr: 0.51 / 0.41 / 0.48 / 0.41 at seeds 1234 / 1 / 2 / 3
    # under make test's xdist (one thread per worker; Xeon, 2026-12-02), deterministic for a given thread count
    assert stats["order"] == "row" and stats["test"]["accuracy"] > 0.25, stats


HPARAMS = sorted([("LRA", p.name) for p in (ROOT / "LRA" / "hparams").glob("essm_*.yaml")]
                 + [pytest.param("LRA", "mega_iso_image.yaml", marks=pytest.mark.slow)]  # full size: 10 s
                 + [("sequential_images", p.name)
                    for p in (ROOT / "sequential_images" / "hparams").glob("essm_*.yaml")],
                 key=lambda p: p.values if hasattr(p, "values") else p)
DATA = {"essm_image.yaml": "cifar10", "mega_iso_image.yaml": "cifar10", "essm_text.yaml": ".",
        "essm_smnist.yaml": "mnist", "essm_psmnist.yaml": "mnist", "essm_scifar.yaml": "cifar10"}


@pytest.mark.parametrize("recipe,hparams", HPARAMS)
def test_every_hparams_file_runs_one_batch(recipe, hparams, lra_root, images_root, tmp_path):
    root = images_root if recipe == "sequential_images" else lra_root
    data = root / DATA.get(hparams, "lra_release")
    overrides = ["--num_workers=0"] if hparams.startswith("mega") else list(TINY)
    stats = _run(recipe, hparams, data, tmp_path / "run", *overrides, "--batch_size=2",
                 "--debug", "--debug_batches=1", "--debug_epochs=1")
    assert 0.0 <= stats["test"]["accuracy"] <= 1.0 and np.isfinite(stats["test"]["loss"])
    if hparams == "essm_psmnist.yaml":  # the permutation is saved with the run
        perm = torch.load(tmp_path / "run" / "save" / "permutation.pt")
        assert torch.equal(perm, pixel_order(28, 28, "permuted", seed=0))


def test_two_learning_rates_reach_the_optimizer(lra_root, tmp_path):
    """The recipe's optimizer has the paper's groups: SSM core at LR_SSM without decay, C at LR_other."""
    module = _train_module("LRA")
    sys.path.insert(0, str(ROOT))
    from sequence_brain import SequenceClassifierBrain
    from hyperpyyaml import load_hyperpyyaml

    with open(ROOT / "LRA/hparams/essm_text.yaml") as f:
        hparams = load_hyperpyyaml(f, {"data_folder": str(lra_root), "output_folder": str(tmp_path),
                                       "d_model": 16, "depth": 1, "d_state": 16, "n_heads": 16})
    brain = SequenceClassifierBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                                    checkpointer=hparams["checkpointer"])
    brain.init_optimizers()
    groups = {g["name"]: g for g in brain.optimizer.param_groups}
    assert groups["ssm"]["lr"] == 0.001 and groups["ssm"]["weight_decay"] == 0.0
    assert groups["ssm_other_lr"]["lr"] == 0.004 and groups["ssm_other_lr"]["weight_decay"] == 0.0
    assert groups["decay"]["lr"] == 0.004 and groups["decay"]["weight_decay"] == 0.07
    assert module.TASKS == ("listops", "text", "retrieval", "image", "pathfinder", "pathx")


def test_cosine_schedule_is_the_official_warmup_cosine_clamped_at_zero(tmp_path):
    """essm_retrieval.yaml's scheduler on the two LR groups: linear warmup from 0 over 1,000 steps, then HF's
    ``get_cosine_schedule_with_warmup`` cosine to step 50,000, then 0 (docs/essm.md,
    'Optimiser and schedules': the HF curve would rise again)."""
    from hyperpyyaml import load_hyperpyyaml

    with open(ROOT / "LRA/hparams/essm_retrieval.yaml") as f:
        hparams = load_hyperpyyaml(f, {"data_folder": str(tmp_path), "output_folder": str(tmp_path),
                                       "d_model": 16, "depth": 1, "d_state": 16, "n_heads": 4})
    model = hparams["model"]
    optimizer = hparams["opt_class"](hparams["param_groups"](model))
    base = [group["lr"] for group in optimizer.param_groups]
    assert sorted(set(base)) == [0.001, 0.002]
    scheduler = hparams["lr_scheduler"](optimizer)

    def factor(step):
        scheduler.step_update(step)
        return [group["lr"] / b for group, b in zip(optimizer.param_groups, base)]

    for step, expected in ((0, 0.0), (500, 0.5), (1000, 1.0), (25500, 0.5), (50000, 0.0), (70000, 0.0)):
        np.testing.assert_allclose(factor(step), expected, atol=1e-9, err_msg=str(step))
    hf = 0.5 * (1 + np.cos(np.pi * (12345 - 1000) / (50000 - 1000)))
    np.testing.assert_allclose(factor(12345), hf, rtol=1e-9)


@pytest.mark.parametrize("model_name, no_pos_embed, ssm_complex", [
    ("mega_iso_lra_cifar10_ssm2d", True, True), ("mega_iso_lra_cifar10_ssm2d", False, False),
    ("mega_iso_lra_cifar10", True, False)])
def test_mega_iso_hparams_reach_table_3s_position_embedding_and_complex_rows(model_name, no_pos_embed, ssm_complex,
                                                                              tmp_path):
    """2-D SSM paper Table 3, CIFAR10 (Mega-ISO) columns: ``--no_pos_embed`` and ``--ssm_complex`` reach the model."""
    from hyperpyyaml import load_hyperpyyaml

    from ssm_plugins.layers import SSM2D

    with open(ROOT / "LRA" / "hparams" / "mega_iso_image.yaml") as f:
        values = load_hyperpyyaml(f, {"data_folder": str(tmp_path), "output_folder": str(tmp_path),
                                      "model_name": model_name, "no_pos_embed": no_pos_embed,
                                      "ssm_complex": ssm_complex})
    model = values["model"]
    assert (model.pos_embed is None) == no_pos_embed
    ssm = [m for m in model.modules() if isinstance(m, SSM2D)]
    assert len(ssm) == (8 if model_name.endswith("_ssm2d") else 0)  # one per Mega layer
    assert all(m.complex == ssm_complex for m in ssm)


@pytest.mark.parametrize("recipe,hparams", [p for p in HPARAMS if not hasattr(p, "values")])
def test_hparams_match_the_paper_recipes_of_their_model(recipe, hparams, tmp_path):
    """Batch, epochs, the two learning rates, the SSM parameters at LR_other and the weight decay of every eSSM
    hparams file are the Table 10 / App. E.2 values kept with the model (``PAPER_RECIPES``)."""
    from hyperpyyaml import load_hyperpyyaml
    from ssm_plugins.models.essm import PAPER_RECIPES

    with open(ROOT / recipe / "hparams" / hparams) as f:
        values = load_hyperpyyaml(f, {"data_folder": str(tmp_path), "output_folder": str(tmp_path), "d_model": 16,
                                      "depth": 1, "d_state": 16, "n_heads": 4})
    paper = PAPER_RECIPES[values["model_name"]]
    assert (values["batch_size"], values["number_of_epochs"]) == (paper["batch_size"], paper["epochs"])
    assert (values["lr"], values["lr_ssm"], values["weight_decay"]) == (paper["lr"], paper["lr_ssm"],
                                                                         paper["weight_decay"])
    assert tuple(values["lr_other_params"]) == tuple(paper["lr_other_params"])
    assert values.get("limit_train_batches", 1.0) == paper.get("limit_train_batches", 1.0)
    assert values["max_grad_norm"] == float("inf")  # no clipping (docs/essm.md, 'Optimiser and schedules')


# MambaMixer Table 1's sCIFAR column: the timm image models (patch 1 over the 1024 pixels) through as_image;
# D 32: the QS token mixer's heads are 64 wide (inner width 2D)
@pytest.mark.parametrize("hparams", ["svim2_scifar.yaml",
                                     pytest.param("sviqs_scifar.yaml", marks=pytest.mark.exhaustive)])
def test_mambamixer_scifar_hparams_train_on_images(hparams, images_root, tmp_path):
    stats = _run("sequential_images", hparams, images_root / "cifar10", tmp_path / "run", "--embed_dim=32",
                 "--depth=1", "--num_workers=0", "--batch_size=2", "--debug", "--debug_batches=2",
                 "--debug_epochs=1", result_keys=("dataset", "order"))
    assert stats["dataset"] == "cifar10" and stats["order"] == "row"
    assert 0.0 <= stats["test"]["accuracy"] <= 1.0 and np.isfinite(stats["test"]["loss"])


def test_mambamixer_scifar_recipe_settings_are_table_7s(images_root, tmp_path):
    # Table 7: AdamW lr 0.0045, weight decay 0.01 (none on biases, norms and the SSM parameters), 10 warm-up epochs
    # then cosine, batch 50, 250 epochs; pixels to [-1, 1]; the items are images for the timm model
    from hyperpyyaml import load_hyperpyyaml

    sys.path.insert(0, str(ROOT))
    with open(ROOT / "sequential_images/hparams/svim2_scifar.yaml") as f:
        hparams = load_hyperpyyaml(f, {"data_folder": str(images_root / "cifar10"), "output_folder": str(tmp_path),
                                       "embed_dim": 16, "depth": 1})
    assert (hparams["batch_size"], hparams["number_of_epochs"], hparams["lr"]) == (50, 250, 0.0045)
    model = hparams["model"]
    groups = hparams["param_groups"](model)
    no_decay = {id(p) for g in groups if g["weight_decay"] == 0.0 for p in g["params"]}
    decay = [g for g in groups if g["weight_decay"] == 0.01]
    assert len(decay) == 1 and all(p.dim() > 1 for p in decay[0]["params"])
    for name, param in model.named_parameters():
        if name.endswith(("A_log", "dt_bias")) or name.endswith(".D"):
            assert id(param) in no_decay, name
    optimizer = hparams["opt_class"](groups)
    scheduler = hparams["lr_scheduler"](optimizer)
    scheduler.step_update(10 * 900)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0045)
    data = _train_module("sequential_images").dataio_prep(hparams)
    x = data["train"][0]["x"]
    assert tuple(x.shape) == (3, 32, 32) and -1.0 <= float(x.min()) and float(x.max()) <= 1.0
