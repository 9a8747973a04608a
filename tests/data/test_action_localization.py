"""The HACS Segments release layout (ssm_plugins.data.action_localization): the generated release is ActivityNet JSON
plus SlowFast pickles and reads back as written (resize to seq_len, segments on the grid, classes of the training
subset, .npy features), missing features and bad files are named, and ActivityNet's detection mAP on worked
examples (tIoU, interpolated AP, the matching order, thresholds)."""
import ast
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ssm_plugins.data.action_localization as module
from ssm_plugins.data.action_localization import (LOCALIZATION_DATASETS, ActionLocalizationVideos,
                                                  LocalizationMetrics, average_precision, load_features,
                                                  read_annotations, tiou, write_release)

HACS = LOCALIZATION_DATASETS["hacs"]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hacs")
    assert write_release(str(folder), videos=8, frames=(20, 40), classes=4, slow_dim=16, fast_dim=8) == str(folder)
    return folder


def test_generated_release_is_activitynet_json_and_slowfast_pickles(release):
    assert HACS.json_file == "annotations/HACS_segments_v1.1.1_slowfast.json" and HACS.num_classes == 200
    database = json.loads((release / HACS.json_file).read_text())["database"]
    assert len(database) == 8 and all(len(v) == 11 for v in database)
    subsets = [e["subset"] for e in database.values()]
    assert (subsets.count("training"), subsets.count("validation"), subsets.count("testing")) == (5, 2, 1)
    for video, entry in database.items():
        assert isinstance(entry["duration"], str) and len(entry["duration"].split(".")[1]) == 6
        assert entry["url"].endswith(video)
        if entry["subset"] == "testing":
            assert "annotations" not in entry
            continue
        assert 1 <= len(entry["annotations"]) <= 3
        spans = sorted(a["segment"] for a in entry["annotations"])
        assert all(0 <= s < e <= float(entry["duration"]) for s, e in spans)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # non-overlapping
        assert all(a["label"] in module.HACS_CLASSES for a in entry["annotations"])
        with open(release / HACS.feature_folder / f"{video}.pkl", "rb") as f:
            raw = pickle.load(f)
        steps = raw["slow_feature"].shape[2]
        assert raw["slow_feature"].shape == (1, 16, steps) and raw["fast_feature"].shape == (1, 8, steps)
        assert raw["slow_feature"].dtype == torch.float32 and isinstance(raw["feature_frames"], int)
        assert float(entry["duration"]) == pytest.approx(steps * 8 / 15, abs=1e-6)  # 15 fps, one step per 8 frames
    labels = {a["label"] for e in database.values() if e["subset"] == "training" for a in e["annotations"]}
    assert len(labels) == 4  # every class is shown in training
    again = json.loads(write_release(str(release.parent / "again"), videos=8, frames=(20, 40), classes=4,
                                     slow_dim=16, fast_dim=8) and (release.parent / "again" / HACS.json_file)
                       .read_text())["database"]
    assert again == database  # deterministic in seed


def test_dataset_reads_the_release(release):
    database = read_annotations(str(release / HACS.json_file))["database"]
    train = ActionLocalizationVideos(str(release), "training", seq_len=32)
    assert len(train) == 5 and train.videos == sorted(v for v, e in database.items() if e["subset"] == "training")
    assert train.classes == tuple(sorted({a["label"] for v in train.videos for a in database[v]["annotations"]}))
    video = train.videos[0]
    item = train[0]
    with open(release / HACS.feature_folder / f"{video}.pkl", "rb") as f:
        raw = pickle.load(f)
    full = torch.cat([raw["slow_feature"], raw["fast_feature"]], dim=1).squeeze(0)  # (24, T)
    assert item["video"] == video and item["features"].shape == (32, 24) and item["features"].dtype == torch.float32
    expected = F.interpolate(full[None], size=32, mode="linear", align_corners=False)[0].T
    assert torch.allclose(item["features"], expected)
    same = ActionLocalizationVideos(str(release), "training", seq_len=full.shape[1])[0]["features"]
    assert torch.allclose(same, full.T)  # no resize at the native length
    entry = database[video]
    start, end = entry["annotations"][0]["segment"]
    duration = float(entry["duration"])
    assert item["duration"] == duration
    assert item["segments"].shape == (len(entry["annotations"]), 2) and item["segments"].dtype == torch.float32
    assert item["segments"][0].tolist() == pytest.approx([start * 32 / duration, end * 32 / duration], abs=1e-5)
    assert [train.classes[k] for k in item["labels"]] == [a["label"] for a in entry["annotations"]]
    assert item["labels"].dtype == torch.long
    batch = ActionLocalizationVideos.collate([train[0], train[1]])
    assert batch["features"].shape == (2, 32, 24) and batch["video"] == train.videos[:2]
    assert isinstance(batch["segments"], list) and len(batch["labels"]) == 2
    test = ActionLocalizationVideos(str(release), "testing", seq_len=8)
    assert len(test) == 1 and test[0]["segments"].shape == (0, 2) and test[0]["labels"].shape == (0,)
    assert test.classes == train.classes
    metrics = LocalizationMetrics(ActionLocalizationVideos(str(release), "validation").ground_truth())
    for video, items in metrics_truth(release, "validation").items():  # the truth as predictions: 100 mAP
        metrics.append(video, [s[1:] for s in items], [s[0] for s in items], np.ones(len(items)))
    assert metrics.summarize()["mAP"] == 100.0


def metrics_truth(release, subset):
    database = json.loads((release / HACS.json_file).read_text())["database"]
    return {v: [(a["label"], *a["segment"]) for a in e["annotations"]] for v, e in database.items()
            if e["subset"] == subset}


def test_segments_duplicates_clipping_npy_features_and_classes(tmp_path):
    database = {"vid_a": {"subset": "training", "duration": "10.000000", "annotations": [
        {"label": "Archery", "segment": [2.0, 5.0], "label_id": 3}, {"label": "Archery", "segment": [2.0, 5.0]},
        {"label": "Dodgeball", "segment": [6.0, 6.0]}, {"label": "Zumba", "segment": [8.0, 12.0]}]},
        "vid_b": {"subset": "validation", "duration": 4.0, "annotations": [{"label": "Tango", "segment": [1, 2]}]}}
    (tmp_path / "ann.json").write_text(json.dumps({"database": database}))
    (tmp_path / "feats").mkdir()
    np.save(tmp_path / "feats" / "vid_a.npy", np.array([[0.0, 10.0], [1.0, 20.0]], dtype=np.float32))  # (T=2, C=2)
    np.save(tmp_path / "feats" / "vid_b.npy", np.zeros((3, 2), dtype=np.float32))
    videos = ActionLocalizationVideos(str(tmp_path), "training", seq_len=4, json_file="ann.json",
                                      feature_folder="feats", feature_ext=".npy")
    assert videos.classes == ("Archery", "Zumba")  # Dodgeball's empty segment dropped, Tango only in validation
    item = videos[0]
    # linear resize 2 -> 4 steps (align_corners=False): sample points -0.25, 0.25, 0.75, 1.25 clamped to [0, 1]
    assert item["features"][:, 0].tolist() == pytest.approx([0.0, 0.25, 0.75, 1.0])
    assert item["features"][:, 1].tolist() == pytest.approx([10.0, 12.5, 17.5, 20.0])
    # Archery once (the duplicate counted once), Zumba [8, 12] s of 10 s clipped to [3.2, 4]
    assert item["segments"].flatten().tolist() == pytest.approx([0.8, 2.0, 3.2, 4.0]) and item["labels"].tolist() == [0, 1]
    val = ActionLocalizationVideos(str(tmp_path), "validation", seq_len=4, json_file="ann.json",
                                   feature_folder="feats", feature_ext="npy")
    with pytest.raises(ValueError, match="video 'vid_b': label 'Tango' is not one of the 2 classes"):
        val[0]
    val = ActionLocalizationVideos(str(tmp_path), "validation", seq_len=4, json_file="ann.json",
                                   feature_folder="feats", feature_ext=".npy", classes=["Archery", "Tango"])
    assert val[0]["labels"].tolist() == [1] and val[0]["segments"].tolist() == [[1.0, 2.0]]
    assert videos.ground_truth() == {"vid_a": [("Archery", 2.0, 5.0), ("Zumba", 8.0, 12.0)]}


def test_load_features_formats(tmp_path):
    slow, fast = np.arange(12, dtype=np.float32).reshape(1, 4, 3), -np.ones((1, 2, 3), dtype=np.float32)
    for name, data in (("np.pkl", {"slow_feature": slow, "fast_feature": fast, "feature_frames": 24}),
                       ("torch.pkl", {"slow_feature": torch.from_numpy(slow), "fast_feature": torch.from_numpy(fast),
                                      "feature_frames": 24})):
        with open(tmp_path / name, "wb") as f:
            pickle.dump(data, f)
        x = load_features(str(tmp_path / name))
        assert x.shape == (3, 6) and x.dtype == torch.float32
        assert x[:, :4].tolist() == slow[0].T.tolist() and (x[:, 4:] == -1).all()
    torch.save({"slow_feature": torch.from_numpy(slow), "fast_feature": torch.from_numpy(fast)}, tmp_path / "z.pkl")
    assert load_features(str(tmp_path / "z.pkl")).shape == (3, 6)  # a torch zip file
    np.savez(tmp_path / "a.npz", feats=np.zeros((6, 5), dtype=np.float64))
    assert load_features(str(tmp_path / "a.npz")).shape == (5, 6)
    with open(tmp_path / "bad.pkl", "wb") as f:
        pickle.dump({"slow_feature": slow, "fast_feature": fast[:, :, :2]}, f)
    with pytest.raises(ValueError, match="bad.pkl: slow_feature has 3 steps but fast_feature 2"):
        load_features(str(tmp_path / "bad.pkl"))
    with open(tmp_path / "list.pkl", "wb") as f:
        pickle.dump([1, 2], f)
    with pytest.raises(ValueError, match="list.pkl: expected a dict with 'slow_feature'"):
        load_features(str(tmp_path / "list.pkl"))


def test_missing_features_warn_and_bad_files_are_named(tmp_path):
    write_release(str(tmp_path), videos=8, frames=(10, 12), classes=2, slow_dim=4, fast_dim=2, seed=1)
    videos = ActionLocalizationVideos(str(tmp_path), "training")
    (tmp_path / HACS.feature_folder / f"{videos.videos[1]}.pkl").unlink()
    with pytest.warns(UserWarning, match="1 of 5 training videos have no feature file in .*slowfast_features"):
        fewer = ActionLocalizationVideos(str(tmp_path), "training")
    assert len(fewer) == 4 and videos.videos[1] not in fewer.videos
    with pytest.raises(ValueError, match="dataset must be one of"):
        ActionLocalizationVideos(str(tmp_path), dataset="hacz")
    with pytest.raises(ValueError, match="no video in subset 'train'"):
        ActionLocalizationVideos(str(tmp_path), "train")
    with pytest.raises(FileNotFoundError, match="nope.json: no such file"):
        ActionLocalizationVideos(str(tmp_path), json_file="nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"database": {"abc": ')
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        read_annotations(str(bad))
    bad.write_text('{"videos": {}}')
    with pytest.raises(ValueError, match="bad.json: expected an object with a 'database'"):
        ActionLocalizationVideos(str(tmp_path), json_file="bad.json")
    for entry in ('{"subset": "training", "duration": 5, "annotations": [{"label": "x"}]}',
                  '{"subset": "training", "duration": "0.000000", "annotations": []}'):
        bad.write_text('{"database": {"abc": %s}}' % entry)
        with pytest.raises(ValueError, match="bad.json, video 'abc': expected"):
            read_annotations(str(bad))


def test_tiou_worked_examples():
    assert tiou([0, 10], [[0, 10], [5, 15], [10, 20], [2, 4], [0, 6]]) == pytest.approx([1, 5 / 15, 0, 0.2, 0.6])
    assert tiou((3, 4), np.zeros((0, 2))).shape == (0,)


def test_average_precision_worked_examples():
    truth = {"v1": [[0, 10]], "v2": [[20, 30]]}
    # TP (0.9), the same segment again (a duplicate of a matched truth: FP), TP: AP = 0.5 x 1 + 0.5 x 2/3
    predictions = [("v1", 0, 10, 0.9), ("v1", 0, 10, 0.8), ("v2", 20, 30, 0.7)]
    assert average_precision(truth, predictions, [0.5]) == pytest.approx([0.5 + 0.5 * 2 / 3])
    assert average_precision(truth, predictions[::-1], [0.5]) == pytest.approx([0.5 + 0.5 * 2 / 3])  # by score
    assert average_precision(truth, [predictions[0], predictions[2]], [0.5]) == pytest.approx([1.0])
    # FP first (a video without this class's truth), then the two hits: precision 1/2, 2/3 -> 0.5 x 2/3 + 0.5 x 2/3
    assert average_precision(truth, [("v3", 0, 1, 1.0), *predictions[::2]], [0.5]) == pytest.approx([2 / 3])
    assert average_precision(truth, [], [0.5, 0.75]).tolist() == [0.0, 0.0]
    assert average_precision(truth, [("v1", 0, 5, 1.0)], [0.5, 0.55]).tolist() == [0.5, 0.0]  # tIoU 0.5 >= 0.5
    assert average_precision({}, predictions, [0.5]).tolist() == [0.0]
    # equal scores keep their order (stable sort): FP then TP -> 0.5 x 1/2
    assert average_precision({"v1": [[0, 10]]}, [("v1", 50, 60, 0.5), ("v1", 0, 10, 0.5)], [0.5]) == \
        pytest.approx([0.5])


def test_next_best_unmatched_ground_truth():
    # truths A [0, 10], B [0, 12]; both predictions [0, 10]: the first takes A (tIoU 1), the second finds A taken
    # and takes B (tIoU 10/12 = 0.83 >= 0.5): two TPs; at 0.9 B is too far: TP, FP
    truth = {"v": [[0, 10], [0, 12]]}
    predictions = [("v", 0, 10, 0.9), ("v", 0, 10, 0.8)]
    assert average_precision(truth, predictions, [0.5, 0.9]) == pytest.approx([1.0, 0.5])


def test_metrics_thresholds_classes_and_rounding():
    truth = {"v1": [("Archery", 0, 10)], "v2": [("Archery", 20, 30), ("Zumba", 0, 10)], "v3": []}
    metrics = LocalizationMetrics(truth, thresholds=(0.5, 0.75))
    metrics.append("v1", [[0, 6]], ["Archery"], [0.9])  # tIoU 0.6: a hit at 0.5, not at 0.75
    metrics.append("v2", np.array([[20, 30], [0, 10]]), ["Archery", "Tango"], [0.8, 0.7])  # Tango: no truth
    metrics.append("v3", np.zeros((0, 2)), [], [])
    # Archery: 1.0 at 0.5, at 0.75 FP then TP: 0.5 x 1/2; Zumba has no predictions: AP 0
    assert metrics.summarize() == {"mAP@0.5": 50.0, "mAP@0.75": 12.5, "mAP": 31.25}
    perfect = LocalizationMetrics({"v": [("Archery", 1.0, 3.0), ("Zumba", 2.0, 7.0)]})
    perfect.append("v", [[1.0, 3.0], [2.0, 7.0]], ["Archery", "Zumba"], [0.1, 0.2])
    out = perfect.summarize()
    assert out["mAP@0.5"] == out["mAP@0.75"] == out["mAP@0.95"] == out["mAP"] == 100.0 and len(out) == 11
    third = LocalizationMetrics({"v": [("Archery", 0, 10), ("Archery", 20, 30), ("Archery", 40, 50)]}, [0.5])
    third.append("v", [[0, 10]], ["Archery"], [1.0])
    assert third.summarize() == {"mAP@0.5": 33.33, "mAP": 33.33}  # rounded to 2 decimals
    with pytest.raises(ValueError, match="video 'v9' is not in the ground truth"):
        metrics.append("v9", [[0, 1]], ["Archery"], [1.0])
    with pytest.raises(ValueError, match="v1: 1 segments, 2 labels and 1 scores"):
        metrics.append("v1", [[0, 1]], ["Archery", "Zumba"], [1.0])
    with pytest.raises(ValueError, match="no segments"):
        LocalizationMetrics({"v": []}).summarize()


def test_cli_and_light_imports(tmp_path, capsys):
    module.main(["--out", str(tmp_path), "--videos", "4", "--frames", "10", "12", "--classes", "2",
                 "--slow-dim", "4", "--fast-dim", "2"])
    assert capsys.readouterr().out.strip() == str(tmp_path)
    assert len(list((tmp_path / HACS.feature_folder).glob("*.pkl"))) == 4
    with pytest.raises(ValueError, match="videos must be >= 3"):
        write_release(str(tmp_path), videos=2)
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "argparse", "dataclasses", "json", "os", "pickle", "string", "typing",
                        "warnings", "zipfile", "numpy", "torch"}  # no toolbox (mmengine, mmaction, pandas, ...)
