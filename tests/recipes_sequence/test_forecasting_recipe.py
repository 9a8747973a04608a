"""The forecasting recipe (recipes_sequence/forecasting) on generated CSVs in the official formats: a short run
beats the naive repeat-last-value forecast, every hparams file (TSM2, TSQS, the DLinear control) builds its model and
runs one batch of its dataset, the defaults are the same for every dataset, a second run resumes the epoch counter,
``--plot`` writes the PNG, LSTNet's raw gzipped table is read as released, and a CSV with another variate count is
refused."""
import json
from pathlib import Path

import pytest

from _scripts import load_script

pytest.importorskip("speechbrain")

from ssm_plugins.data.timeseries import DATASETS, split_kind, write_forecasting_csv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes_sequence" / "forecasting"
HPARAMS = sorted(p.name for p in (RECIPE / "hparams").glob("*.yaml"))
# a CPU-size model and run for the end-to-end tests (same classes and code paths as the hparams defaults)
SHORT = ["--seq_len=96", "--horizon=48", "--embed_dim=16", "--depth=1", "--headdim=16", "--train_stride=8",
         "--train_fraction=1.0",
         "--lr=0.001", "--batch_size=64"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def recipe():
    return load_script(RECIPE / "train.py", "forecasting_train")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Every dataset's file in its official format; the 70/10/20 files with the fewest rows look-back 512 and
    horizon 96 need (1,000), the ETT files with the rows of their fixed borders."""
    folder = tmp_path_factory.mktemp("forecasting")
    for name, spec in DATASETS.items():
        write_forecasting_csv(str(folder), name, rows=1000 if split_kind(spec.file) == "custom" else None)
    return folder


def _run(recipe, hparams, data, out, *overrides):
    return recipe.main([str(RECIPE / "hparams" / hparams), f"--data_folder={data}", f"--output_folder={out}",
                        "--device=cpu", "--noprogressbar", *overrides])


def test_every_dataset_and_model_has_an_hparams_file():
    assert HPARAMS == sorted(f"{model}_{name}.yaml" for model in ("dlinear", "tsm2", "tsqs") for name in DATASETS)


def _training_keys(name):
    """The keys that are not the model's, as (key, value) lines of an hparams file."""
    lines = (RECIPE / "hparams" / name).read_text().splitlines()
    keys = ("number_of_epochs", "patience", "batch_size", "lr", "lr_decay", "train_stride", "train_fraction", "seq_len", "seed",
            "dropout", "variate_mixer", "variate_selection",
            "embed_dim", "depth", "d_state", "headdim", "patch_len", "stride")
    return {line.split(":")[0]: line.split("#")[0].strip() for line in lines if line.split(":")[0] in keys}


def test_defaults_are_the_same_for_every_dataset():
    # a default changed for one data set is changed for all (only batch_size differs: 16 for 321 / 862 variates)
    reference = {model: _training_keys(f"{model}_ETTh1.yaml") for model in ("dlinear", "tsm2", "tsqs")}
    for name in HPARAMS:
        keys = _training_keys(name)
        model = name.split("_", 1)[0]
        if "electricity" in name or "traffic" in name:
            assert keys.pop("batch_size") == "batch_size: 16", name
            keys["batch_size"] = reference[model]["batch_size"]
        assert keys == reference[model], name
    assert _training_keys("dlinear_ETTh1.yaml")["lr"] == _training_keys("tsm2_ETTh1.yaml")["lr"]


def test_dlinear_control_short_run_beats_repeat_last_and_plots(recipe, data, tmp_path):
    out = tmp_path / "dlinear"
    result = _run(recipe, "dlinear_ETTh1.yaml", data, out, "--seq_len=96", "--horizon=48", "--train_stride=8",
                  "--train_fraction=1.0", "--number_of_epochs=2", "--lr=0.005", "--plot")
    assert result["model"] == "DLinear" and result["parameters"] == 2 * (96 * 48 + 48)
    assert result["test"]["mse"] < 0.5 * result["repeat_last"]["mse"], result
    png = out / "forecast_ETTh1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_lr_decay_every_epoch_halves_the_rate_after_each_epoch(recipe, data, tmp_path):
    # the Informer / Autoformer / DLinear code's lradj='type1', which their published figures used
    out = tmp_path / "halving"
    _run(recipe, "dlinear_ETTh1.yaml", data, out, "--seq_len=96", "--horizon=48", "--train_stride=8",
         "--train_fraction=1.0", "--number_of_epochs=3", "--patience=10", "--lr=0.004", "--lr_decay=every_epoch")
    rates = [line.split(" - ")[0].split("lr: ")[1] for line in (out / "train_log.txt").read_text().splitlines()
             if line.startswith("epoch")]
    assert rates == ["4.00e-03", "2.00e-03", "1.00e-03"]
    with pytest.raises(ValueError, match="lr_decay must be 'plateau' or 'every_epoch', got 'cosine'"):
        _run(recipe, "dlinear_ETTh1.yaml", data, tmp_path / "bad", "--lr_decay=cosine")


def test_short_run_beats_repeat_last_value_then_resumes(recipe, data, tmp_path):
    # Measured: after 2 epochs test MSE 0.25 against 1.70 for the repeat-last forecast (normalised ETTh1-format data)
    out = tmp_path / "run"
    result = _run(recipe, "tsm2_ETTh1.yaml", data, out, *SHORT, "--number_of_epochs=2")
    stats = json.loads((out / "test_stats.json").read_text())
    assert stats == json.loads(json.dumps(result)) and stats["epochs"] == 2 and stats["horizon"] == 48
    assert stats["test"]["mse"] < 0.5 * stats["repeat_last"]["mse"], stats
    assert stats["test"]["mae"] < stats["repeat_last"]["mae"]
    log = [line.split(",")[0] for line in (out / "train_log.txt").read_text().splitlines() if line.startswith("epoch")]
    assert log == ["epoch: 1", "epoch: 2"]
    _run(recipe, "tsm2_ETTh1.yaml", data, out, *SHORT, "--number_of_epochs=3")
    log = [line.split(",")[0] for line in (out / "train_log.txt").read_text().splitlines() if line.startswith("epoch")]
    assert log == ["epoch: 1", "epoch: 2", "epoch: 3"]  # resumed from the checkpoint, epochs 1-2 not rerun


def test_predict_forecasts_the_rows_after_a_file_in_its_units_and_dates(recipe, data, tmp_path):
    # predict.py on the file without its last horizon rows forecasts exactly those rows: the same values as the
    # trained model on the recipe's last test window (load_forecasting_splits' path, scaled back), with their dates
    import numpy as np
    import pandas as pd
    import torch

    from ssm_plugins.data.timeseries import ForecastWindows, load_forecasting_splits

    predict = load_script(RECIPE / "predict.py", "forecasting_predict")
    out = tmp_path / "run"
    args = [str(RECIPE / "hparams" / "tsm2_ETTh1.yaml"), f"--data_folder={data}", f"--output_folder={out}", *SHORT]
    with pytest.raises(FileNotFoundError, match="scaler.json does not exist: train.py writes it"):
        predict.main(args + [f"--input={data / 'ETTh1.csv'}"])
    recipe.main(args + ["--device=cpu", "--noprogressbar", "--number_of_epochs=1"])
    full = pd.read_csv(data / "ETTh1.csv")
    (tmp_path / "new").mkdir()
    full.iloc[:-48].to_csv(tmp_path / "new" / "ETTh1.csv", index=False)
    written = pd.read_csv(predict.main(args + [f"--input={tmp_path / 'new' / 'ETTh1.csv'}"]))
    assert list(written.columns) == list(full.columns) and len(written) == 48
    cut = pd.to_datetime(full["date"].iloc[-48:]).dt.strftime("%Y-%m-%d %H:%M:%S")
    assert written["date"].tolist() == cut.tolist()

    splits = load_forecasting_splits(str(data / "ETTh1.csv"), 96, 48)
    windows = ForecastWindows(splits["test"], 96, 48)
    window, _ = windows[len(windows) - 1]  # its target: the file's last 48 rows
    hparams_file, _, overrides = predict.sb.parse_arguments(args)
    with open(hparams_file) as f:
        trained = predict.load_hyperpyyaml(f, overrides)
    trained["checkpointer"].recover_if_possible(min_key="mse")
    with torch.no_grad():
        expected = splits["scaler"].inverse_transform(trained["model"].eval()(window[None])[0].double().numpy())
    np.testing.assert_allclose(written[splits["columns"]].to_numpy(), expected, rtol=1e-4, atol=1e-4)

    assert [list(v) for v in predict.future_index(None, 10, 3)[1:]] == [[10, 11, 12]]  # LSTNet's tables: row numbers
    other = tmp_path / "other"
    write_forecasting_csv(str(other), "weather")
    with pytest.raises(ValueError, match="has the variates .* but the model was trained on"):
        predict.main(args + [f"--input={other / 'weather.csv'}"])


# make test builds every data set's file once, cycling through the models (each model on 2-3 data sets); the other
# 16 files repeat a model and a reader another case covers (their training keys are compared above), so they are
# `exhaustive`. 321 / 862 variates: 7-20 s each on one loaded CPU core, so slow.
ONE_PER_DATASET = {f"{('dlinear', 'tsm2', 'tsqs')[i % 3]}_{name}.yaml" for i, name in enumerate(sorted(DATASETS))}


def _hparams_case(name):
    marks = [pytest.mark.slow] if ("traffic" in name or "electricity" in name) else []
    return pytest.param(name, marks=marks + ([] if name in ONE_PER_DATASET else [pytest.mark.exhaustive]))


@pytest.mark.parametrize("hparams", [_hparams_case(h) for h in HPARAMS])
def test_hparams_file_builds_and_runs_one_batch(recipe, data, tmp_path, hparams):
    # the file's own model (look-back 512, horizon 96, its dataset's variate count) on one batch of 2 windows
    result = _run(recipe, hparams, data, tmp_path / "run", "--debug", "--debug_batches=1", "--debug_epochs=1",
                  "--batch_size=2")
    name = hparams.split("_", 1)[1][:-5]
    assert result["dataset"] == name and result["seq_len"] == 512 and result["horizon"] == 96
    assert result["model"] == {"tsm2": "TSM2", "tsqs": "TSQS", "dlinear": "DLinear"}[hparams.split("_")[0]]
    assert result["test"]["mse"] > 0 and result["parameters"] > 0


def test_wrong_variate_count_is_refused(recipe, data, tmp_path):
    with pytest.raises(ValueError, match=r"weather.csv has 21 variates but n_vars is 7; set --n_vars=21"):
        _run(recipe, "tsm2_ETTh1.yaml", data, tmp_path / "run", "--csv_file=" + str(data / "weather.csv"))


def test_lstnet_raw_gzipped_exchange_rate_is_read_as_released(recipe, tmp_path):
    # the folder holds only LSTNet's exchange_rate.txt.gz; the hparams file's exchange_rate.csv finds it
    folder = tmp_path / "lstnet"
    write_forecasting_csv(str(folder), "exchange_rate", rows=1000, release="lstnet", compress=True)
    result = _run(recipe, "dlinear_exchange_rate.yaml", folder, tmp_path / "run", "--seq_len=96", "--horizon=24",
                  "--number_of_epochs=1", "--train_stride=8")
    assert result["dataset"] == "exchange_rate" and result["test"]["mse"] > 0
