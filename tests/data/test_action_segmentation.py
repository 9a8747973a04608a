"""MS-TCN's release layout (ssm_plugins.data.action_segmentation): the generated release reads back as written,
the sample rate and length rules of the released code, bad files named in the error, and MS-TCN's metrics on
worked examples (segments, edit score, F1 at IoU thresholds, accuracy)."""
import numpy as np
import pytest
import torch

from ssm_plugins.data.action_segmentation import (SEGMENTATION_DATASETS, ActionSegmentationVideos,
                                                  SegmentationMetrics, edit_score, f1_counts, read_mapping, segments,
                                                  write_release)


@pytest.fixture(scope="module")
def gtea(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ms-tcn-data")
    write_release(str(folder), "gtea", videos=2, frames=(30, 50), feature_dim=2048)
    return folder


def test_generated_release_has_the_layout_and_reads_back(gtea):
    root = gtea / "gtea"
    assert read_mapping(str(root / "mapping.txt")) == list(SEGMENTATION_DATASETS["gtea"].actions)
    assert (root / "splits" / "test.split2.bundle").read_text().split() == ["S2_Cheese_C1.txt", "S2_Coffee_C1.txt"]
    train = ActionSegmentationVideos(str(gtea), "gtea", split=2)
    assert len(train) == 6 and not any(v.startswith("S2_") for v in train.videos)
    raw = np.load(root / "features" / "S1_Cheese_C1.npy")
    assert raw.dtype == np.float32 and raw.shape[0] == 2048  # (feature_dim, frames) as released
    features, labels = train[train.videos.index("S1_Cheese_C1")]
    names = (root / "groundTruth" / "S1_Cheese_C1.txt").read_text().split()
    assert features.shape == (raw.shape[1], 2048) and torch.equal(features, torch.from_numpy(raw.T))
    assert [train.actions[i] for i in labels] == names


def test_sample_rate_and_the_shorter_of_features_and_labels(gtea, tmp_path):
    root = tmp_path / "gtea"
    write_release(str(tmp_path), "gtea", videos=1, frames=(21, 21), feature_dim=8)
    video = root / "features" / "S1_Cheese_C1.npy"
    np.save(video, np.load(video)[:, :20])  # one frame fewer than the ground truth: the shorter one counts
    videos = ActionSegmentationVideos(str(tmp_path), "gtea", split=2, sample_rate=3)
    features, labels = videos[videos.videos.index("S1_Cheese_C1")]
    assert features.shape == (7, 8) and labels.shape == (7,)  # frames 0, 3, ..., 18 of 20
    full = ActionSegmentationVideos(str(tmp_path), "gtea", split=2, sample_rate=3, full_rate_labels=True)
    assert full[full.videos.index("S1_Cheese_C1")][1].shape == (20,)
    assert ActionSegmentationVideos(str(tmp_path), "gtea", split=1).sample_rate == 1  # GTEA: every frame


def test_bad_release_files_are_named(tmp_path):
    root = tmp_path / "gtea"
    write_release(str(tmp_path), "gtea", videos=2, frames=(10, 12), feature_dim=4)
    with pytest.raises(ValueError, match="split must be 1 .. 4 for gtea"):
        ActionSegmentationVideos(str(tmp_path), "gtea", split=5)
    with pytest.raises(ValueError, match="dataset must be one of"):
        ActionSegmentationVideos(str(tmp_path), "gtae", split=1)
    with pytest.raises(FileNotFoundError, match="50salads.*mapping.txt.*release layout"):
        ActionSegmentationVideos(str(tmp_path), "50salads", split=1)
    (root / "groundTruth" / "S1_Cheese_C1.txt").write_text("take\nwhisk\n")
    videos = ActionSegmentationVideos(str(tmp_path), "gtea", split=2)
    with pytest.raises(ValueError, match="S1_Cheese_C1.txt, line 2: action 'whisk' is not in mapping.txt"):
        videos[videos.videos.index("S1_Cheese_C1")]
    np.save(root / "features" / "S1_Coffee_C1.npy", np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="S1_Coffee_C1.npy: expected a \\(feature_dim, frames\\) array"):
        videos[videos.videos.index("S1_Coffee_C1")]
    (root / "mapping.txt").write_text("0 take\n2 open\n")
    with pytest.raises(ValueError, match="mapping.txt: the indices must be 0 .. 1"):
        ActionSegmentationVideos(str(tmp_path), "gtea", split=1)


def test_segments_leave_out_the_background():
    frames = ["a", "a", "background", "b", "b", "b", "a"]
    assert segments(frames) == [("a", 0, 2), ("b", 3, 6), ("a", 6, 7)]
    assert segments([]) == [] and segments(["background"] * 3) == []


def test_edit_score_worked_examples():
    truth = list("aaabbbccc")
    assert edit_score(truth, truth) == 100.0
    # P = a b a c against Y = a b c: one insertion -> (1 - 1/4) x 100
    assert edit_score(list("aabbaacc"), truth) == pytest.approx(75.0)
    # background runs do not count: P = a c against Y = a b c: one deletion -> (1 - 1/3) x 100
    assert edit_score(["a", "a", "background", "background", "c"], list("aabbc")) == pytest.approx(200 / 3)


def test_f1_counts_worked_examples():
    truth = ["a"] * 10 + ["b"] * 10  # a [0, 10), b [10, 20)
    # a [0, 6): IoU 0.6; b [6, 20): IoU 10/14 = 0.714
    predicted = ["a"] * 6 + ["b"] * 14
    assert f1_counts(predicted, truth, 0.5) == (2, 0, 0)
    assert f1_counts(predicted, truth, 0.65) == (1, 1, 1)  # a falls below 0.65, its truth is then missed
    # two predicted a's [0, 4), [5, 10) on one true a: the first (IoU 0.4 < 0.5) misses, the second (0.5) hits
    predicted = ["a"] * 4 + ["c"] + ["a"] * 5 + ["b"] * 10
    assert f1_counts(predicted, truth, 0.5) == (2, 2, 0)  # hits a, b; false: the first a and c
    assert f1_counts(predicted, truth, 0.1) == (2, 2, 0)  # the first a hits a first; the second a finds it taken


def test_segmentation_metrics_accumulate_over_videos():
    metrics = SegmentationMetrics()
    metrics.append(["a"] * 6 + ["b"] * 14, ["a"] * 10 + ["b"] * 10)  # 16 of 20 frames, tp 2 at 50
    metrics.append(["c"] * 10, ["c"] * 5 + ["background"] * 5)  # 5 of 10; c [0, 10) on c [0, 5): IoU 0.5
    out = metrics.summarize()
    assert out["acc"] == pytest.approx(100 * 21 / 30)
    assert out["edit"] == pytest.approx(100.0)
    assert out["f1@50"] == pytest.approx(100.0) and out["f1@10"] == pytest.approx(100.0)
    metrics.append(["a"] * 10, ["b"] * 10)  # a false positive and a false negative: tp 3, fp 1, fn 1
    assert metrics.summarize()["f1@25"] == pytest.approx(75.0)
    with pytest.raises(ValueError, match="predicted has 2 frames but truth has 3"):
        metrics.append([0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="no videos"):
        SegmentationMetrics().summarize()
