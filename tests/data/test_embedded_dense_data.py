"""coco_digits / ade_digits: COCO- and ADE20K-format data generated from scikit-learn's digits."""
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from ssm_plugins.data import DIGIT_NAMES
from ssm_plugins.data.ade_digits import ade_digits
from ssm_plugins.data.coco_digits import coco_digits, mask_to_rle


@pytest.fixture(scope="module")
def coco_root(tmp_path_factory):
    return coco_digits(tmp_path_factory.mktemp("data") / "coco_digits")


def test_rle_round_trips_through_pycocotools():
    mask_util = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(0)
    for shape in [(5, 7), (40, 33)]:
        mask = rng.random(shape) > 0.6
        mask[0, 0] = True  # a mask starting with ink: the zero-run is empty
        rle = mask_util.frPyObjects(mask_to_rle(mask), *shape)
        np.testing.assert_array_equal(mask_util.decode(rle).astype(bool), mask)


def test_coco_digits_layout_and_annotations(coco_root):
    coco_api = pytest.importorskip("pycocotools.coco")
    for split, n_images in [("train", 100), ("val", 30)]:
        coco = coco_api.COCO(str(coco_root / "annotations" / f"instances_{split}2017.json"))
        assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == list(DIGIT_NAMES)
        assert len(coco.getImgIds()) == n_images
        anns = coco.loadAnns(coco.getAnnIds())
        assert len(anns) >= n_images  # every image holds at least one digit
        for ann in anns[:40]:
            info = coco.loadImgs(ann["image_id"])[0]
            image = Image.open(coco_root / f"{split}2017" / info["file_name"])
            assert image.size == (info["width"], info["height"]) and 128 <= min(image.size) <= max(image.size) <= 256
            mask = coco.annToMask(ann).astype(bool)
            ys, xs = np.nonzero(mask)
            assert ann["area"] == mask.sum() > 0 and ann["iscrowd"] == 0
            assert ann["bbox"] == [xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()]


def test_generation_is_deterministic_and_cached(coco_root, tmp_path):
    again = coco_digits(tmp_path / "again")
    for name in ["annotations/instances_val2017.json", "val2017/000007.jpg"]:
        assert (again / name).read_bytes() == (coco_root / name).read_bytes()
    stamp = (again / "val2017" / "000001.jpg").stat().st_mtime_ns
    assert coco_digits(again) == again and (again / "val2017" / "000001.jpg").stat().st_mtime_ns == stamp


def test_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(ValueError, match="root"):
        coco_digits(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_ade_digits_cli_writes_ade20k_layout(tmp_path):
    out = tmp_path / "ade"
    subprocess.run([sys.executable, "-m", "ssm_plugins.data.ade_digits", "--out", str(out)], check=True,
                   capture_output=True)
    for split, n_images in [("training", 100), ("validation", 30)]:
        images = sorted((out / "images" / split).glob("*.jpg"))
        labels = sorted((out / "annotations" / split).glob("*.png"))
        assert len(images) == len(labels) == n_images
        assert [p.stem for p in images] == [p.stem for p in labels]
    seen = set()
    for image_path, label_path in zip(images[:10], labels[:10]):
        label = np.array(Image.open(label_path))
        assert label.shape == Image.open(image_path).size[::-1]
        values = set(np.unique(label).tolist())
        assert 0 in values and values <= set(range(11)) and len(values) >= 2  # "other" plus >= 1 digit
        seen |= values
    assert len(seen) >= 6
    assert ade_digits(out) == out  # complete: not regenerated
