"""Data preparation for Google Speech Commands v2: the SC10 and SC35 tasks of the eSSM paper (arXiv 2402.15290,
Tables 3 and 8).

Reads a Speech Commands v2 folder (http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz, extracted by
the user; nothing is downloaded here), or the synthetic set of ``python -m ssm_plugins.data.keywords``::

    data_folder/<word>/<speaker>_nohash_<k>.wav
    data_folder/validation_list.txt, data_folder/testing_list.txt   ("<word>/<file>.wav" per line)

and writes ``train.csv``, ``valid.csv`` and ``test.csv`` (SpeechBrain csv manifests: ID, duration, wav, spk_id,
command) into ``save_folder``. The split is the dataset's official one (the two lists; train = every other clip),
which is what the SC10/SC35 benchmarks use. SC10 keeps the 10 keywords, SC35 all 35 words; no "unknown" or
"silence" classes (unlike SpeechBrain's own 12-command task).
"""
import csv
import json
import logging
import os
from typing import Dict, List, Sequence

import soundfile

from ssm_plugins.data.keywords import SC10_WORDS, SC35_WORDS

logger = logging.getLogger(__name__)

TASK_WORDS = {10: SC10_WORDS, 35: SC35_WORDS}
SPLIT_LISTS = {"valid": "validation_list.txt", "test": "testing_list.txt"}
CSV_FIELDS = ("ID", "duration", "wav", "spk_id", "command")


def words_for(number_of_commands: int) -> Sequence[str]:
    """The keywords of SC10 (``10``) or SC35 (``35``)."""
    if number_of_commands not in TASK_WORDS:
        raise ValueError(f"number_of_commands must be 10 (SC10) or 35 (SC35), got {number_of_commands!r}")
    return TASK_WORDS[number_of_commands]


def _read_list(path: str) -> set:
    if not os.path.isfile(path):
        raise ValueError(f"data_folder must contain {os.path.basename(path)} (Speech Commands v2 layout), "
                         f"missing {path}")
    with open(path) as f:
        return {line.strip() for line in f if line.strip()}


def prepare_GSC(data_folder: str, save_folder: str, number_of_commands: int = 10, skip_prep: bool = False) -> None:
    """Write train/valid/test csv files of the SC10 or SC35 task into ``save_folder``.

    Skipped when ``skip_prep`` or when the csv files exist for the same data folder and task.
    """
    if skip_prep:
        return
    words = words_for(number_of_commands)
    opts = {"data_folder": os.path.abspath(data_folder), "number_of_commands": number_of_commands}
    opts_file = os.path.join(save_folder, "prepare_GSC.json")
    outputs = [os.path.join(save_folder, f"{split}.csv") for split in ("train", "valid", "test")]
    if all(os.path.isfile(p) for p in outputs + [opts_file]):
        with open(opts_file) as f:
            if json.load(f) == opts:
                logger.info("prepare_GSC: csv files exist for %s, skipping", data_folder)
                return
    missing = [w for w in words if not os.path.isdir(os.path.join(data_folder, w))]
    if missing:
        raise ValueError(f"data_folder {data_folder} lacks the word folders {missing} of the "
                         f"{number_of_commands}-word task")
    held_out = {split: _read_list(os.path.join(data_folder, name)) for split, name in SPLIT_LISTS.items()}
    rows: Dict[str, List[dict]] = {"train": [], "valid": [], "test": []}
    for word in words:
        for name in sorted(os.listdir(os.path.join(data_folder, word))):
            if not name.endswith(".wav"):
                continue
            rel = f"{word}/{name}"
            split = "valid" if rel in held_out["valid"] else "test" if rel in held_out["test"] else "train"
            info = soundfile.info(os.path.join(data_folder, rel))
            rows[split].append({
                "ID": rel[:-len(".wav")],
                "duration": f"{info.frames / info.samplerate:.4f}",
                "wav": os.path.join("$data_root", rel),
                "spk_id": name.split("_nohash_")[0],
                "command": word,
            })
    os.makedirs(save_folder, exist_ok=True)
    for path, split in zip(outputs, ("train", "valid", "test")):
        if not rows[split]:
            raise ValueError(f"the {split} split of {data_folder} is empty (check {SPLIT_LISTS.get(split, 'the lists')})")
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            writer.writeheader()
            writer.writerows(rows[split])
        logger.info("prepare_GSC: %d clips in %s", len(rows[split]), path)
    with open(opts_file, "w") as f:
        json.dump(opts, f)
