"""The 2-D SSM paper's classification experiments (configs_mmpretrain/ssm2d/): the generated CIFAR-100 /
Tiny-ImageNet / CelebA sets are in the official on-disk formats and the adapter's readers accept them (and reject
malformed files by name), the CelebA metric and multi-label classifier compute what they say, every config is the
row its name says, and ``mim train mmpretrain`` runs a CIFAR-100 and a CelebA config end to end."""
import ast
import functools
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from _openmmlab import REPO, load, succeeded, tools_train
from ssm_plugins.openmmlab_tiny import logged_runs

pytest.importorskip("mmpretrain")

SSM2D_CONFIGS = REPO / "configs_mmpretrain" / "ssm2d"


@pytest.fixture(scope="module")
def cifar_root():
    from ssm_plugins.data.cifar_digits import cifar_digits

    return cifar_digits()


@pytest.fixture(scope="module")
def tiny_imagenet_root():
    from ssm_plugins.data.tiny_imagenet_digits import tiny_imagenet_digits

    return tiny_imagenet_digits()


@pytest.fixture(scope="module")
def celeba_root():
    from ssm_plugins.data.celeba_digits import celeba_digits

    return celeba_digits()


def _copy(src: Path, dst: Path, names) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


# ---- CIFAR-100 ---------------------------------------------------------------------------------------------


def test_cifar_pickles_have_the_official_keys_and_string_type(cifar_root):
    from ssm_plugins.data.cifar_digits import FINE_LABEL_NAMES

    folder = cifar_root / "cifar-100-python"
    train = pickle.loads((folder / "train").read_bytes(), encoding="bytes")  # the CIFAR web page's recipe
    assert set(train) == {b"filenames", b"batch_label", b"fine_labels", b"coarse_labels", b"data"}
    assert train[b"data"].dtype == np.uint8 and train[b"data"].shape == (2000, 3072)
    assert sorted(set(train[b"fine_labels"])) == list(range(100))
    assert [c for c in train[b"coarse_labels"]] == [f // 5 for f in train[b"fine_labels"]]
    assert all(isinstance(name, bytes) and name.endswith(b".png") for name in train[b"filenames"])
    test = pickle.loads((folder / "test").read_bytes(), encoding="latin1")  # MMPretrain's / torchvision's way
    assert test["data"].shape == (500, 3072) and len(test["fine_labels"]) == 500
    meta = pickle.loads((folder / "meta").read_bytes(), encoding="latin1")
    assert meta["fine_label_names"] == list(FINE_LABEL_NAMES) and len(meta["coarse_label_names"]) == 20
    # Python 2 str (BINSTRING) strings, not Python 3 bytes (a codecs.encode call): same bytes as the official files
    assert b"codecs" not in (folder / "meta").read_bytes()


def test_local_cifar100_reads_the_pickles_through_mmpretrains_reader(cifar_root):
    from ssm_plugins.mmpretrain import LocalCIFAR100

    raw = pickle.loads((cifar_root / "cifar-100-python" / "test").read_bytes(), encoding="latin1")
    dataset = LocalCIFAR100(data_root=str(cifar_root), split="test")
    assert len(dataset) == 500 and len(dataset.CLASSES) == 100
    assert list(dataset.CLASSES[:2]) == ["zero_red", "zero_orange"]
    info = dataset.get_data_info(7)
    assert info["gt_label"] == raw["fine_labels"][7]
    # HWC RGB image from the channel planes
    assert np.array_equal(info["img"], raw["data"][7].reshape(3, 32, 32).transpose(1, 2, 0))
    assert len(LocalCIFAR100(data_root=str(cifar_root), split="train")) == 2000


def test_mmpretrain_cifar100_rejects_generated_files_by_md5_local_cifar100_does_not(cifar_root):
    from mmpretrain.datasets import CIFAR100

    with pytest.raises(RuntimeError, match="Cannot find CIFAR100"):  # the md5 sums of the official files differ
        CIFAR100(data_root=str(cifar_root), split="test", download=False)


def test_local_cifar100_names_a_missing_file_and_refuses_to_download(cifar_root, tmp_path):
    from ssm_plugins.mmpretrain import LocalCIFAR100

    _copy(cifar_root / "cifar-100-python", tmp_path / "cifar-100-python", ["train", "test"])
    with pytest.raises(FileNotFoundError, match=r"cifar-100-python/meta not found"):
        LocalCIFAR100(data_root=str(tmp_path), split="train")
    with pytest.raises(ValueError, match="download must be False"):
        LocalCIFAR100(data_root=str(cifar_root), download=True)


# ---- Tiny-ImageNet ------------------------------------------------------------------------------------------


def test_tiny_imagenet_layout_and_boxes(tiny_imagenet_root):
    from PIL import Image

    wnids = (tiny_imagenet_root / "wnids.txt").read_text().split()
    assert len(wnids) == 200 and wnids != sorted(wnids)  # in no particular order, as the official file
    words = dict(line.split("\t") for line in (tiny_imagenet_root / "words.txt").read_text().splitlines())
    assert set(wnids) <= set(words)
    wnid = wnids[0]
    boxes = (tiny_imagenet_root / "train" / wnid / f"{wnid}_boxes.txt").read_text().splitlines()
    assert len(boxes) == 10
    name, *box = boxes[0].split("\t")
    image = Image.open(tiny_imagenet_root / "train" / wnid / "images" / name)
    assert image.format == "JPEG" and image.size == (64, 64) and image.mode == "RGB"
    x0, y0, x1, y1 = map(int, box)
    assert 0 <= x0 < x1 <= 63 and 0 <= y0 < y1 <= 63
    assert len(list((tiny_imagenet_root / "test" / "images").glob("test_*.JPEG"))) == 200


def test_tiny_imagenet_dataset_reads_val_annotations(tiny_imagenet_root):
    from ssm_plugins.mmpretrain import TinyImageNet

    wnids = sorted((tiny_imagenet_root / "wnids.txt").read_text().split())
    val = TinyImageNet(data_root=str(tiny_imagenet_root), split="val")
    lines = (tiny_imagenet_root / "val" / "val_annotations.txt").read_text().splitlines()
    assert len(val) == len(lines) == 600 and val.CLASSES == tuple(wnids)
    for index in (0, 123, 599):
        name, wnid = lines[index].split("\t")[:2]
        info = val.get_data_info(index)
        assert Path(info["img_path"]) == tiny_imagenet_root / "val" / "images" / name
        assert info["gt_label"] == wnids.index(wnid)
    train = TinyImageNet(data_root=str(tiny_imagenet_root), split="train")
    assert len(train) == 2000
    info = train.get_data_info(1999)
    assert Path(info["img_path"]).parent.parent.name == wnids[info["gt_label"]]


def test_tiny_imagenet_names_a_malformed_annotation_line(tiny_imagenet_root, tmp_path):
    from ssm_plugins.mmpretrain import TinyImageNet

    (tmp_path / "wnids.txt").write_text((tiny_imagenet_root / "wnids.txt").read_text())
    (tmp_path / "val").mkdir()
    good = (tiny_imagenet_root / "val" / "val_annotations.txt").read_text().splitlines()
    (tmp_path / "val" / "val_annotations.txt").write_text(good[0] + "\nval_1.JPEG\tn12345678\t0\t0\t9\t9\n")
    with pytest.raises(ValueError, match=r"val_annotations.txt line 2: .*n12345678"):
        TinyImageNet(data_root=str(tmp_path), split="val")
    with pytest.raises(ValueError, match="split must be one of"):
        TinyImageNet(data_root=str(tmp_path), split="test")
    with pytest.raises(FileNotFoundError, match=r"train/n\d{8}/images not found"):
        TinyImageNet(data_root=str(tmp_path), split="train")


# ---- CelebA -----------------------------------------------------------------------------------------------


def test_celeba_files_have_the_official_format(celeba_root):
    from PIL import Image
    from ssm_plugins.data.celeba_digits import ATTRIBUTE_NAMES
    from ssm_plugins.mmpretrain import CELEBA_ATTRIBUTES

    lines = (celeba_root / "list_attr_celeba.txt").read_text().splitlines()
    assert lines[0] == "320" and lines[1].split() == list(CELEBA_ATTRIBUTES) == list(ATTRIBUTE_NAMES)
    assert lines[2].startswith("000001.jpg ") and len(lines[2].split()) == 41
    values = np.array([[int(v) for v in line.split()[1:]] for line in lines[2:]])
    assert set(np.unique(values)) == {-1, 1}
    assert ((values == 1).mean(axis=0) > 0).all() and ((values == 1).mean(axis=0) < 1).all()  # no constant label
    partition = (celeba_root / "list_eval_partition.txt").read_text().splitlines()
    assert partition[0] == "000001.jpg 0" and partition[-1] == "000320.jpg 2"
    image = Image.open(celeba_root / "img_align_celeba" / "000001.jpg")
    assert image.format == "JPEG" and image.size == (178, 218)


def test_celeba_dataset_splits_and_labels(celeba_root):
    from ssm_plugins.mmpretrain import CelebA

    rows = [line.split() for line in (celeba_root / "list_attr_celeba.txt").read_text().splitlines()[2:]]
    sizes = {split: len(CelebA(data_root=str(celeba_root), split=split)) for split in ("train", "val", "test")}
    assert sizes == {"train": 240, "val": 40, "test": 40}
    val = CelebA(data_root=str(celeba_root), split="val")
    info = val.get_data_info(3)  # image 244 = the 4th of the val partition
    assert Path(info["img_path"]) == celeba_root / "img_align_celeba" / "000244.jpg"
    assert info["gt_label"] == [i for i, v in enumerate(rows[243][1:]) if v == "1"]
    assert val.get_cat_ids(3) == info["gt_label"] and len(val.CLASSES) == 40


def test_celeba_names_the_malformed_or_missing_file(celeba_root, tmp_path):
    from ssm_plugins.mmpretrain import CelebA

    lines = (celeba_root / "list_attr_celeba.txt").read_text().splitlines()
    (tmp_path / "list_attr_celeba.txt").write_text("\n".join(["3", lines[1]] + lines[2:5]) + "\n")
    with pytest.raises(FileNotFoundError, match="list_eval_partition.txt not found"):
        CelebA(data_root=str(tmp_path))
    (tmp_path / "list_eval_partition.txt").write_text((celeba_root / "list_eval_partition.txt").read_text())
    (tmp_path / "list_attr_celeba.txt").write_text("\n".join(["3", lines[1]] + lines[2:4] + [lines[4][:-3]]) + "\n")
    with pytest.raises(ValueError, match=r"list_attr_celeba.txt line 5: expected .* 40 values"):
        CelebA(data_root=str(tmp_path))
    (tmp_path / "list_attr_celeba.txt").write_text("\n".join(lines[:5]) + "\n")  # the count line says 320
    with pytest.raises(ValueError, match=r"list_attr_celeba.txt line 1: says 320 images, the file lists 3"):
        CelebA(data_root=str(tmp_path))
    (tmp_path / "list_attr_celeba.txt").write_text("\n".join(["3", lines[1]] + lines[2:5]) + "\n")
    (tmp_path / "list_eval_partition.txt").write_text("000001.jpg 0\n000002.jpg 3\n")
    with pytest.raises(ValueError, match=r"list_eval_partition.txt line 2: expected \"<file> <0\|1\|2>\""):
        CelebA(data_root=str(tmp_path))
    (tmp_path / "list_eval_partition.txt").write_text("000001.jpg 0\n000002.jpg 1\n")
    with pytest.raises(ValueError, match=r"no partition for 1 images .* '000003.jpg'"):
        CelebA(data_root=str(tmp_path))
    with pytest.raises(ValueError, match="split must be one of"):
        CelebA(data_root=str(tmp_path), split="valid")


def test_multilabel_accuracy_against_a_hand_computation():
    from mmpretrain.structures import DataSample
    from ssm_plugins.mmpretrain import MultiLabelAccuracy

    scores = torch.tensor([[0.9, 0.2, 0.6], [0.4, 0.7, 0.5], [0.1, 0.3, 0.2], [0.8, 0.8, 0.49]])
    labels = [[0, 2], [1], [2], [0, 1, 2]]
    # thresholded at 0.5: [1,0,1] [0,1,1] [0,0,0] [1,1,0]; targets [1,0,1] [0,1,0] [0,0,1] [1,1,1]
    # per attribute correct: a0 4/4, a1 4/4, a2 1/4 (rows 1 only) -> mean (100 + 100 + 25) / 3 = 75
    metric = MultiLabelAccuracy(classwise=True)
    metric.process(None, [DataSample().set_pred_score(s).set_gt_label(lab).to_dict()
                          for s, lab in zip(scores, labels)])
    result = metric.evaluate(4)
    assert result["multi-label/mean_accuracy"] == pytest.approx(75.0)
    assert result["multi-label/accuracy_classwise"] == pytest.approx([100.0, 100.0, 25.0])
    # multi-hot gt_score (what the data preprocessor gives the model) counts the same
    metric = MultiLabelAccuracy()
    metric.process(None, [DataSample().set_pred_score(s).set_gt_score(torch.tensor(t, dtype=torch.float)).to_dict()
                          for s, t in zip(scores, [[1, 0, 1], [0, 1, 0], [0, 0, 1], [1, 1, 1]])])
    assert metric.evaluate(4)["multi-label/mean_accuracy"] == pytest.approx(75.0)
    with pytest.raises(ValueError, match="pred and target must both be"):
        MultiLabelAccuracy.calculate(torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool))


def test_multilabel_classifier_uses_bce_and_a_sigmoid_per_label():
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample
    import ssm_plugins.mmpretrain  # noqa: F401

    torch.manual_seed(0)
    # an earlier test may leave another toolbox's default scope set: build in MMPretrain's own
    with DefaultScope.overwrite_default_scope("mmpretrain"):
        model = MODELS.build(dict(type="TimmMultiLabelClassifier", model_name="vit_cifar_patch4_32_ssm2d",
                                  num_classes=5, depth=1, embed_dim=16, num_heads=2, ssm_n_ssm=1,
                                  ssm_d_state=2)).eval()
    images = torch.rand(3, 3, 32, 32) * 255
    samples = [DataSample().set_gt_label(lab) for lab in ([0, 3], [], [1, 2, 4])]
    data = model.data_preprocessor({"inputs": list(images), "data_samples": samples}, training=False)
    targets = torch.stack([s.gt_score for s in data["data_samples"]])
    assert targets.tolist() == [[1, 0, 0, 1, 0], [0] * 5, [0, 1, 1, 0, 1]]
    logits = model(data["inputs"])
    loss = model.loss(data["inputs"], data["data_samples"])["loss"]
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets.float())
    assert loss.item() == pytest.approx(bce.item(), rel=1e-5)
    predicted = model.predict(data["inputs"])
    assert torch.allclose(predicted[0].pred_score, torch.sigmoid(logits[0]))
    assert predicted[0].pred_label.tolist() == torch.where(torch.sigmoid(logits[0]) >= 0.5)[0].tolist()


# ---- configs: each is the row its name says ---------------------------------------------------------------

# name part -> the model options it means (the row); the dataset part -> the timm model family
_VARIANT = {"": {}, "s4nd": {"spatial_mixer": "s4nd"}, "ema": {"spatial_mixer": "ema"},
            "ssm2d-r": {"spatial_mixer": "ssm2d"}, "ssm2d-c": {"spatial_mixer": "ssm2d", "ssm_complex": True},
            "ablate": {}}
_MEGA_SUFFIX = {"": "", "ablate": "_ablate", "s4nd": "_s4nd", "ssm2d-r": "_ssm2d", "ssm2d-c": "_ssm2d"}
_BACKBONES = {("vit", "cifar100"): "vit_cifar_patch4_32_ssm2d",
              ("vit", "tiny-imagenet"): "vit_tinyimagenet_patch8_64_ssm2d",
              ("swin", "cifar100"): "swin_cifar_patch2_window4_32_ssm2d",
              ("swin", "tiny-imagenet"): "swin_tinyimagenet_patch4_window4_64_ssm2d",
              ("mega", "cifar100"): "mega_cifar_patch4_32", ("mega", "tiny-imagenet"): "mega_tinyimagenet_patch8_64",
              ("deit-tiny", "celeba-224px"): "deit_tiny_patch16_224_ssm2d",
              ("deit-small", "celeba-224px"): "deit_small_patch16_224_ssm2d",
              ("deit-base", "celeba-224px"): "deit_base_patch16_224_ssm2d",
              ("swin-tiny", "celeba-224px"): "swin_tiny_patch4_window7_224_ssm2d",
              ("mega-tiny", "in1k"): "mega_tiny_patch16_224"}
SSM2D_CONFIG_FILES = sorted(p for p in SSM2D_CONFIGS.glob("*.py"))


def _fraction(stem: str):
    """(stem without its "-<N>pct" suffix, N / 100 or None): Figure 3's configs train on N % of the training set."""
    match = re.fullmatch(r"(.*)-(\d+)pct", stem)
    return (match[1], int(match[2]) / 100) if match else (stem, None)


def _expected(stem: str):
    model_part, _gpus, dataset = _fraction(stem)[0].split("_")
    nope = model_part.endswith("-nope")
    model_part = model_part[:-len("-nope")] if nope else model_part
    for backbone in sorted({b for b, _ in _BACKBONES}, key=len, reverse=True):
        if model_part == backbone or model_part.startswith(backbone + "-"):
            variant = model_part[len(backbone) + 1:]
            break
    name = _BACKBONES[(backbone, dataset)]
    options = dict(_VARIANT[variant])
    if backbone.startswith("mega"):
        name += _MEGA_SUFFIX[variant]
        options.pop("spatial_mixer", None)  # the registered Mega names fix the mixer
    elif variant in ("", "ablate"):
        options["spatial_mixer"] = "none"  # baselines: the plain timm block
    if nope:
        options["no_pos_embed"] = True
    return name, options


def test_the_configs_cover_tables_1_to_3_and_figures_3_and_5():
    stems = {p.stem for p in SSM2D_CONFIG_FILES}
    table1 = {f"{m}_1xb128_{d}" for d in ("cifar100", "tiny-imagenet") for m in (
        "vit", "vit-s4nd", "vit-ssm2d-r", "vit-ssm2d-c", "mega-ablate", "mega", "mega-s4nd", "mega-ssm2d-r",
        "mega-ssm2d-c", "swin", "swin-ema", "swin-s4nd", "swin-ssm2d-r", "swin-ssm2d-c")}
    table2 = {f"{m}{v}_8xb128_celeba-224px" for m in ("deit-tiny", "deit-small", "deit-base", "swin-tiny")
              for v in ("", "-ssm2d-r", "-ssm2d-c")}
    table3 = {f"{m}{v}-nope_{s}" for v in ("", "-ssm2d-r", "-ssm2d-c")
              for m, s in (("vit", "1xb128_cifar100"), ("swin", "1xb128_tiny-imagenet"),
                           ("deit-tiny", "8xb128_celeba-224px"))}
    figure5 = {"mega-tiny_4xb256_in1k", "mega-tiny-ablate_4xb256_in1k", "mega-tiny-ssm2d-r_4xb256_in1k"}
    figure3 = {f"{m}{v}_{s}-10pct" for v in ("", "-ssm2d-r")
               for m, s in (("vit", "1xb128_cifar100"), ("swin", "1xb128_tiny-imagenet"),
                            ("deit-tiny", "8xb128_celeba-224px"))}
    assert stems == table1 | table2 | table3 | figure5 | figure3


@functools.lru_cache(maxsize=None)
def _config(path: Path):
    return load(path)


def _flat(node, prefix=""):
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    if isinstance(node, list):
        return {k: v for index, value in enumerate(node) for k, v in _flat(value, f"{prefix}{index}.").items()}
    return {prefix[:-1]: node}


@pytest.mark.parametrize("path", SSM2D_CONFIG_FILES, ids=lambda p: p.stem)
def test_config_is_the_row_its_name_says(path):
    cfg = _config(path)
    name, options = _expected(path.stem)
    assert cfg.model.model_name == name
    for key in ("spatial_mixer", "ssm_complex", "no_pos_embed"):
        assert cfg.model.get(key) == options.get(key), key
    dataset = cfg.train_dataloader.dataset
    fraction = _fraction(path.stem)[1]
    if fraction is not None:  # Figure 3: the row's training set, cut to that fraction
        assert dataset.type == "TrainingFraction" and dataset.fraction == fraction and dataset.seed == 0
        dataset = dataset.dataset
    if "celeba" in path.stem:
        assert cfg.model.type == "TimmMultiLabelClassifier" and cfg.model.num_classes == 40
        assert cfg.train_cfg.max_epochs == 20 and dataset.type == "CelebA"
        assert cfg.val_evaluator[0].type == "MultiLabelAccuracy"
    elif "in1k" not in path.stem:
        assert cfg.optim_wrapper.optimizer.lr == 3e-3 and cfg.train_cfg.max_epochs == 100
        assert cfg.train_dataloader.batch_size == 128 and cfg.model.drop_path_rate == 0.1
        assert cfg.train_dataloader.sampler == dict(type="RepeatAugSampler", num_repeats=3, shuffle=True)
        assert dataset.type == ("LocalCIFAR100" if "cifar100" in path.stem else "TinyImageNet")
    assert cfg.optim_wrapper.constructor == "TimmNoDecayOptimWrapperConstructor"


def _parent(path: Path) -> Path:
    (node,) = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.Assign) and n.targets[0].id == "_base_"]
    return (path.parent / ast.literal_eval(node.value)).resolve()


# (Figure 3's baseline configs change the training set instead: test_figure3_config_cuts_the_training_set_only)
@pytest.mark.parametrize("path", [p for p in SSM2D_CONFIG_FILES if "\n_base_ = './" in p.read_text() and (
    _fraction(p.stem)[1] is None or _fraction(_parent(p).stem)[1] is not None)], ids=lambda p: p.stem)
def test_derived_config_changes_only_the_model_options_of_its_row(path):
    """A row config inherits its baseline (or the row it extends) and changes the model options its name adds."""
    parent = _parent(path)
    child, base = _flat(_config(path).to_dict()), _flat(_config(parent).to_dict())
    changed = {k for k in set(child) | set(base) if child.get(k) != base.get(k)}
    name, options = _expected(path.stem)
    parent_name, parent_options = _expected(parent.stem)
    expected = {f"model.{k}" for k in set(options) | set(parent_options) if options.get(k) != parent_options.get(k)}
    assert changed == expected | ({"model.model_name"} if name != parent_name else set())
    assert path.read_text().startswith("# 2-D SSM paper, ")  # the table, row and the paper's figure


# the paper's parameter counts (Tables 1, 2, "Figure 5"), for the rows whose SSM settings the paper's counts pin
# down (App. F: n_ssm 8, N 16, 4 directions); the ViT / DeiT SSM rows report smaller deltas (docs/2d-ssm.md,
# 'Defaults and parameter counts')
PAPER_PARAMS = {
    "vit_1xb128_cifar100": 2.71e6, "vit-s4nd_1xb128_cifar100": 2.72e6, "mega_1xb128_cifar100": 2.98e6,
    "mega-ablate_1xb128_cifar100": 2.75e6, "mega-s4nd_1xb128_cifar100": 2.80e6,
    "mega-ssm2d-r_1xb128_cifar100": 2.80e6, "mega-ssm2d-c_1xb128_cifar100": 2.84e6,
    "swin_1xb128_tiny-imagenet": 7.15e6, "swin-ema_1xb128_tiny-imagenet": 7.52e6,
    "swin-s4nd_1xb128_tiny-imagenet": 7.18e6, "swin-ssm2d-r_1xb128_tiny-imagenet": 7.25e6,
    "swin-ssm2d-c_1xb128_tiny-imagenet": 7.26e6,
    "deit-tiny_8xb128_celeba-224px": 5.532e6, "deit-small_8xb128_celeba-224px": 21.681e6,
    "deit-base_8xb128_celeba-224px": 85.829e6, "swin-tiny_8xb128_celeba-224px": 27.550e6,
    "mega-tiny_4xb256_in1k": 6.21e6, "mega-tiny-ablate_4xb256_in1k": 5.91e6, "mega-tiny-ssm2d-r_4xb256_in1k": 5.96e6,
}


@pytest.mark.parametrize("stem", sorted(PAPER_PARAMS))
def test_config_model_has_the_papers_parameter_count(stem):
    import timm
    import ssm_plugins.mmpretrain  # noqa: F401

    model_cfg = load(SSM2D_CONFIGS / f"{stem}.py").model.to_dict()
    for key in ("type", "loss", "train_cfg", "data_preprocessor", "thr"):
        model_cfg.pop(key, None)
    # on the meta device (shapes only, seconds faster), except Mega, whose builder reads tensor values
    with torch.device("cpu" if stem.startswith("mega") else "meta"):
        params = sum(p.numel() for p in timm.create_model(**model_cfg).parameters())
    assert params == pytest.approx(PAPER_PARAMS[stem], rel=0.01)  # the paper prints 3-4 significant digits


@pytest.mark.parametrize("stem, root, size", [("vit_1xb128_cifar100", "cifar_root", 32),
                                                ("swin_1xb128_tiny-imagenet", "tiny_imagenet_root", 64),
                                                ("deit-tiny_8xb128_celeba-224px", "celeba_root", 224)])
def test_config_pipelines_run_on_the_generated_data(stem, root, size, request):
    """The configured datasets and train / test pipelines (RandAugment or AutoAugment, crop, erasing) on real files."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import DATASETS

    cfg = load(SSM2D_CONFIGS / f"{stem}.py")
    init_default_scope("mmpretrain")
    for loader in ("train_dataloader", "val_dataloader"):
        dataset_cfg = cfg[loader].dataset
        dataset_cfg.update(data_root=str(request.getfixturevalue(root)), indices=3)
        dataset = DATASETS.build(dataset_cfg)
        for index in range(3):
            item = dataset[index]
            assert item["inputs"].shape == (3, size, size) and item["inputs"].dtype == torch.uint8
            assert item["data_samples"].gt_label.numel() >= (0 if "celeba" in stem else 1)


def test_generators_are_deterministic(cifar_root, tmp_path):
    from ssm_plugins.data.cifar_digits import cifar_digits

    again = cifar_digits(tmp_path / "again")
    for name in ("train", "test", "meta"):
        assert (again / "cifar-100-python" / name).read_bytes() == (cifar_root / "cifar-100-python" / name).read_bytes()


# ---- Figure 3: training-set fractions ------------------------------------------------------------------------


def test_fraction_indices_keep_each_class_in_proportion_with_a_seed():
    from ssm_plugins.mmpretrain import fraction_indices

    labels = [0] * 50 + [1] * 30 + [2] * 20
    kept = fraction_indices(labels, 0.1, seed=0)
    assert sorted(kept) == kept and len(set(kept)) == len(kept)
    assert np.bincount(np.asarray(labels)[kept]).tolist() == [5, 3, 2]  # round(0.1 * n) per class
    assert fraction_indices(labels, 0.1, seed=0) == kept and fraction_indices(labels, 0.1, seed=1) != kept
    assert np.bincount(np.asarray(labels)[fraction_indices(labels, 0.01)]).tolist() == [1, 1, 1]  # >= 1 per class
    assert fraction_indices(labels, 1.0) == list(range(100))
    assert set(kept) < set(fraction_indices(labels, 0.3, seed=0))  # nested draws
    multi = [[0, 3], [], [1]] * 10  # multi-label (CelebA): a random tenth of the samples
    assert len(fraction_indices(multi, 0.1)) == 3
    for bad in (0, 0.0, 1.5, -0.1, "0.1", True):
        with pytest.raises(ValueError, match="fraction must be a number in"):
            fraction_indices(labels, bad)


@pytest.mark.parametrize("stem", [p.stem for p in SSM2D_CONFIG_FILES
                                  if _fraction(p.stem)[1] is not None and "-ssm2d" not in p.stem])
def test_figure3_config_cuts_the_training_set_only(stem):
    """A Figure 3 baseline is its Table 1 / 2 row with the training set wrapped in TrainingFraction, nothing else."""
    path = SSM2D_CONFIGS / f"{stem}.py"
    assert _parent(path).stem == _fraction(stem)[0]
    child, base = _config(path).to_dict(), _config(_parent(path)).to_dict()
    wrapped = child["train_dataloader"].pop("dataset")
    assert wrapped.pop("dataset") == base["train_dataloader"].pop("dataset")
    assert wrapped == {"type": "TrainingFraction", "fraction": 0.1, "seed": 0} and child == base


@pytest.mark.parametrize("stem, root", [("vit_1xb128_cifar100-10pct", "cifar_root"),
                                        ("swin_1xb128_tiny-imagenet-10pct", "tiny_imagenet_root"),
                                        ("deit-tiny_8xb128_celeba-224px-10pct", "celeba_root")])
def test_figure3_training_set_is_the_stratified_fraction(stem, root, request):
    """Built from the config on the generated sets: a tenth of the training images (of each class, where each
    image has one label), the same images for the same seed, and the --cfg-options sweep value is honoured."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import DATASETS

    import ssm_plugins.mmpretrain  # noqa: F401

    init_default_scope("mmpretrain")
    cfg = load(SSM2D_CONFIGS / f"{stem}.py").train_dataloader.dataset.to_dict()
    cfg["dataset"]["data_root"] = str(request.getfixturevalue(root))
    full = DATASETS.build(cfg["dataset"])
    cut = DATASETS.build(cfg)
    assert type(cut) is type(full) and cut.metainfo == full.metainfo
    def images(dataset):  # a file path, or the pixels themselves for the CIFAR pickles
        infos = (dataset.get_data_info(i) for i in range(len(dataset)))
        return [info["img_path"] if "img_path" in info else info["img"].tobytes() for info in infos]

    paths = images(cut)
    assert paths == images(DATASETS.build(cfg)) and set(paths) <= set(images(full))
    if "celeba" in stem:
        assert len(cut) == round(0.1 * len(full))
    else:
        full_counts = np.bincount(full.get_gt_labels())
        assert np.bincount(cut.get_gt_labels()).tolist() == [max(1, round(0.1 * n)) for n in full_counts]
    assert cut[0]["inputs"].dtype == torch.uint8  # the row's own pipeline
    half = DATASETS.build({**cfg, "fraction": 0.5})
    assert len(half) > len(cut) and set(paths) < set(images(half))  # nested: the 10 % images are in the 50 %
    with pytest.raises(ValueError, match="fraction must be a number in"):
        DATASETS.build({**cfg, "fraction": 10})  # a percentage where a fraction belongs
    with pytest.raises(TypeError, match="dataset must be an MMEngine BaseDataset"):
        DATASETS.build({**cfg, "dataset": list(range(10))})


# ---- end to end: the toolbox's train.py as mim train runs it ------------------------------------------------


def _loader_options(root, images, val_images, batch_size):
    options = []
    for loader, count in (("train_dataloader", images), ("val_dataloader", val_images),
                          ("test_dataloader", val_images)):
        options += [f"{loader}.dataset.data_root={root}", f"{loader}.dataset.indices={count}",
                    f"{loader}.batch_size={batch_size}", f"{loader}.num_workers=0",
                    f"{loader}.persistent_workers=False"]
    return options + ["train_cfg.max_epochs=1", "randomness.seed=0", "default_hooks.logger.interval=1",
                      "log_processor.window_size=1"]


@pytest.mark.slow
def test_cifar100_ssm2d_config_trains(cifar_root, tmp_path):
    config = SSM2D_CONFIGS / "vit-ssm2d-r_1xb128_cifar100.py"
    # the config as it is (model, recipe, RandAugment, RepeatAugSampler, Mixup/CutMix) on 64 generated training
    # images (4 iterations of 16) and 100 test images
    succeeded(tools_train("mmpretrain", config, tmp_path, _loader_options(cifar_root, 64, 100, 16)))
    (records,) = logged_runs(tmp_path)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 4 and all(np.isfinite(losses)) and 3.0 < losses[0] < 7.0  # ~ln(100) from scratch
    (val,) = [r for r in records if "accuracy/top1" in r]
    assert 0.0 <= val["accuracy/top1"] <= 100.0 and "accuracy/top5" in val
    assert (tmp_path / "epoch_1.pth").exists() and list(tmp_path.glob("best_accuracy_top1_epoch_1.pth"))
    state = torch.load(tmp_path / "epoch_1.pth", map_location="cpu", weights_only=False)["state_dict"]
    assert any(".ssm." in key for key in state) and "head.weight" in state  # timm's own keys, with the SSMs


@pytest.mark.slow
def test_celeba_ssm2d_config_trains(celeba_root, tmp_path):
    config = SSM2D_CONFIGS / "deit-tiny-ssm2d-r_8xb128_celeba-224px.py"
    # DeiT-T + 2-D SSM at 224 px as configured: 2 iterations of 2 images, validation on 4
    succeeded(tools_train("mmpretrain", config, tmp_path, _loader_options(celeba_root, 4, 4, 2)))
    (records,) = logged_runs(tmp_path)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 2 and all(0.0 < loss < 2.0 for loss in losses)  # BCE of 40 attributes, ~ln 2 at start
    (val,) = [r for r in records if "multi-label/mean_accuracy" in r]
    assert 0.0 <= val["multi-label/mean_accuracy"] <= 100.0 and "multi-label/mAP" in val
    assert (tmp_path / "epoch_1.pth").exists() and list(tmp_path.glob("best_multi-label_mean_accuracy_epoch_1.pth"))
