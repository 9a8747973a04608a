"""Temporal action localisation data as ActionFormer-family code reads the HACS Segments release, its evaluation
(ActivityNet's detection mAP), and a generator of small releases in exactly that layout.

The layout (MambaMixer Table 8: ActionFormer on HACS Segment; the HACS configs of ActionFormer-family code)::

    <data_folder>/annotations/HACS_segments_v1.1.1_slowfast.json   ActivityNet format: {"database": {"<video id>":
        {"subset": "training" | "validation" | "testing", "duration": 92.166667 or "92.166667", "url": "...",
         "annotations": [{"label": "Dodgeball", "segment": [5.4, 11.6]}, ...]}}} (testing: no annotations)
    <data_folder>/slowfast_features/<video id>.pkl   TCANet's SlowFast features (input_dim 2304, feat_stride 8,
        num_frames 32, 15 fps): a pickled dict {"slow_feature": (1, 2048, T), "fast_feature": (1, 256, T) (torch
        tensors or numpy arrays), "feature_frames": int}; features cat([slow, fast], dim=1).squeeze(0), transposed

``json_file`` / ``feature_folder`` / ``feature_ext`` (the recipe's ``--json_file/--feature_folder/--feature_ext``)
select other releases, e.g. ActionFormer's ``.npy`` features (float32 (T, C); ``.npz`` with ``feats`` (C, T) too).
Pickles execute code when loaded (torch tensors need torch to unpickle): load only files you trust. As that code
reads them, a segment with end <= start is dropped, exact duplicates count once, ``label_id`` is ignored; the
(T, C) features are resized linearly to ``seq_len`` steps (ActionFormer's fixed-length protocol for ActivityNet-
style data: F.interpolate(mode="linear", align_corners=False)), segments put on that grid (t x seq_len /
duration, clipped to [0, seq_len]). Videos without a feature file (HACS misses a few) are skipped with a warning.

Evaluation is ActivityNet's detection mAP (activitynet/ActivityNet Evaluation/eval_detection.py: a script in a
repository, not a PyPI package; mmaction2's copy would add decord / opencv to our lock for one function), written
here (tests: worked examples): per class and tIoU threshold, predictions over all videos by descending score; each
is a true positive when a not yet matched ground truth of its class and video has tIoU >= the threshold (taken in
decreasing tIoU order, as ActivityNet does), else a false positive; AP is ``interpolated_prec_rec``'s interpolated
AP, mAP the mean over the classes with ground truth.

Generating (``write_release``, also ``python -m ssm_plugins.data.action_localization --out DIR``): that JSON and
those .pkl files, with YouTube-style ids, HACS class names, 1-3 non-overlapping actions per video on a background;
a feature step is its action's (or the background's) prototype plus noise (deterministic in ``seed``).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import string
import warnings
import zipfile
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["LOCALIZATION_DATASETS", "ActionLocalizationVideos", "LocalizationMetrics", "average_precision",
           "load_features", "read_annotations", "tiou", "write_release"]

THRESHOLDS = tuple(round(0.5 + 0.05 * k, 2) for k in range(10))
FPS, FEAT_STRIDE = 15, 8  # TCANet's SlowFast extraction: one feature step every 8 frames at 15 fps


@dataclass(frozen=True)
class LocalizationDataset:
    """One release: its annotation JSON and feature folder (relative to the data folder), feature files' extension
    and class count."""
    json_file: str
    feature_folder: str
    feature_ext: str
    num_classes: int


LOCALIZATION_DATASETS: Dict[str, LocalizationDataset] = {
    "hacs": LocalizationDataset("annotations/HACS_segments_v1.1.1_slowfast.json", "slowfast_features", ".pkl", 200),
}
HACS_CLASSES = ("Archery", "Ballet", "Bathing dog", "Belly dance", "Breakdancing", "Brushing hair", "Bungee jumping",
                "Cheerleading", "Chopping wood", "Clean and jerk", "Cleaning windows", "Cricket", "Cumbia",
                "Discus throw", "Dodgeball", "Doing karate", "Doing kickboxing", "Fixing bicycle", "Hammer throw",
                "High jump", "Hopscotch", "Javelin throw", "Kayaking", "Long jump", "Mowing the lawn", "Paintball",
                "Playing bagpipes", "Playing squash", "Pole vault", "Rock climbing", "Sailing", "Shot put",
                "Shoveling snow", "Skateboarding", "Snatch", "Tai chi", "Tango", "Triple jump", "Tumbling",
                "Walking the dog", "Washing dishes", "Windsurfing", "Zumba")


def _dataset(name: str) -> LocalizationDataset:
    if name not in LOCALIZATION_DATASETS:
        raise ValueError(f"dataset must be one of {sorted(LOCALIZATION_DATASETS)}, got {name!r}")
    return LOCALIZATION_DATASETS[name]


def read_annotations(json_file: str) -> dict:
    """The parsed ActivityNet-format JSON (``{"database": {video id: {"subset", "duration", "annotations"}}}``),
    checked: a malformed file raises ValueError naming it (and the video)."""
    if not os.path.isfile(json_file):
        raise FileNotFoundError(f"{json_file}: no such file (expected the ActivityNet-format annotations, "
                                f"e.g. <data_folder>/{LOCALIZATION_DATASETS['hacs'].json_file})")
    try:
        with open(json_file) as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{json_file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("database"), dict):
        raise ValueError(f"{json_file}: expected an object with a 'database' object (ActivityNet format)")
    for video, entry in data["database"].items():
        if not _valid_entry(entry):
            raise ValueError(f"{json_file}, video {video!r}: expected {{'subset': str, 'duration': seconds > 0, "
                             f"'annotations': [{{'label': str, 'segment': [start, end]}}, ...]}}")
    return data


def _valid_entry(entry) -> bool:
    try:
        acts = entry.get("annotations", [])
        return (isinstance(entry["subset"], str) and float(entry["duration"]) > 0 and isinstance(acts, list)
                and all(isinstance(a["label"], str) and len(a["segment"]) == 2
                        and not np.isnan([float(t) for t in a["segment"]]).any() for a in acts))
    except (AttributeError, KeyError, TypeError, ValueError):
        return False


def _segments(entry: dict) -> List[Tuple[str, float, float]]:
    """An entry's (label, start, end) in seconds without segments of end <= start and exact duplicates."""
    out: List[Tuple[str, float, float]] = []
    for act in entry.get("annotations", []):
        item = (act["label"], float(act["segment"][0]), float(act["segment"][1]))
        if item[2] > item[1] and item not in out:
            out.append(item)
    return out


def _array(x, name: str, path: str) -> np.ndarray:
    x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if x.ndim != 3 or x.shape[0] != 1:
        raise ValueError(f"{path}: {name} must have shape (1, channels, T), got {x.shape}")
    return x


def load_features(path: str) -> torch.Tensor:
    """One video's features (T, C) float32 from a SlowFast ``.pkl`` (slow + fast channels), ``.npy`` (T, C) or
    ``.npz`` (``feats`` (C, T)). Pickles run code on load: only trusted files."""
    ext = os.path.splitext(path)[1]
    if ext == ".pkl":
        if zipfile.is_zipfile(path):
            data = torch.load(path, map_location="cpu", weights_only=False)
        else:
            with open(path, "rb") as f:
                data = pickle.load(f)
        if not isinstance(data, dict) or not {"slow_feature", "fast_feature"} <= set(data):
            raise ValueError(f"{path}: expected a dict with 'slow_feature' and 'fast_feature' (SlowFast features)")
        slow, fast = _array(data["slow_feature"], "slow_feature", path), _array(data["fast_feature"], "fast_feature",
                                                                                path)
        if slow.shape[2] != fast.shape[2]:
            raise ValueError(f"{path}: slow_feature has {slow.shape[2]} steps but fast_feature {fast.shape[2]}")
        x = np.concatenate([slow, fast], axis=1)[0].T
    elif ext == ".npy":
        x = np.load(path)
    elif ext == ".npz":
        x = np.load(path)["feats"].T
    else:
        raise ValueError(f"{path}: feature files must be .pkl, .npy or .npz")
    if x.ndim != 2 or not x.shape[0]:
        raise ValueError(f"{path}: expected (T, channels) features with T >= 1, got shape {x.shape}")
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


class ActionLocalizationVideos(torch.utils.data.Dataset):
    """The videos of one subset with a feature file: dicts (video, duration, features (seq_len, C), segments
    (K, 2) on the feature grid, labels (K,) int64 into ``classes``), features read lazily.

    Args:
        data_folder: the folder the json / feature paths are relative to. subset: 'training' | 'validation' |
            'testing'. dataset: the defaults' release ('hacs'). seq_len: the fixed number of steps [192].
        json_file, feature_folder, feature_ext: another release's files [the dataset's].
        classes: the label names in index order [sorted labels of the JSON's training subset].
    """

    def __init__(self, data_folder: str, subset: str = "training", dataset: str = "hacs", seq_len: int = 192,
                 json_file: Optional[str] = None, feature_folder: Optional[str] = None,
                 feature_ext: Optional[str] = None, classes: Optional[Sequence[str]] = None):
        info = _dataset(dataset)
        if not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len must be an int >= 1, got {seq_len!r}")
        self.root, self.seq_len = data_folder, seq_len
        self.json_file = os.path.join(data_folder, json_file or info.json_file)
        self.feature_folder = os.path.join(data_folder, feature_folder or info.feature_folder)
        ext = feature_ext or info.feature_ext
        self.feature_ext = ext if ext.startswith(".") else "." + ext
        self.database = read_annotations(self.json_file)["database"]
        subsets = sorted({entry["subset"] for entry in self.database.values()})
        if subset not in subsets:
            raise ValueError(f"{self.json_file}: no video in subset {subset!r} (subsets: {subsets})")
        if classes is None:
            classes = sorted({s[0] for e in self.database.values() if e["subset"] == "training" for s in _segments(e)})
            if not classes:
                raise ValueError(f"{self.json_file}: no labelled training video to take the classes from; pass "
                                 f"classes=")
        self.classes = tuple(classes)
        self._index = {name: i for i, name in enumerate(self.classes)}
        wanted = sorted(v for v, e in self.database.items() if e["subset"] == subset)
        self.videos = [v for v in wanted if os.path.isfile(self._feature_file(v))]
        if len(self.videos) < len(wanted):
            warnings.warn(f"{len(wanted) - len(self.videos)} of {len(wanted)} {subset} videos have no feature file "
                          f"in {self.feature_folder} (<video id>{self.feature_ext}); they are skipped")

    def _feature_file(self, video: str) -> str:
        return os.path.join(self.feature_folder, video + self.feature_ext)

    def __len__(self) -> int:
        return len(self.videos)

    def ground_truth(self) -> Dict[str, List[Tuple[str, float, float]]]:
        """{video: [(label, start, end) in seconds]} of the kept videos, for ``LocalizationMetrics``."""
        return {v: _segments(self.database[v]) for v in self.videos}

    def __getitem__(self, i: int) -> dict:
        video = self.videos[i]
        duration = float(self.database[video]["duration"])
        x = load_features(self._feature_file(video))
        x = F.interpolate(x.T[None], size=self.seq_len, mode="linear", align_corners=False)[0].T.contiguous()
        segments, labels = [], []
        for label, start, end in _segments(self.database[video]):
            if label not in self._index:
                raise ValueError(f"{self.json_file}, video {video!r}: label {label!r} is not one of the "
                                 f"{len(self.classes)} classes")
            start, end = (min(max(t * self.seq_len / duration, 0.0), self.seq_len) for t in (start, end))
            if end > start:
                segments.append((start, end))
                labels.append(self._index[label])
        return {"video": video, "duration": duration, "features": x,
                "segments": torch.tensor(segments, dtype=torch.float32).reshape(-1, 2),
                "labels": torch.tensor(labels, dtype=torch.long)}

    @staticmethod
    def collate(batch: List[dict]) -> dict:
        """Features stacked (B, seq_len, C); segments, labels, video and duration as lists."""
        out = {k: [item[k] for item in batch] for k in ("video", "duration", "segments", "labels")}
        out["features"] = torch.stack([item["features"] for item in batch])
        return out


# ---- evaluation: ActivityNet's eval_detection.py --------------------------------------------------------------------

def tiou(segment, segments) -> np.ndarray:
    """The temporal IoU of one [start, end] with each row of ``segments`` (N, 2)."""
    s, c = np.asarray(segment, dtype=float), np.asarray(segments, dtype=float).reshape(-1, 2)
    inter = (np.minimum(s[1], c[:, 1]) - np.maximum(s[0], c[:, 0])).clip(0)
    union = (c[:, 1] - c[:, 0]) + (s[1] - s[0]) - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _interpolated_ap(precision: np.ndarray, recall: np.ndarray) -> float:
    p, r = np.concatenate([[0.0], precision, [0.0]]), np.concatenate([[0.0], recall, [1.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    idx = np.nonzero(r[1:] != r[:-1])[0] + 1
    return float(np.sum((r[idx] - r[idx - 1]) * p[idx]))


def average_precision(ground_truth: Mapping[str, Sequence], predictions: Sequence[Tuple[str, float, float, float]],
                      thresholds: Sequence[float] = THRESHOLDS) -> np.ndarray:
    """ActivityNet's AP (fractions, one per threshold) of one class: ``ground_truth`` {video: (M, 2) segments},
    ``predictions`` (video, start, end, score); 0 without ground truth or predictions."""
    thresholds = np.asarray(thresholds, dtype=float).reshape(-1)
    gt = {v: np.asarray(g, dtype=float).reshape(-1, 2) for v, g in ground_truth.items()}
    positives = sum(len(g) for g in gt.values())
    if not positives or not len(predictions):
        return np.zeros(len(thresholds))
    order = np.argsort(-np.asarray([p[3] for p in predictions], dtype=float), kind="stable")
    tp = np.zeros((len(thresholds), len(order)))
    matched = {v: np.zeros((len(thresholds), len(g)), dtype=bool) for v, g in gt.items()}
    for i, k in enumerate(order):
        video, start, end = predictions[k][:3]
        if video not in gt or not len(gt[video]):
            continue
        overlaps = tiou((start, end), gt[video])
        ranked = np.argsort(-overlaps, kind="stable")
        for j, threshold in enumerate(thresholds):
            for g in ranked:
                if overlaps[g] < threshold:
                    break
                if not matched[video][j, g]:
                    matched[video][j, g], tp[j, i] = True, 1
                    break
    tp_sum, fp_sum = np.cumsum(tp, axis=1), np.cumsum(1 - tp, axis=1)
    recall, precision = tp_sum / positives, tp_sum / (tp_sum + fp_sum)
    return np.array([_interpolated_ap(p, r) for p, r in zip(precision, recall)])


class LocalizationMetrics:
    """mAP at each tIoU threshold and their mean (in %) of the predictions appended, as ActivityNet reports them.

    ``ground_truth``: {video id: [(label, start, end) in seconds]} of every evaluated video. Predictions of labels
    without ground truth are not evaluated (ActivityNet's classes are the ground truth's)."""

    def __init__(self, ground_truth: Mapping[str, Sequence[Tuple[str, float, float]]],
                 thresholds: Sequence[float] = THRESHOLDS):
        self.thresholds = tuple(float(t) for t in thresholds)
        self.videos = set(ground_truth)
        self.gt: Dict[str, Dict[str, list]] = {}
        for video, items in ground_truth.items():
            for label, start, end in items:
                self.gt.setdefault(label, {}).setdefault(video, []).append((float(start), float(end)))
        self.predictions: Dict[str, list] = {}

    def append(self, video: str, segments, labels: Sequence[str], scores) -> None:
        """One video's predictions: segments (N, 2) in seconds, N label names, N scores."""
        if video not in self.videos:
            raise ValueError(f"video {video!r} is not in the ground truth")
        segments = np.asarray(segments, dtype=float).reshape(-1, 2)
        scores = np.asarray(scores, dtype=float).reshape(-1)
        if not len(segments) == len(labels) == len(scores):
            raise ValueError(f"{video}: {len(segments)} segments, {len(labels)} labels and {len(scores)} scores")
        for (start, end), label, score in zip(segments, labels, scores):
            self.predictions.setdefault(label, []).append((video, start, end, score))

    def summarize(self) -> Dict[str, float]:
        if not self.gt:
            raise ValueError("the ground truth has no segments")
        ap = np.stack([average_precision(self.gt[c], self.predictions.get(c, []), self.thresholds)
                       for c in sorted(self.gt)])
        per_threshold = 100.0 * ap.mean(axis=0)
        out = {f"mAP@{t:g}": round(float(m), 2) for t, m in zip(self.thresholds, per_threshold)}
        out["mAP"] = round(float(per_threshold.mean()), 2)
        return out


# ---- generated releases ---------------------------------------------------------------------------------------------

def write_release(out: str, dataset: str = "hacs", videos: int = 8, frames: Tuple[int, int] = (40, 120),
                  classes: int = 4, slow_dim: int = 2048, fast_dim: int = 256, seed: int = 0,
                  noise: float = 1.0) -> str:
    """Write ``<out>/<json_file>`` and ``<out>/<feature_folder>/<id>.pkl`` of the release with ``videos`` videos
    (one testing, the rest training : validation about 3 : 1) of ``frames`` (low, high) feature steps and
    ``classes`` HACS classes (each one in training); returns ``out``. A step's features: its action's prototype
    (the background has its own; unit-variance random vectors) plus ``noise`` x N(0, 1)."""
    info = _dataset(dataset)
    if videos < 3:
        raise ValueError(f"videos must be >= 3 (training, validation and testing), got {videos}")
    if frames[0] < 8 or frames[1] < frames[0]:
        raise ValueError(f"frames must be (low, high) with 8 <= low <= high, got {tuple(frames)}")
    if not 1 <= classes <= len(HACS_CLASSES):
        raise ValueError(f"classes must be 1 .. {len(HACS_CLASSES)}, got {classes}")
    rng = np.random.default_rng(seed)
    alphabet = np.array(list(string.ascii_letters + string.digits + "-_"))
    ids: List[str] = []
    while len(ids) < videos:
        name = "".join(rng.choice(alphabet, 11))
        ids += [name] if name not in ids else []
    validation = max(1, round((videos - 1) / 4))
    subsets = ["training"] * (videos - 1 - validation) + ["validation"] * validation + ["testing"]
    lengths = rng.integers(frames[0], frames[1] + 1, size=videos)
    train = [k for k, s in enumerate(subsets) if s == "training"]
    low = -(-classes // len(train))  # segments per training video so that every class is in training
    if low > 3:
        raise ValueError(f"{len(train)} training videos cannot show {classes} classes; write more videos")
    counts = [int(rng.integers(low if s == "training" else 1, 4)) if s != "testing" else 0 for s in subsets]
    n_train = sum(counts[k] for k in train)
    train_labels = iter(rng.permutation(np.r_[np.arange(classes), rng.integers(classes, size=n_train - classes)]))
    names = sorted(HACS_CLASSES[k] for k in rng.choice(len(HACS_CLASSES), classes, replace=False))
    prototypes = rng.standard_normal((classes + 1, slow_dim + fast_dim)).astype(np.float32)  # last: background
    os.makedirs(os.path.join(out, info.feature_folder), exist_ok=True)
    database = {}
    for k, (video, subset, length) in enumerate(zip(ids, subsets, lengths)):
        length = int(length)
        step = np.full(length, classes)
        cuts = np.sort(rng.choice(np.arange(1, length), size=2 * counts[k], replace=False)) if counts[k] else []
        annotations = []
        for start, end in zip(cuts[0::2], cuts[1::2]):
            label = int(next(train_labels)) if subset == "training" else int(rng.integers(classes))
            step[start:end] = label
            annotations.append({"label": names[label], "segment": [round(float(t) * FEAT_STRIDE / FPS, 2)
                                                                   for t in (start, end)]})
        entry = {"subset": subset, "duration": f"{length * FEAT_STRIDE / FPS:.6f}",
                 "url": f"https://www.youtube.com/watch?v={video}"}
        database[video] = dict(entry, annotations=annotations) if subset != "testing" else entry
        x = prototypes[step] + noise * rng.standard_normal((length, slow_dim + fast_dim)).astype(np.float32)
        x = torch.from_numpy(np.ascontiguousarray(x.T[None]))
        with open(os.path.join(out, info.feature_folder, video + ".pkl"), "wb") as f:
            pickle.dump({"slow_feature": x[:, :slow_dim].clone(), "fast_feature": x[:, slow_dim:].clone(),
                         "feature_frames": length * FEAT_STRIDE}, f)
    os.makedirs(os.path.dirname(os.path.join(out, info.json_file)), exist_ok=True)
    with open(os.path.join(out, info.json_file), "w") as f:
        json.dump({"database": database}, f)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write annotations/ and the feature folder into")
    parser.add_argument("--dataset", default="hacs", choices=sorted(LOCALIZATION_DATASETS))
    parser.add_argument("--videos", type=int, default=8, help="videos (one testing; training : validation ~3 : 1)")
    parser.add_argument("--frames", type=int, nargs=2, default=(40, 120), metavar=("LOW", "HIGH"), help="steps")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--slow-dim", type=int, default=2048)
    parser.add_argument("--fast-dim", type=int, default=256)
    parser.add_argument("--noise", type=float, default=1.0, help="standard deviation of the steps' noise (the "
                        "prototypes have unit variance per feature)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_release(args.out, args.dataset, args.videos, tuple(args.frames), args.classes, args.slow_dim,
                        args.fast_dim, args.seed, args.noise))


if __name__ == "__main__":
    main()
