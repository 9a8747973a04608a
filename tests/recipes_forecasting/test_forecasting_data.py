"""Forecasting CSVs (ssm_plugins.data.timeseries): the generator writes the official formats, the reader cuts the
Informer / Autoformer standard splits with the train-split StandardScaler, the windows are the right slices."""
import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from ssm_plugins.data.timeseries import (DATASETS, ForecastWindows, load_forecasting_splits, split_kind,
                                         write_forecasting_csv)

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
