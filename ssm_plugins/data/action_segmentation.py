"""Temporal action segmentation data as MS-TCN released them (GTEA, 50Salads, Breakfast), their evaluation, and a
generator of small releases in exactly that layout.

The layout of MS-TCN's ``data.zip`` (Farha & Gall, CVPR 2019, yabufarha/ms-tcn; ASFormer and the Video Mamba Suite
read the same files)::

    <data_folder>/<dataset>/mapping.txt                          "<index> <action>" per line, index 0 .. C-1
    <data_folder>/<dataset>/splits/{train,test}.split<k>.bundle   one ground-truth file name per line
    <data_folder>/<dataset>/features/<video>.npy                  float32 (2048, T): I3D features, one column a frame
    <data_folder>/<dataset>/groundTruth/<video>.txt               one action name per frame (T lines)

Reading follows that code: features are taken every ``sample_rate``-th frame (50Salads: 2, GTEA and Breakfast:
1), the labels the same frames; where a feature file and its ground truth differ in length the shorter one counts
(ASFormer's batch generator does the same). Evaluation is MS-TCN's ``eval.py``: frame accuracy over all frames of
all test videos; the segmental edit score (normalised Levenshtein distance between the sequences of segment
labels, mean over videos) and F1@{10, 25, 50} (a predicted segment is a true positive when its IoU with a not yet
matched ground-truth segment of the same action is at least the threshold; counts summed over the videos), both
on segments without the ``background`` class. Predictions made at ``sample_rate`` are repeated back to the full
frame rate before they are compared with the ground-truth file. MS-TCN's evaluation is a script in its repository,
not a package, so it is written here (tests: worked examples).

Generating (``write_release``, also ``python -m ssm_plugins.data.action_segmentation --dataset gtea --out DIR``):
the dataset's file names (GTEA: subjects S1-S4 x its seven recipes, split k testing subject k), mapping, bundles,
(2048, T) float32 features and per-frame labels, with fewer and shorter videos. Each video is a sequence of
action segments; a frame's features are its action's prototype vector plus noise (deterministic in ``seed``).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

__all__ = ["SEGMENTATION_DATASETS", "ActionSegmentationVideos", "SegmentationMetrics", "edit_score", "f1_counts",
           "load_video", "read_bundle", "read_mapping", "segments", "write_release"]

BACKGROUND = "background"


@dataclass(frozen=True)
class SegmentationDataset:
    """One dataset of the release: its splits, the frame step of its features and its action names."""
    splits: int
    sample_rate: int
    actions: Tuple[str, ...]


SEGMENTATION_DATASETS: Dict[str, SegmentationDataset] = {
    "gtea": SegmentationDataset(4, 1, ("take", "open", "pour", "close", "shake", "scoop", "stir", "put", "fold",
                                       "spread", BACKGROUND)),
    "50salads": SegmentationDataset(5, 2, ("cut_tomato", "place_tomato_into_bowl", "cut_cheese",
                                           "place_cheese_into_bowl", "cut_lettuce", "place_lettuce_into_bowl",
                                           "add_salt", "add_vinegar", "add_oil", "add_pepper", "mix_dressing",
                                           "peel_cucumber", "cut_cucumber", "place_cucumber_into_bowl",
                                           "add_dressing", "mix_ingredients", "serve_salad_onto_plate",
                                           "action_start", "action_end")),
    "breakfast": SegmentationDataset(4, 1, ("SIL", "pour_cereals", "pour_milk", "stir_cereals", "take_bowl",
                                            "pour_coffee", "take_cup", "spoon_sugar", "stir_coffee", "pour_sugar",
                                            "pour_oil", "crack_egg", "add_saltnpepper", "fry_egg", "take_plate",
                                            "put_egg2plate", "take_eggs", "butter_pan", "take_knife", "cut_orange",
                                            "squeeze_orange", "pour_juice", "take_glass", "take_squeezer",
                                            "spoon_powder", "stir_milk", "spoon_flour", "stir_dough",
                                            "pour_dough2pan", "fry_pancake", "put_pancake2plate", "pour_flour",
                                            "cut_fruit", "put_fruit2bowl", "peel_fruit", "stir_fruit", "cut_bun",
                                            "smear_butter", "take_topping", "put_toppingOnTop", "put_bunTogether",
                                            "take_butter", "stir_egg", "pour_egg2pan", "stirfry_egg", "add_teabag",
                                            "pour_water", "stir_tea")),
}
_GTEA_RECIPES = ("Cheese", "Coffee", "CofHoney", "Hotdog", "Pealate", "Peanut", "Tea")


def _dataset(name: str) -> SegmentationDataset:
    if name not in SEGMENTATION_DATASETS:
        raise ValueError(f"dataset must be one of {sorted(SEGMENTATION_DATASETS)}, got {name!r}")
    return SEGMENTATION_DATASETS[name]


def _lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file (expected MS-TCN's release layout: <data_folder>/<dataset>/"
                                f"mapping.txt, splits/, features/, groundTruth/)")
    with open(path) as f:
        return [line.strip() for line in f.read().split("\n") if line.strip()]


def read_mapping(path: str) -> List[str]:
    """The action names of ``mapping.txt`` in index order ("<index> <name>" per line, indices 0 .. C-1)."""
    pairs = {}
    for number, line in enumerate(_lines(path), 1):
        fields = line.split()
        if len(fields) != 2 or not fields[0].isdigit():
            raise ValueError(f"{path}, line {number}: expected '<index> <action>', got {line!r}")
        pairs[int(fields[0])] = fields[1]
    if sorted(pairs) != list(range(len(pairs))):
        raise ValueError(f"{path}: the indices must be 0 .. {len(pairs) - 1}, got {sorted(pairs)}")
    return [pairs[i] for i in range(len(pairs))]


def read_bundle(path: str) -> List[str]:
    """The videos of a split file (``train.split1.bundle``): their names without the ``.txt``."""
    return [os.path.splitext(line)[0] for line in _lines(path)]


def load_video(root: str, video: str, actions: Sequence[str], sample_rate: int = 1,
               full_rate_labels: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """One video of ``root`` (``<data_folder>/<dataset>``): features (T', D) float32 and labels (T',) int64 at every
    ``sample_rate``-th frame (``full_rate_labels``: the labels of every frame instead, for evaluation)."""
    feature_file = os.path.join(root, "features", f"{video}.npy")
    if not os.path.isfile(feature_file):
        raise FileNotFoundError(f"{feature_file}: no such file (the features of {video!r}, a (D, T) .npy)")
    features = np.load(feature_file)
    if features.ndim != 2:
        raise ValueError(f"{feature_file}: expected a (feature_dim, frames) array, got shape {features.shape}")
    gt_file = os.path.join(root, "groundTruth", f"{video}.txt")
    index = {name: i for i, name in enumerate(actions)}
    labels = []
    for number, name in enumerate(_lines(gt_file), 1):
        if name not in index:
            raise ValueError(f"{gt_file}, line {number}: action {name!r} is not in mapping.txt")
        labels.append(index[name])
    frames = min(features.shape[1], len(labels))
    x = torch.from_numpy(np.ascontiguousarray(features[:, :frames:sample_rate].T, dtype=np.float32))
    y = torch.tensor(labels[:frames] if full_rate_labels else labels[:frames:sample_rate], dtype=torch.long)
    return x, y


class ActionSegmentationVideos(torch.utils.data.Dataset):
    """The videos of one split and stage: items (features (T', D) float32, labels (T',) int64), read lazily.

    Args:
        data_folder: the folder holding ``<dataset>/`` (MS-TCN's ``data/``).
        dataset: 'gtea', '50salads' or 'breakfast'. split: 1 .. the dataset's split count. stage: 'train' | 'test'.
        sample_rate: the frame step [the dataset's: 50Salads 2, else 1].
        full_rate_labels: labels of every frame (the test's ground truth) instead of the sampled ones.
    """

    def __init__(self, data_folder: str, dataset: str, split: int, stage: str = "train",
                 sample_rate: Optional[int] = None, full_rate_labels: bool = False):
        info = _dataset(dataset)
        if not isinstance(split, int) or not 1 <= split <= info.splits:
            raise ValueError(f"split must be 1 .. {info.splits} for {dataset}, got {split!r}")
        if stage not in ("train", "test"):
            raise ValueError(f"stage must be 'train' or 'test', got {stage!r}")
        self.root = os.path.join(data_folder, dataset)
        self.sample_rate = info.sample_rate if sample_rate is None else int(sample_rate)
        if self.sample_rate < 1:
            raise ValueError(f"sample_rate must be >= 1, got {sample_rate!r}")
        self.actions = read_mapping(os.path.join(self.root, "mapping.txt"))
        self.videos = read_bundle(os.path.join(self.root, "splits", f"{stage}.split{split}.bundle"))
        self.full_rate_labels = full_rate_labels

    def __len__(self) -> int:
        return len(self.videos)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return load_video(self.root, self.videos[i], self.actions, self.sample_rate, self.full_rate_labels)


# ---- evaluation: MS-TCN's eval.py -----------------------------------------------------------------------------------

def segments(labels: Sequence, background: Sequence = (BACKGROUND,)) -> List[Tuple[object, int, int]]:
    """The runs of equal labels of a frame sequence as (label, start, end) with end exclusive, without runs whose
    label is in ``background``."""
    labels = list(labels)
    out, start = [], 0
    for t in range(1, len(labels) + 1):
        if t == len(labels) or labels[t] != labels[start]:
            if labels[start] not in background:
                out.append((labels[start], start, t))
            start = t
    return out


def _levenshtein(p: Sequence, y: Sequence) -> int:
    row = list(range(len(y) + 1))
    for i, a in enumerate(p, 1):
        previous, row[0] = row[0], i
        for j, b in enumerate(y, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (a != b))
    return row[-1]


def edit_score(predicted: Sequence, truth: Sequence, background: Sequence = (BACKGROUND,)) -> float:
    """The segmental edit score of one video, in %: (1 - Levenshtein(P, Y) / max(|P|, |Y|)) x 100 over the segment
    label sequences P, Y (100 when both are empty)."""
    p = [s[0] for s in segments(predicted, background)]
    y = [s[0] for s in segments(truth, background)]
    if not p and not y:
        return 100.0
    return (1.0 - _levenshtein(p, y) / max(len(p), len(y))) * 100.0


def f1_counts(predicted: Sequence, truth: Sequence, overlap: float,
              background: Sequence = (BACKGROUND,)) -> Tuple[int, int, int]:
    """(true positives, false positives, false negatives) of one video at IoU threshold ``overlap``: each predicted
    segment in order is matched to the ground-truth segment of the same label with the highest IoU; a hit when that
    IoU >= overlap and the ground-truth segment is not matched yet."""
    p, y = segments(predicted, background), segments(truth, background)
    hits = [False] * len(y)
    tp = fp = 0
    for label, start, end in p:
        best, best_iou = None, -1.0
        for j, (y_label, y_start, y_end) in enumerate(y):
            if y_label != label:
                continue
            inter = max(0, min(end, y_end) - max(start, y_start))
            iou = inter / (max(end, y_end) - min(start, y_start))
            if iou > best_iou:
                best, best_iou = j, iou
        if best is not None and best_iou >= overlap and not hits[best]:
            tp, hits[best] = tp + 1, True
        else:
            fp += 1
    return tp, fp, len(y) - sum(hits)


class SegmentationMetrics:
    """Accuracy, edit score and F1@{10, 25, 50} (in %) over the videos appended, as MS-TCN's eval.py reports them."""

    overlaps = (0.10, 0.25, 0.50)

    def __init__(self, background: Sequence = (BACKGROUND,)):
        self.background = tuple(background)
        self.correct = self.frames = 0
        self.edits: List[float] = []
        self.counts = {o: [0, 0, 0] for o in self.overlaps}

    def append(self, predicted: Sequence, truth: Sequence) -> None:
        """One video's predicted and true labels per frame (the same length; names or indices)."""
        predicted, truth = list(predicted), list(truth)
        if len(predicted) != len(truth):
            raise ValueError(f"predicted has {len(predicted)} frames but truth has {len(truth)}")
        self.correct += sum(a == b for a, b in zip(predicted, truth))
        self.frames += len(truth)
        self.edits.append(edit_score(predicted, truth, self.background))
        for o in self.overlaps:
            for k, n in enumerate(f1_counts(predicted, truth, o, self.background)):
                self.counts[o][k] += n

    def summarize(self) -> Dict[str, float]:
        if not self.frames:
            raise ValueError("no videos were appended")
        out = {"acc": 100.0 * self.correct / self.frames, "edit": float(np.mean(self.edits))}
        for o, (tp, fp, fn) in self.counts.items():
            precision = tp / (tp + fp) if tp + fp else 0.0
            recall = tp / (tp + fn) if tp + fn else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            out[f"f1@{round(100 * o)}"] = 100.0 * f1
        return out


# ---- generated releases ---------------------------------------------------------------------------------------------

def _video_names(dataset: str, videos: int) -> List[List[str]]:
    """Video names grouped by test split: GTEA's subjects S1..S4 x recipes; elsewhere rgb-/P-style numbered ones."""
    info = _dataset(dataset)
    if dataset == "gtea":
        return [[f"S{s}_{r}_C1" for r in _GTEA_RECIPES[:videos]] for s in range(1, info.splits + 1)]
    if dataset == "50salads":
        return [[f"rgb-{2 * (s * videos + v) + 1:02d}-1" for v in range(videos)] for s in range(info.splits)]
    return [[f"P{s * videos + v + 3:02d}_cam01_P{s * videos + v + 3:02d}_cereals" for v in range(videos)]
            for s in range(info.splits)]


def write_release(out: str, dataset: str = "gtea", videos: int = 2, frames: Tuple[int, int] = (80, 160),
                  feature_dim: int = 2048, noise: float = 1.0, seed: int = 0) -> str:
    """Write ``<out>/<dataset>/`` in MS-TCN's layout with ``videos`` videos per split group (GTEA: per subject) of
    ``frames`` (low, high) frames each; returns that folder. Features: the frame's action prototype (one random
    unit-variance vector per action) plus ``noise`` x N(0, 1)."""
    info = _dataset(dataset)
    rng = np.random.default_rng(seed)
    root = os.path.join(out, dataset)
    for sub in ("features", "groundTruth", "splits"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    with open(os.path.join(root, "mapping.txt"), "w") as f:
        f.write("".join(f"{i} {name}\n" for i, name in enumerate(info.actions)))
    prototypes = rng.standard_normal((len(info.actions), feature_dim)).astype(np.float32)
    groups = _video_names(dataset, videos)
    for names in groups:
        for name in names:
            length = int(rng.integers(frames[0], frames[1] + 1))
            cuts = np.sort(rng.choice(np.arange(1, length), size=min(length - 1, int(rng.integers(3, 8))),
                                      replace=False))
            labels = np.zeros(length, dtype=np.int64)
            for start, end in zip(np.r_[0, cuts], np.r_[cuts, length]):
                labels[start:end] = rng.integers(len(info.actions))
            features = prototypes[labels] + noise * rng.standard_normal((length, feature_dim)).astype(np.float32)
            np.save(os.path.join(root, "features", f"{name}.npy"), np.ascontiguousarray(features.T))
            with open(os.path.join(root, "groundTruth", f"{name}.txt"), "w") as f:
                f.write("".join(f"{info.actions[k]}\n" for k in labels))
    for k in range(1, info.splits + 1):
        test = groups[k - 1]
        train = [n for g, names in enumerate(groups) if g != k - 1 for n in names]
        for stage, names in (("train", train), ("test", test)):
            with open(os.path.join(root, "splits", f"{stage}.split{k}.bundle"), "w") as f:
                f.write("".join(f"{n}.txt\n" for n in names))
    return root


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write <dataset>/ into")
    parser.add_argument("--dataset", default="gtea", choices=sorted(SEGMENTATION_DATASETS))
    parser.add_argument("--videos", type=int, default=2, help="videos per split group (GTEA: per subject)")
    parser.add_argument("--frames", type=int, nargs=2, default=(80, 160), metavar=("LOW", "HIGH"))
    parser.add_argument("--feature-dim", type=int, default=2048)
    parser.add_argument("--noise", type=float, default=1.0, help="standard deviation of the frames' noise (the "
                        "action prototypes have unit variance per feature)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_release(args.out, args.dataset, args.videos, tuple(args.frames), args.feature_dim, args.noise,
                        args.seed))


if __name__ == "__main__":
    main()
