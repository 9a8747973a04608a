"""Long-term forecasting data: the official CSVs of the ETT / Autoformer release, their standard splits, and a
generator of small CSVs in exactly those formats.

Reading (``load_forecasting_splits``) takes the files as released, with no conversion by the user:

  * the Autoformer / ETT CSVs (``date`` column first, then the variates; ``ETTh1.csv``, ``weather.csv``, ...);
  * LSTNet's raw tables (laiguokun/multivariate-time-series-data: ``exchange_rate.txt``, ``electricity.txt``,
    ``traffic.txt``: comma-separated numbers, no header, no dates), whose variates are named as in the Autoformer
    CSV made from them (``0`` ... ``M-2``, ``OT``: that CSV is the same table with a ``date`` column);
  * either one gzip-compressed (``.gz``, as the LSTNet release ships them). ``resolve_forecasting_file`` finds
    the file of a dataset in a folder under any of these names (``exchange_rate.csv`` -> ``exchange_rate.txt.gz``).

and follows the Informer / Autoformer / PatchTST data loaders (``Dataset_ETT_hour``, ``Dataset_ETT_minute``,
``Dataset_Custom``), multivariate ('M') setting:

  * ETTh1 / ETTh2: 12 / 4 / 4 months of hourly rows, borders [0, 8640, 11520, 14400];
    ETTm1 / ETTm2: the same months in 15-minute rows (x 4); the rest of the file is unused.
  * every other CSV (weather, electricity, traffic, exchange_rate, ...): the first 70 % of the rows train, the last
    20 % test, the 10 % between them validation; the target column ``OT`` is moved last, ``date`` dropped.
  * validation and test windows start ``seq_len`` rows before their split's first row (their look-back windows
    reach into the previous split), so every forecast target lies inside its split.
  * scikit-learn's ``StandardScaler`` fitted on the training rows, applied to all rows (MSE / MAE are then
    reported on this normalised scale, as in the papers).

``ForecastWindows`` turns one split into (look-back, target) pairs with stride 1 (MambaMixer, arXiv 2403.19888 v2,
App. H.4).

Generating (``write_forecasting_csv``, also ``python -m ssm_plugins.data.timeseries --dataset ETTh1 --out DIR``):
the file name, header, column count, date format and sampling step of the official file, with values made of
daily and weekly seasonal sines (weekly and monthly for the daily exchange rates), a slow trend and AR(1) noise
per variate (deterministic in ``seed``). ``rows``
defaults to the fewest rows the standard split needs (ETT) or 2,000 (the 70/10/20 files).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

import numpy as np
import torch

__all__ = ["DATASETS", "ForecastDataset", "ForecastWindows", "load_forecasting_splits", "read_forecasting_file",
           "resolve_forecasting_file", "split_kind", "write_forecasting_csv"]

_ETT_COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
_WEATHER_COLUMNS = ("p (mbar)", "T (degC)", "Tpot (K)", "Tdew (degC)", "rh (%)", "VPmax (mbar)", "VPact (mbar)",
                    "VPdef (mbar)", "sh (g/kg)", "H2OC (mmol/mol)", "rho (g/m**3)", "wv (m/s)", "max. wv (m/s)",
                    "wd (deg)", "rain (mm)", "raining (s)", "SWDR (W/m²)", "PAR (µmol/m²/s)",
                    "max. PAR (µmol/m²/s)", "Tlog (degC)", "OT")


@dataclass(frozen=True)
class ForecastDataset:
    """One benchmark file: its name in the release, header, sampling step and row count."""
    file: str
    columns: Sequence[str]  # without 'date'
    freq: str  # pandas offset alias of the sampling step
    start: str
    date_format: str
    rows: int  # rows of the official file

    @property
    def n_vars(self) -> int:
        return len(self.columns)


def _numbered(n):
    return tuple(str(i) for i in range(n - 1)) + ("OT",)


DATASETS: Dict[str, ForecastDataset] = {
    "ETTh1": ForecastDataset("ETTh1.csv", _ETT_COLUMNS, "h", "2016-07-01 00:00:00", "%Y-%m-%d %H:%M:%S", 17420),
    "ETTh2": ForecastDataset("ETTh2.csv", _ETT_COLUMNS, "h", "2016-07-01 00:00:00", "%Y-%m-%d %H:%M:%S", 17420),
    "ETTm1": ForecastDataset("ETTm1.csv", _ETT_COLUMNS, "15min", "2016-07-01 00:00:00", "%Y-%m-%d %H:%M:%S", 69680),
    "ETTm2": ForecastDataset("ETTm2.csv", _ETT_COLUMNS, "15min", "2016-07-01 00:00:00", "%Y-%m-%d %H:%M:%S", 69680),
    "weather": ForecastDataset("weather.csv", _WEATHER_COLUMNS, "10min", "2020-01-01 00:10:00",
                               "%Y-%m-%d %H:%M:%S", 52696),
    "electricity": ForecastDataset("electricity.csv", _numbered(321), "h", "2016-07-01 02:00:00",
                                   "%Y-%m-%d %H:%M:%S", 26304),
    "traffic": ForecastDataset("traffic.csv", _numbered(862), "h", "2016-07-01 02:00:00", "%Y-%m-%d %H:%M:%S", 17544),
    "exchange_rate": ForecastDataset("exchange_rate.csv", _numbered(8), "D", "1990-01-01", "%Y/%-m/%-d %-H:%M", 7588),
}

_ETT_MONTH = 30 * 24  # rows per "month" of hourly data in the Informer code


def _release_names(file_name):
    """The names a dataset's file has in the releases: ``exchange_rate.csv`` (Autoformer) and
    ``exchange_rate.txt`` (LSTNet), each possibly ``.gz``."""
    stem = file_name[:-len(".gz")] if file_name.endswith(".gz") else file_name
    base, _ = os.path.splitext(stem)
    names = [stem, stem + ".gz"]
    for ext in (".csv", ".txt"):
        names += [n for n in (base + ext, base + ext + ".gz") if n not in names]
    return names


def resolve_forecasting_file(path: str) -> str:
    """``path`` if it exists, else the same dataset's file in the same folder under another release name
    (``X.csv`` / ``X.txt``, each also ``.gz``); FileNotFoundError naming every name tried."""
    if os.path.isfile(path):
        return path
    folder, name = os.path.split(path)
    tried = [os.path.join(folder, n) for n in _release_names(name)]
    for candidate in tried:
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"forecasting file {path} does not exist (tried {', '.join(tried)}): download the "
                            f"ETT / Autoformer / LSTNet release file, or write a small one with "
                            f"python -m ssm_plugins.data.timeseries")


def _has_header(path):
    """False for LSTNet's raw tables (the first line is all numbers)."""
    import pandas as pd

    first = pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0].tolist()
    try:
        [float(v) for v in first]
    except (TypeError, ValueError):
        return True
    return False


def split_kind(csv_path: str) -> str:
    """'ETTh' / 'ETTm' (fixed 12/4/4-month borders) from an ETT file name, else 'custom' (70/10/20)."""
    name = os.path.basename(csv_path)
    if name.startswith("ETTh"):
        return "ETTh"
    if name.startswith("ETTm"):
        return "ETTm"
    return "custom"


def _borders(kind, rows, seq_len):
    """(start, end) rows of train / valid / test, the Informer/Autoformer code's border1s / border2s."""
    if kind in ("ETTh", "ETTm"):
        month = _ETT_MONTH * (4 if kind == "ETTm" else 1)
        ends = [12 * month, 16 * month, 20 * month]
        starts = [0, ends[0] - seq_len, ends[1] - seq_len]
        return list(zip(starts, ends)), ends[2]
    num_train, num_test = int(rows * 0.7), int(rows * 0.2)
    num_valid = rows - num_train - num_test
    starts = [0, num_train - seq_len, rows - num_test - seq_len]
    ends = [num_train, num_train + num_valid, rows]
    return list(zip(starts, ends)), rows


def read_forecasting_file(csv_path: str, kind: Optional[str] = None):
    """Read a released forecasting file as it is -> (dates, columns, values): ``dates`` the ``date`` column as
    pandas datetimes, or None for LSTNet's raw tables (no header, no dates; their variates get the Autoformer
    CSV's names ``0`` ... ``OT``); ``columns`` the variate names in the order the models see them (the Autoformer
    code's Dataset_Custom puts ``OT`` last); ``values`` float64 (rows, n_vars). Raises FileNotFoundError /
    ValueError naming the file for a missing file, no ``date`` column or non-numeric / non-finite values."""
    import pandas as pd

    kind = kind or split_kind(csv_path)
    if not os.path.isfile(csv_path):
        raise FileNotFoundError(f"forecasting CSV {csv_path} does not exist (download the ETT / Autoformer release "
                                f"files, or write a small one with python -m ssm_plugins.data.timeseries)")
    dates = None
    if _has_header(csv_path):
        frame = pd.read_csv(csv_path)  # .gz decompressed by pandas (compression inferred from the name)
        if "date" not in frame.columns:
            raise ValueError(f"{csv_path} has no 'date' column (columns: {list(frame.columns)[:5]}...): not a file "
                             f"of the ETT / Autoformer release")
        dates = pd.to_datetime(frame["date"])
    else:  # LSTNet's raw table: the Autoformer CSV's variate names, no dates
        frame = pd.read_csv(csv_path, header=None)
        frame.columns = list(_numbered(frame.shape[1]))
    columns = [c for c in frame.columns if c != "date"]
    if kind == "custom" and "OT" in columns:  # Dataset_Custom: [date, other columns, target 'OT']
        columns = [c for c in columns if c != "OT"] + ["OT"]
    if not columns:
        raise ValueError(f"{csv_path} has no variate columns besides 'date'")
    bad = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise ValueError(f"{csv_path}: columns {bad[:5]} are not numeric")
    values = frame[columns].to_numpy(dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"{csv_path} has missing or non-finite values")
    return dates, columns, values


def load_forecasting_splits(csv_path: str, seq_len: int, pred_len: int, kind: Optional[str] = None,
                            scale: bool = True) -> Dict[str, object]:
    """Read an official forecasting CSV and cut the standard splits (module docstring).

    Returns dict(train=, valid=, test= float32 arrays (rows, n_vars) including each split's look-back rows,
    columns= the variate names in array order, scaler= the fitted StandardScaler or None, kind=).
    Raises FileNotFoundError / ValueError naming the file for a missing file, a missing ``date`` column,
    non-numeric values or too few rows for the split and window sizes.
    """
    from sklearn.preprocessing import StandardScaler

    for name, value in (("seq_len", seq_len), ("pred_len", pred_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    kind = kind or split_kind(csv_path)
    if kind not in ("ETTh", "ETTm", "custom"):
        raise ValueError(f"kind must be 'ETTh', 'ETTm' or 'custom', got {kind!r}")
    _, columns, values = read_forecasting_file(csv_path, kind)
    rows = len(values)
    borders, needed = _borders(kind, rows, seq_len)
    windows = [end - start - seq_len - pred_len + 1 for start, end in borders]
    if rows < needed or min(windows) < 1:
        raise ValueError(f"{csv_path}: {rows} rows are too few for the standard {kind} split with seq_len={seq_len} "
                         f"and pred_len={pred_len} (windows per split: {windows}; ETT files need at least "
                         f"{needed if kind != 'custom' else 'n/a'} rows)")
    scaler = None
    if scale:
        scaler = StandardScaler().fit(values[borders[0][0]:borders[0][1]])
        values = scaler.transform(values)
    values = values.astype(np.float32)
    out = {split: values[start:end] for split, (start, end) in zip(("train", "valid", "test"), borders)}
    out.update(columns=columns, scaler=scaler, kind=kind)
    return out


class ForecastWindows(torch.utils.data.Dataset):
    """(look-back, target) pairs of one split: item i = (data[s:s+seq_len], data[s+seq_len:s+seq_len+pred_len])
    with s = i * stride, as float32 tensors (seq_len, n_vars) and (pred_len, n_vars)."""

    def __init__(self, data, seq_len: int, pred_len: int, stride: int = 1):
        for name, value in (("seq_len", seq_len), ("pred_len", pred_len), ("stride", stride)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        data = torch.as_tensor(np.asarray(data, dtype=np.float32))
        if data.dim() != 2:
            raise ValueError(f"data must have shape (rows, n_vars), got {tuple(data.shape)}")
        span = len(data) - seq_len - pred_len
        if span < 0:
            raise ValueError(f"data has {len(data)} rows, fewer than seq_len + pred_len = {seq_len + pred_len}")
        self.data, self.seq_len, self.pred_len, self.stride = data, seq_len, pred_len, stride
        self.length = span // stride + 1

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if not 0 <= index < self.length:
            raise IndexError(f"window {index} out of range [0, {self.length})")
        start = index * self.stride
        end = start + self.seq_len
        return self.data[start:end], self.data[end:end + self.pred_len]


def _series(rows, n_vars, steps_per_day, rng):
    """Daily and weekly sines (weekly and monthly for daily data) with random amplitudes/phases, a slow trend and
    AR(1) noise, per variate."""
    t = np.arange(rows, dtype=np.float64)[:, None]
    short, long = (steps_per_day, 7 * steps_per_day) if steps_per_day >= 4 else (7, 30)
    day, week = 2 * np.pi * t / short, 2 * np.pi * t / long
    amp_d, amp_w = rng.uniform(0.5, 2.0, n_vars), rng.uniform(0.2, 1.0, n_vars)
    phase_d, phase_w = rng.uniform(0, 2 * np.pi, (2, n_vars))
    values = amp_d * np.sin(day + phase_d) + 0.3 * amp_d * np.sin(2 * day + phase_w) + amp_w * np.sin(week + phase_w)
    values += rng.uniform(-1, 1, n_vars) * t / max(rows, 1)
    noise = rng.normal(0.0, 0.15, (rows, n_vars))
    for i in range(1, rows):
        noise[i] += 0.7 * noise[i - 1]
    return values + noise


def _default_rows(name):
    spec = DATASETS[name]
    kind = split_kind(spec.file)
    if kind == "custom":
        return 2000
    return 20 * _ETT_MONTH * (4 if kind == "ETTm" else 1)


def write_forecasting_csv(out_dir: str, dataset: str, rows: Optional[int] = None, seed: int = 0,
                          release: str = "autoformer", compress: bool = False) -> str:
    """Write ``<out_dir>/<official file name>`` for ``dataset`` (a key of DATASETS) with ``rows`` rows; returns
    the path. Same header (``date`` first, then the release's variate names), date format and step as the
    official file; deterministic in ``seed``. ``release='lstnet'``: LSTNet's raw table instead
    (``<name>.txt``, numbers only: no header, no dates); ``compress``: gzip it (``.gz`` appended)."""
    if release not in ("autoformer", "lstnet"):
        raise ValueError(f"release must be 'autoformer' or 'lstnet', got {release!r}")
    import pandas as pd

    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
    spec = DATASETS[dataset]
    rows = _default_rows(dataset) if rows is None else rows
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be a positive int, got {rows!r}")
    rng = np.random.default_rng([seed, sorted(DATASETS).index(dataset)])
    step = pd.tseries.frequencies.to_offset(spec.freq)
    steps_per_day = max(1, int(round(pd.Timedelta(days=1) / pd.Timedelta(step))))
    values = _series(rows, spec.n_vars, steps_per_day, rng)
    values = values * rng.uniform(1.0, 10.0, spec.n_vars) + rng.uniform(0.0, 30.0, spec.n_vars)  # units/offsets
    dates = pd.date_range(spec.start, periods=rows, freq=spec.freq)
    frame = pd.DataFrame(values, columns=list(spec.columns))
    frame.insert(0, "date", dates.strftime(spec.date_format))
    os.makedirs(out_dir, exist_ok=True)
    name = spec.file if release == "autoformer" else os.path.splitext(spec.file)[0] + ".txt"
    path = os.path.join(out_dir, name + (".gz" if compress else ""))
    if release == "lstnet":
        frame.drop(columns="date").to_csv(path, index=False, header=False, float_format="%.6f")
    else:
        frame.to_csv(path, index=False, float_format="%.3f")
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--dataset", choices=sorted(DATASETS), nargs="+", default=["ETTh1"])
    parser.add_argument("--rows", type=int, default=None, help="rows per file (default: the fewest the split needs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--release", choices=("autoformer", "lstnet"), default="autoformer",
                        help="lstnet: the raw table (name.txt, no header, no dates)")
    parser.add_argument("--gzip", action="store_true", help="write name.gz")
    args = parser.parse_args(argv)
    for name in args.dataset:
        print(write_forecasting_csv(args.out, name, rows=args.rows, seed=args.seed, release=args.release,
                                    compress=args.gzip))


if __name__ == "__main__":
    main()
