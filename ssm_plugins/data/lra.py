"""Long Range Arena data: readers of the official release files, LRA's tokenisers, tiny generated files.

What a user downloads (``lra_release.gz`` of google-research/long-range-arena, IMDB's ``aclImdb_v1.tar.gz``,
CIFAR-10's python pickles) and what is read here:

* **ListOps** (``listops-1000/``): ``basic_{train,val,test}.tsv``, a header ``Source<TAB>Target``, then one
  expression per row in LRA's bracketed form, e.g. ``( ( ( [MAX 2 ) 9 ) ] )`` -> 9. Tokens: whitespace-split with
  the parentheses dropped (LRA's tokenizer keeps alphanumerics only; S4/S5 keep ``]`` as the closing token), ids
  from the fixed ``LISTOPS_VOCAB`` (17 tokens), cut at 2,000 tokens.
* **Text** (IMDB, ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``): byte-level as LRA (tfds
  ``ByteTextEncoder``: id = byte + 1, 0 is padding, 257 ids), cut at 4,000 bytes; label pos 1 / neg 0.
* **Retrieval** (AAN, ``tsv_data/new_aan_pairs.{train,eval,test}.tsv``): no header, five tab-separated fields
  ``label id1 id2 text1 text2`` (label ``0.0`` / ``1.0``), no quoting; each text byte-level (read as stored), cut at 10,000
  bytes then 4,000 as LRA's matching pipeline.
* **Pathfinder / Path-X** (``pathfinder32/curv_contour_length_14/`` and ``pathfinder128/...``): ``metadata/<k>.npy``
  -- despite the suffix, text files, one image per line ``imgs/<k> sample_<i>.png <n> <label> ...`` (fields 0-1:
  the image path, field 3: the label) -- and the grayscale PNGs ``imgs/<k>/sample_<i>.png`` (32x32 / 128x128).
  LRA ships no split: a seeded 80/10/10 train/valid/test split (the S4/S5 loaders' ``val_split``/``test_split``).
* **Image**: CIFAR-10 python pickles in grayscale (``ssm_plugins.data.seq_images.load_cifar10``).

    python -m ssm_plugins.data.lra [--out DIR]     # tiny files of every task in these formats
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ._scenes import cli, generated

__all__ = ["LISTOPS_VOCAB", "BYTE_VOCAB_SIZE", "MAX_LENGTH", "PATHFINDER_FOLDERS", "tokenize_listops",
           "encode_bytes", "read_listops", "read_imdb", "read_aan", "read_pathfinder", "split_indices",
           "TokenSequences", "TokenPairs", "PathfinderImages", "lra"]

LISTOPS_VOCAB = ("<pad>", "<unk>") + tuple(str(d) for d in range(10)) + ("[MIN", "[MAX", "[MED", "[SM", "]")
_LISTOPS_IDS = {token: i for i, token in enumerate(LISTOPS_VOCAB)}
BYTE_VOCAB_SIZE = 257  # <pad> + 256 bytes
MAX_LENGTH = {"listops": 2000, "text": 4000, "retrieval": 4000}
LISTOPS_FILES = {"train": "basic_train.tsv", "valid": "basic_val.tsv", "test": "basic_test.tsv"}
AAN_FILES = {"train": "new_aan_pairs.train.tsv", "valid": "new_aan_pairs.eval.tsv",
             "test": "new_aan_pairs.test.tsv"}
PATHFINDER_FOLDERS = {"pathfinder": "pathfinder32/curv_contour_length_14",
                      "pathx": "pathfinder128/curv_contour_length_14"}
SPLITS = ("train", "valid", "test")
NAME = "lra"


def _check_split(split: str, allowed: Sequence[str] = SPLITS) -> None:
    if split not in allowed:
        raise ValueError(f"split must be one of {tuple(allowed)}, got {split!r}")


def _locate(root: Path, name: str, subfolders: Sequence[str]) -> Path:
    for folder in (root, *(root / sub for sub in subfolders)):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"data_folder {str(root)!r} has no {name} (looked in {['.', *subfolders]})")


# ---- tokenisers -----------------------------------------------------------------------------------------------


def tokenize_listops(source: str, max_length: int = MAX_LENGTH["listops"]) -> torch.Tensor:
    """LRA ListOps source -> token ids (L,) of ``LISTOPS_VOCAB`` (parentheses dropped, unknown tokens -> <unk>)."""
    tokens = source.replace("(", " ").replace(")", " ").split()[:max_length]
    return torch.tensor([_LISTOPS_IDS.get(t, 1) for t in tokens], dtype=torch.long)


def encode_bytes(text, max_length: int) -> torch.Tensor:
    """Byte-level ids (LRA's ``ByteTextEncoder``): UTF-8 bytes + 1, so that 0 stays the padding id."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return torch.frombuffer(bytearray(data[:max_length]), dtype=torch.uint8).long() + 1


# ---- readers --------------------------------------------------------------------------------------------------


def read_listops(root: os.PathLike, split: str, max_length: int = MAX_LENGTH["listops"]
                 ) -> List[Tuple[torch.Tensor, int]]:
    """(token ids, label) of ``basic_<split>.tsv`` (found in ``root`` or ``root/listops-1000``)."""
    _check_split(split)
    path = _locate(Path(root), LISTOPS_FILES[split], ("listops-1000", "lra_release/listops-1000"))
    examples = []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:2] != ["Source", "Target"]:
            raise ValueError(f"{path}: expected the header 'Source<TAB>Target', got {header}")
        for line_no, line in enumerate(f, start=2):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 2 or not fields[1].strip().isdigit():
                raise ValueError(f"{path}:{line_no}: expected '<expression><TAB><digit>', got {line[:80]!r}")
            examples.append((tokenize_listops(fields[0], max_length), int(fields[1])))
    if not examples:
        raise ValueError(f"{path} holds no examples")
    return examples


def read_imdb(root: os.PathLike, split: str, max_length: int = MAX_LENGTH["text"]) -> List[Tuple[torch.Tensor, int]]:
    """(byte ids, label) of ``aclImdb/<split>/{neg,pos}/*.txt`` (``split``: 'train' or 'test'; sorted by name)."""
    _check_split(split, ("train", "test"))
    folder = Path(root) / "aclImdb" if (Path(root) / "aclImdb").is_dir() else Path(root)
    examples = []
    for label, polarity in enumerate(("neg", "pos")):
        directory = folder / split / polarity
        if not directory.is_dir():
            raise FileNotFoundError(f"{directory} is missing: data_folder must hold aclImdb/ (IMDB aclImdb_v1)")
        for path in sorted(directory.glob("*.txt")):
            examples.append((encode_bytes(path.read_bytes(), max_length), label))
    return examples


def read_aan(root: os.PathLike, split: str, max_length: int = MAX_LENGTH["retrieval"]
             ) -> List[Tuple[torch.Tensor, torch.Tensor, int]]:
    """(ids of text1, ids of text2, label) of ``new_aan_pairs.<train|eval|test>.tsv``."""
    _check_split(split)
    path = _locate(Path(root), AAN_FILES[split], ("tsv_data", "lra_release/tsv_data"))
    examples = []
    with open(path, "rb") as f:  # bytes: the texts are encoded byte-level as they are stored
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fields = line.rstrip(b"\r\n").split(b"\t")
            if len(fields) != 5:
                raise ValueError(f"{path}:{line_no}: expected 5 tab-separated fields (label id1 id2 text1 text2), "
                                 f"got {len(fields)}")
            text1, text2 = (encode_bytes(t[:10000], max_length) for t in fields[3:5])
            examples.append((text1, text2, int(float(fields[0]))))
    if not examples:
        raise ValueError(f"{path} holds no examples")
    return examples


def read_pathfinder(root: os.PathLike, task: str = "pathfinder") -> Tuple[List[Path], np.ndarray]:
    """Image paths and labels of every line of ``<task folder>/metadata/*.npy`` (sorted by file number)."""
    if task not in PATHFINDER_FOLDERS:
        raise ValueError(f"task must be one of {tuple(PATHFINDER_FOLDERS)}, got {task!r}")
    root = Path(root)
    folder = root / PATHFINDER_FOLDERS[task]
    if not folder.is_dir() and (root / "lra_release" / PATHFINDER_FOLDERS[task]).is_dir():
        folder = root / "lra_release" / PATHFINDER_FOLDERS[task]
    metadata = sorted((folder / "metadata").glob("*.npy"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    if not metadata:
        raise FileNotFoundError(f"{folder / 'metadata'} has no *.npy files: data_folder must hold "
                                f"{PATHFINDER_FOLDERS[task]} of lra_release")
    paths, labels = [], []
    for meta in metadata:
        for line_no, line in enumerate(meta.read_text().splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                raise ValueError(f"{meta}:{line_no}: expected '<imgs dir> <file> <n> <label 0/1> ...', got {line!r}")
            paths.append(folder / fields[0] / fields[1])
            labels.append(int(fields[3]))
    return paths, np.asarray(labels, dtype=np.int64)


def split_indices(n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 42) -> Dict[str, np.ndarray]:
    """Seeded random train/valid/test indices (for the Pathfinder images, which LRA ships unsplit)."""
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    perm = np.random.default_rng(seed).permutation(n)
    n_valid, n_test = int(round(n * fractions[1])), int(round(n * fractions[2]))
    return {"valid": perm[:n_valid], "test": perm[n_valid:n_valid + n_test], "train": perm[n_valid + n_test:]}


# ---- datasets (items for speechbrain's PaddedBatch) ------------------------------------------------------------


class TokenSequences(torch.utils.data.Dataset):
    """Items ``{'id', 'x': (L,) token ids, 'label'}``."""

    def __init__(self, examples: List[Tuple[torch.Tensor, int]], prefix: str = ""):
        self.examples, self.prefix = examples, prefix

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Dict:
        x, label = self.examples[index]
        return {"id": f"{self.prefix}{index}", "x": x, "label": label}


class TokenPairs(TokenSequences):
    """Items ``{'id', 'x': (L1,), 'x2': (L2,) token ids, 'label'}`` (Retrieval)."""

    def __getitem__(self, index: int) -> Dict:
        x, x2, label = self.examples[index]
        return {"id": f"{self.prefix}{index}", "x": x, "x2": x2, "label": label}


class PathfinderImages(torch.utils.data.Dataset):
    """Items ``{'id', 'x': (H*W, 1) float, row-major, 'label'}``: the PNG read as grayscale, (v/255 - mean)/std."""

    def __init__(self, paths: Sequence[Path], labels: Sequence[int], mean: float = 0.5, std: float = 0.5,
                 prefix: str = ""):
        self.paths, self.labels = list(paths), [int(v) for v in labels]
        self.mean, self.std, self.prefix = float(mean), float(std), prefix

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Dict:
        from PIL import Image

        with Image.open(self.paths[index]) as image:
            pixels = np.asarray(image.convert("L"), dtype=np.float32)
        x = torch.from_numpy((pixels.reshape(-1, 1) / 255.0 - self.mean) / self.std)
        return {"id": f"{self.prefix}{index}", "x": x, "label": self.labels[index]}


# ---- tiny generated files in the official formats -------------------------------------------------------------

_OPS = {"[MIN": min, "[MAX": max, "[MED": lambda v: int(np.median(v)), "[SM": lambda v: sum(v) % 10}


def _listops_tree(rng: np.random.Generator, depth: int):
    """(operator, [arguments]) with arguments digits or subtrees; returns (tree, value)."""
    op = str(rng.choice(list(_OPS)))
    args, values = [], []
    for _ in range(int(rng.integers(2, 5))):
        if depth > 0 and rng.random() < 0.25:
            sub, value = _listops_tree(rng, depth - 1)
        else:
            value = int(rng.integers(0, 10))
            sub = value
        args.append(sub)
        values.append(value)
    return (op, args), _OPS[op](values)


def _listops_string(tree) -> str:
    """LRA's bracketed form: each argument opens one more '(' around the operator, closed by ' ]'."""
    if isinstance(tree, int):
        return str(tree)
    op, args = tree
    text = op
    for arg in args:
        text = f"( {text} {_listops_string(arg)} )"
    return f"( {text} ] )"


def _write_listops(folder: Path, rng: np.random.Generator, sizes: Dict[str, int]) -> None:
    folder.mkdir(parents=True)
    for split, n in sizes.items():
        rows = ["Source\tTarget"]
        for _ in range(n):
            tree, value = _listops_tree(rng, depth=1)
            rows.append(f"{_listops_string(tree)}\t{value}")
        (folder / LISTOPS_FILES[split]).write_text("\n".join(rows) + "\n")


_POSITIVE = ("great", "wonderful", "superb", "moving", "brilliant", "loved", "delightful", "masterpiece")
_NEGATIVE = ("awful", "boring", "terrible", "dull", "waste", "hated", "clumsy", "disaster")
_FILLER = ("the", "film", "plot", "actors", "movie", "scene", "story", "was", "and", "a", "of", "director", "this",
           "camera", "music", "ending", "it", "with", "script")


def _write_imdb(folder: Path, rng: np.random.Generator, sizes: Dict[str, int]) -> None:
    for split, n in sizes.items():
        for label, polarity in enumerate(("neg", "pos")):
            directory = folder / split / polarity
            directory.mkdir(parents=True)
            for i in range(n):
                words = list(rng.choice(_FILLER, size=int(rng.integers(20, 60))))
                for _ in range(int(rng.integers(2, 5))):
                    words.insert(int(rng.integers(0, len(words))),
                                 str(rng.choice(_POSITIVE if label else _NEGATIVE)))
                rating = int(rng.integers(7, 11)) if label else int(rng.integers(1, 5))
                (directory / f"{i}_{rating}.txt").write_text(" ".join(words).capitalize() + ".<br /><br />The end.")


_TOPICS = (("parsing", "grammar", "syntax", "treebank"), ("translation", "alignment", "bilingual", "decoder"),
           ("speech", "acoustic", "phoneme", "recognizer"), ("retrieval", "query", "ranking", "index"))


def _write_aan(folder: Path, rng: np.random.Generator, sizes: Dict[str, int]) -> None:
    folder.mkdir(parents=True)

    def doc(topic: int) -> str:
        words = list(rng.choice(_FILLER, size=int(rng.integers(15, 40))))
        for _ in range(4):
            words.insert(int(rng.integers(0, len(words))), str(rng.choice(_TOPICS[topic])))
        return " ".join(words)

    for split, n in sizes.items():
        rows = []
        for i in range(n):
            label = i % 2
            t1 = int(rng.integers(0, len(_TOPICS)))
            t2 = t1 if label else int((t1 + rng.integers(1, len(_TOPICS))) % len(_TOPICS))
            rows.append(f"{float(label)}\tP{i:05d}-a\tP{i:05d}-b\t{doc(t1)}\t{doc(t2)}")
        (folder / AAN_FILES[split]).write_text("\n".join(rows) + "\n")


def _path_image(rng: np.random.Generator, side: int, connected: bool) -> np.ndarray:
    """Two dots and three dashed curves in both classes (so ink and dot counts tell nothing): ``connected``, one
    curve joins the dots and two are distractors; else each dot ends its own curve, plus one distractor."""
    image = np.zeros((side, side), dtype=np.float32)

    def walk(start, steps):
        pos, angle, points = np.array(start, dtype=np.float32), rng.uniform(0, 2 * np.pi), []
        for _ in range(steps):
            angle += rng.normal(0, 0.3)
            pos = np.clip(pos + [np.sin(angle), np.cos(angle)], 1, side - 2)
            points.append(pos.copy())
        return points

    def start():
        return rng.uniform(2, side - 3, size=2)

    steps = side // 2
    a = start()
    curves = [walk(a, steps)]
    if connected:
        ends = [a, curves[0][-1]]
        curves.append(walk(start(), steps))
    else:
        b = start()
        curves.append(walk(b, steps))
        ends = [a, b]
    curves.append(walk(start(), steps))  # a distractor in both classes
    for curve in curves:
        for k, (y, x) in enumerate(curve):
            if k % 4 != 3:  # dashed, as the Pathfinder snakes
                image[int(round(y)), int(round(x))] = 1.0
    for y, x in ends:
        yy, xx = int(round(y)), int(round(x))
        image[max(yy - 1, 0):yy + 2, max(xx - 1, 0):xx + 2] = 1.0
    return (image * 255).astype(np.uint8)


def _write_pathfinder(folder: Path, rng: np.random.Generator, side: int, n: int, per_folder: int) -> None:
    from PIL import Image

    (folder / "metadata").mkdir(parents=True)
    for k in range(-(-n // per_folder)):
        (folder / "imgs" / str(k)).mkdir(parents=True)
        lines = []
        for i in range(k * per_folder, min(n, (k + 1) * per_folder)):
            label = int(rng.integers(0, 2))
            Image.fromarray(_path_image(rng, side, bool(label)), mode="L").save(folder / "imgs" / str(k) /
                                                                                f"sample_{i}.png")
            lines.append(f"imgs/{k} sample_{i}.png {i} {label} {side // 2} 1.8 1")
        (folder / "metadata" / f"{k}.npy").write_text("\n".join(lines) + "\n")


def _write(root: Path) -> None:
    rng = np.random.default_rng(20261125)
    _write_listops(root / "lra_release" / "listops-1000", rng, {"train": 400, "valid": 100, "test": 100})
    _write_aan(root / "lra_release" / "tsv_data", rng, {"train": 160, "valid": 40, "test": 40})
    _write_imdb(root / "aclImdb", rng, {"train": 80, "test": 20})
    _write_pathfinder(root / "lra_release" / PATHFINDER_FOLDERS["pathfinder"], rng, 32, 200, 100)
    _write_pathfinder(root / "lra_release" / PATHFINDER_FOLDERS["pathx"], rng, 128, 20, 10)
    from .seq_images import digit_images, write_cifar10

    write_cifar10(root / "cifar10" / "cifar-10-batches-py",
                  {"train": digit_images(20, 41, 32, colour=True), "test": digit_images(5, 42, 32, colour=True)})


def lra(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Tiny LRA-format files of every task, generated on first use into ``$SSM_PLUGINS_DATA/lra``:
    ``lra_release/{listops-1000, tsv_data, pathfinder32/..., pathfinder128/...}``, ``aclImdb/``, ``cifar10/``.
    ListOps expressions are real (evaluated labels); texts carry sentiment / topic words; Pathfinder images have
    two dots joined (label 1) or not (label 0) by a dashed curve, among three curves in both classes."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, lra)
