#!/usr/bin/env python3
"""Forecast with a model this recipe trained: the last ``seq_len`` rows of a file in a released format -> the next
``horizon`` rows, in the file's own units, as a CSV with the dates they cover.

    python predict.py hparams/tsm2_ETTh1.yaml --data_folder=/data/ETT-small --horizon=96 \
        --input=/data/latest/ETTh1.csv [--output=forecast.csv]

The hparams file and its overrides are those of the training run: they name its output folder, whose checkpoint
with the lowest validation MSE and ``scaler.json`` (the training split's StandardScaler, written by train.py) are
loaded. ``--input`` is any file in the formats train.py reads (an ETT / Autoformer CSV, LSTNet's raw table, either
gzipped) with the training file's variates, at least ``seq_len`` rows; its last ``seq_len`` rows are the look-back.
The forecast CSV has a ``date`` column continuing the input's dates at their step (LSTNet's tables have no dates:
a ``step`` column with the row numbers the forecast covers), then one column per variate. ``--output`` defaults to
``<output_folder>/forecast_<input name>.csv``.
"""
import argparse
import json
import os
import sys

import numpy as np
import pandas as pd
import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml

from ssm_plugins.data.timeseries import read_forecasting_file, resolve_forecasting_file, split_kind


def future_index(dates, rows: int, horizon: int):
    """(column name, values) of the ``horizon`` rows after the input's last: its dates continued at their step
    (pandas' inferred frequency, else the last difference), or row numbers when the file has no dates."""
    if dates is None:
        return "step", np.arange(rows, rows + horizon)
    if len(dates) < 2:
        raise ValueError("the input needs at least 2 dated rows to continue its dates")
    freq = pd.infer_freq(dates.iloc[-64:]) if len(dates) >= 3 else None
    step = pd.tseries.frequencies.to_offset(freq) if freq else dates.iloc[-1] - dates.iloc[-2]
    return "date", pd.date_range(dates.iloc[-1] + step, periods=horizon, freq=step)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="predict.py HPARAMS_FILE [--key=value ...] --input CSV [--output CSV]")
    parser.add_argument("hparams_file", help="the hparams file the model was trained with")
    parser.add_argument("--input", required=True, help="a file in a released format: the look-back is its last rows")
    parser.add_argument("--output", default=None, help="the forecast CSV [<output_folder>/forecast_<input>.csv]")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    hparams_file, run_opts, overrides = sb.parse_arguments([args.hparams_file] + rest)
    with open(hparams_file) as f:
        hparams = load_hyperpyyaml(f, overrides)
    folder = hparams["output_folder"]
    scaler_file = os.path.join(folder, "scaler.json")
    if not os.path.isfile(scaler_file):
        raise FileNotFoundError(f"{scaler_file} does not exist: train.py writes it; run train.py with this hparams "
                                f"file and the same overrides first (they name the output folder)")
    model = hparams["model"]
    if hparams["checkpointer"].recover_if_possible(min_key="mse") is None:
        raise FileNotFoundError(f"no checkpoint in {hparams['save_folder']}: train.py saves one per epoch")
    with open(scaler_file) as f:
        scaler = json.load(f)

    path = resolve_forecasting_file(args.input)
    # the training file's kind decides the variate order (the Autoformer code moves OT last in its 70/10/20 files)
    dates, columns, values = read_forecasting_file(path, kind=split_kind(hparams["csv_file"]))
    if columns != scaler["columns"]:
        raise ValueError(f"{path} has the variates {columns[:8]}{'...' if len(columns) > 8 else ''} but the model "
                         f"was trained on {scaler['columns'][:8]}{'...' if len(scaler['columns']) > 8 else ''}")
    seq_len, horizon = hparams["seq_len"], hparams["horizon"]
    if len(values) < seq_len:
        raise ValueError(f"{path} has {len(values)} rows; the look-back needs seq_len = {seq_len}")
    mean, scale = np.asarray(scaler["mean"]), np.asarray(scaler["scale"])
    window = torch.from_numpy(((values[-seq_len:] - mean) / scale).astype(np.float32))[None]
    device = run_opts.get("device") or "cpu"
    model.to(device).eval()
    with torch.no_grad():
        forecast = model(window.to(device))[0].double().cpu().numpy() * scale + mean

    name, index = future_index(dates, len(values), horizon)
    frame = pd.DataFrame(forecast, columns=columns)
    frame.insert(0, name, index)
    stem = os.path.basename(path).split(".")[0]
    output = args.output or os.path.join(folder, f"forecast_{stem}.csv")
    frame.to_csv(output, index=False, date_format="%Y-%m-%d %H:%M:%S")
    print(f"{hparams['model_name']}: {horizon} steps after the last of {len(values)} rows of {path} -> {output}")
    return output


if __name__ == "__main__":
    main()
