"""Forecasting CSVs (ssm_plugins.data.timeseries): the generator writes the official formats, the reader cuts the
Informer / Autoformer standard splits with the train-split StandardScaler, the windows are the right slices; the
reader takes LSTNet's raw tables and gzipped files as released; one test reads the real files when
``../shared/data/forecasting`` exists (skipped, naming the path, when it does not)."""
import gzip
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from ssm_plugins.data.timeseries import (DATASETS, ForecastWindows, load_forecasting_splits,
                                         resolve_forecasting_file, split_kind, write_forecasting_csv)

REAL_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "forecasting"  # ../shared/data

OFFICIAL_HEADS = {  # first line and first date of each release file
    "ETTh1": ("date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT", "2016-07-01 00:00:00", "2016-07-01 01:00:00"),
    "ETTm2": ("date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT", "2016-07-01 00:00:00", "2016-07-01 00:15:00"),
    "weather": ("date,p (mbar),T (degC),Tpot (K)", "2020-01-01 00:10:00", "2020-01-01 00:20:00"),
    "electricity": ("date,0,1,2,3", "2016-07-01 02:00:00", "2016-07-01 03:00:00"),
    "exchange_rate": ("date,0,1,2,3,4,5,6,OT", "1990/1/1 0:00", "1990/1/2 0:00"),
}


@pytest.mark.parametrize("name", sorted(OFFICIAL_HEADS))
def test_generated_files_have_the_official_format(name, tmp_path):
    rows = 1000 if split_kind(DATASETS[name].file) == "custom" else None
    path = write_forecasting_csv(str(tmp_path), name, rows=rows)
    assert path.endswith("/" + DATASETS[name].file)
    lines = open(path, encoding="utf-8").read().splitlines()
    header, first, second = OFFICIAL_HEADS[name]
    assert lines[0].startswith(header) and lines[0].endswith(",OT")
    assert lines[0].count(",") == DATASETS[name].n_vars
    assert lines[1].startswith(first + ",") and lines[2].startswith(second + ",")
    assert len(lines) - 1 == (rows or {"ETTh1": 14400, "ETTm2": 57600}[name])
    frame = pd.read_csv(path)
    assert frame.shape[1] == DATASETS[name].n_vars + 1 and frame.drop(columns="date").notna().all().all()


def test_generator_is_deterministic_in_the_seed(tmp_path):
    a = open(write_forecasting_csv(str(tmp_path / "a"), "weather", rows=300)).read()
    assert a == open(write_forecasting_csv(str(tmp_path / "b"), "weather", rows=300)).read()
    assert a != open(write_forecasting_csv(str(tmp_path / "c"), "weather", rows=300, seed=1)).read()
    with pytest.raises(ValueError, match="dataset must be one of"):
        write_forecasting_csv(str(tmp_path), "ETTh3")
    with pytest.raises(ValueError, match="rows must be a positive int"):
        write_forecasting_csv(str(tmp_path), "weather", rows=0)


def test_ett_split_has_the_informer_borders_and_train_scaler(tmp_path):
    path = write_forecasting_csv(str(tmp_path), "ETTh1", rows=17420)  # the official row count: the tail is unused
    seq_len, pred_len = 336, 96
    splits = load_forecasting_splits(path, seq_len, pred_len)
    raw = pd.read_csv(path).drop(columns="date").to_numpy()
    # Dataset_ETT_hour: border1s = [0, 8640 - L, 11520 - L], border2s = [8640, 11520, 14400]
    scaler = StandardScaler().fit(raw[:8640])
    for split, (start, end) in {"train": (0, 8640), "valid": (8640 - seq_len, 11520),
                                "test": (11520 - seq_len, 14400)}.items():
        np.testing.assert_allclose(splits[split], scaler.transform(raw[start:end]), rtol=1e-5, atol=1e-5)
    assert splits["columns"] == list(DATASETS["ETTh1"].columns) and splits["kind"] == "ETTh"
    np.testing.assert_allclose(splits["train"].mean(0), 0, atol=1e-4)
    # ETTm: the same months in 15-minute steps
    path = write_forecasting_csv(str(tmp_path), "ETTm1")
    splits = load_forecasting_splits(path, 96, 96)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [34560, 11520 + 96, 11520 + 96]


def test_custom_split_is_70_10_20_with_ot_last(tmp_path):
    path = write_forecasting_csv(str(tmp_path), "weather", rows=1000)
    frame = pd.read_csv(path)
    frame = frame[["date", "OT"] + [c for c in frame.columns if c not in ("date", "OT")]]  # OT first on disk
    frame.to_csv(path, index=False)
    splits = load_forecasting_splits(path, 96, 24)
    assert splits["columns"][-1] == "OT" and len(splits["columns"]) == 21
    # num_train = 700, num_test = 200, num_vali = 100; valid/test start seq_len rows early
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [700, 100 + 96, 200 + 96]
    raw = frame[splits["columns"]].to_numpy()
    np.testing.assert_allclose(splits["test"], StandardScaler().fit(raw[:700]).transform(raw[1000 - 296:]),
                               rtol=1e-5, atol=1e-5)
    unscaled = load_forecasting_splits(path, 96, 24, scale=False)
    assert unscaled["scaler"] is None
    np.testing.assert_allclose(unscaled["valid"], raw[700 - 96:800], rtol=1e-6)


def test_windows_are_the_look_back_and_target_slices():
    data = np.arange(60, dtype=np.float32).reshape(20, 3)
    windows = ForecastWindows(data, seq_len=5, pred_len=3)
    assert len(windows) == 20 - 5 - 3 + 1
    x, y = windows[4]
    assert torch.equal(x, torch.from_numpy(data[4:9])) and torch.equal(y, torch.from_numpy(data[9:12]))
    strided = ForecastWindows(data, 5, 3, stride=4)
    assert len(strided) == 4 and torch.equal(strided[3][0], torch.from_numpy(data[12:17]))
    with pytest.raises(IndexError):
        windows[len(windows)]
    with pytest.raises(ValueError, match="fewer than seq_len"):
        ForecastWindows(data, 15, 6)
    with pytest.raises(ValueError, match="stride must be a positive int"):
        ForecastWindows(data, 5, 3, stride=0)


def test_bad_files_raise_errors_naming_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        load_forecasting_splits(str(tmp_path / "nowhere.csv"), 96, 96)
    path = write_forecasting_csv(str(tmp_path), "ETTh1", rows=9000)
    with pytest.raises(ValueError, match=r"ETTh1.csv: 9000 rows are too few .*ETTh split.*14400"):
        load_forecasting_splits(path, 96, 96)
    small = write_forecasting_csv(str(tmp_path), "exchange_rate", rows=500)
    with pytest.raises(ValueError, match="exchange_rate.csv: 500 rows are too few"):
        load_forecasting_splits(small, 512, 96)
    frame = pd.read_csv(small)
    frame.rename(columns={"date": "time"}).to_csv(tmp_path / "nodate.csv", index=False)
    with pytest.raises(ValueError, match="nodate.csv has no 'date' column"):
        load_forecasting_splits(str(tmp_path / "nodate.csv"), 24, 24)
    frame["3"] = "abc"
    frame.to_csv(tmp_path / "text.csv", index=False)
    with pytest.raises(ValueError, match=r"text.csv: columns \['3'\] are not numeric"):
        load_forecasting_splits(str(tmp_path / "text.csv"), 24, 24)
    frame["3"] = np.nan
    frame.to_csv(tmp_path / "gap.csv", index=False)
    with pytest.raises(ValueError, match="gap.csv has missing or non-finite values"):
        load_forecasting_splits(str(tmp_path / "gap.csv"), 24, 24)
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        load_forecasting_splits(small, 0, 24)


def test_lstnet_raw_table_and_gzip_read_as_the_autoformer_csv(tmp_path):
    csv = write_forecasting_csv(str(tmp_path / "csv"), "exchange_rate", rows=1000)
    raw = write_forecasting_csv(str(tmp_path / "raw"), "exchange_rate", rows=1000, release="lstnet", compress=True)
    assert raw.endswith("/exchange_rate.txt.gz")
    first = gzip.open(raw, "rt").readline().strip().split(",")
    assert len(first) == 8 and all(float(v) == float(v) for v in first)  # numbers only: no header, no dates
    a, b = load_forecasting_splits(csv, 96, 24), load_forecasting_splits(raw, 96, 24)
    assert a["columns"] == b["columns"] == ["0", "1", "2", "3", "4", "5", "6", "OT"] and b["kind"] == "custom"
    for split in ("train", "valid", "test"):  # the CSV rounds to 3 decimals, the raw table to 6
        np.testing.assert_allclose(a[split], b[split], atol=2e-3)
    gz = write_forecasting_csv(str(tmp_path / "gz"), "ETTh1", compress=True)
    assert gz.endswith("/ETTh1.csv.gz")
    assert [len(load_forecasting_splits(gz, 96, 24)[s]) for s in ("train", "valid", "test")] == [8640, 2976, 2976]


def test_a_dataset_file_is_found_under_its_release_names(tmp_path):
    raw = write_forecasting_csv(str(tmp_path), "exchange_rate", rows=300, release="lstnet", compress=True)
    assert resolve_forecasting_file(str(tmp_path / "exchange_rate.csv")) == raw
    assert resolve_forecasting_file(raw) == raw
    plain = write_forecasting_csv(str(tmp_path), "exchange_rate", rows=300)  # the CSV itself wins when present
    assert resolve_forecasting_file(str(tmp_path / "exchange_rate.csv")) == plain
    with pytest.raises(FileNotFoundError, match=r"ETTh1.csv does not exist \(tried .*ETTh1.csv.gz.*ETTh1.txt"):
        resolve_forecasting_file(str(tmp_path / "ETTh1.csv"))


def test_the_real_files_as_released():
    """ETTh1.csv.gz (zhouhaoyi/ETDataset) and LSTNet's exchange_rate.txt.gz, read as released: header / columns,
    split sizes at look-back 512 and horizon 96, and the first training window."""
    if not REAL_DATA.is_dir():
        pytest.skip(f"no real forecasting data at {REAL_DATA} (../shared/data/forecasting from the repository)")
    expected = {  # file asked for, columns, rows with look-back per split, windows per split, first raw value
        "ETTh1": ("ETTh1.csv", list(DATASETS["ETTh1"].columns), [8640, 2880 + 512, 2880 + 512],
                  [8033, 2785, 2785], 5.827),
        "exchange_rate": ("exchange_rate.csv", ["0", "1", "2", "3", "4", "5", "6", "OT"],
                          [5311, 760 + 512, 1517 + 512], [4704, 665, 1422], 0.7855),
    }
    for name, (file, columns, rows, windows, first) in expected.items():
        path = resolve_forecasting_file(str(REAL_DATA / file))  # ETTh1.csv.gz, exchange_rate.txt.gz
        assert os.path.basename(path) == {"ETTh1": "ETTh1.csv.gz", "exchange_rate": "exchange_rate.txt.gz"}[name]
        splits = load_forecasting_splits(path, 512, 96)
        assert splits["columns"] == columns, name
        assert [len(splits[s]) for s in ("train", "valid", "test")] == rows, name
        assert [len(ForecastWindows(splits[s], 512, 96)) for s in ("train", "valid", "test")] == windows, name
        raw = load_forecasting_splits(path, 512, 96, scale=False)["train"]
        assert raw[0, 0] == pytest.approx(first, abs=1e-4), name
        np.testing.assert_allclose(splits["train"].mean(0), 0, atol=1e-4)  # the scaler saw the training rows only
        x, y = ForecastWindows(splits["train"], 512, 96)[0]
        np.testing.assert_allclose(x.numpy(), splits["scaler"].transform(raw[:512]), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(y.numpy(), splits["scaler"].transform(raw[512:608]), rtol=1e-4, atol=1e-4)
