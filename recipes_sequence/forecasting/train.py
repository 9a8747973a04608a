#!/usr/bin/env python3
"""Recipe: multivariate long-term forecasting with TSM2 / TSQS (MambaMixer / QSMixer blocks), and the DLinear control.

Paper: A. Behrouz, M. Santacatterina, R. Zabih, "MambaMixer: Efficient Selective State Space Models with Dual Token
and Channel Selection" (arXiv 2403.19888 v2), App. H.3-H.4, Table 10; our choices where the paper is silent:
docs/mambamixer.md, 'Time-series forecasting'.

To run this recipe (one hparams file per model and dataset, the horizon an override: 96, 192, 336 or 720):
    python train.py hparams/tsm2_ETTh1.yaml --data_folder=/path/to/ETT-small --horizon=336
    python train.py hparams/tsqs_traffic.yaml --data_folder=/path/to/traffic --horizon=96

``data_folder`` holds the official CSV (``ETTh1.csv`` ... of ETT-small, ``weather.csv``, ``electricity.csv``,
``traffic.csv``, ``exchange_rate.csv`` of the Autoformer release), or LSTNet's raw ``exchange_rate.txt`` (no header,
no dates), either also gzipped as released; ``hparams/dlinear_<dataset>.yaml`` trains the DLinear control on the
same windows; ``--plot`` writes ``forecast_<dataset>.png`` (one test window); ``python -m ssm_plugins.data.timeseries --out DIR
--dataset ETTh1`` writes a small generated file in the same format. The standard splits and the train-split
StandardScaler are those of the Informer / Autoformer / PatchTST code (``ssm_plugins.data.timeseries``); windows of
``seq_len`` = 512 steps and stride 1 (App. H.4). Training minimises the MSE with Adam, anneals the learning rate
with SpeechBrain's NewBob scheduler on the validation MSE (``--lr_decay=every_epoch``: halved after every epoch, as
the Informer-family code does), stops early (``EpochCounterWithStopper``) and tests the
checkpoint with the lowest validation MSE. MSE and MAE are on the normalised test set (as in Table 10) and are
written to ``<output_folder>/test_stats.json`` together with the naive "repeat the last value" forecast's.
"""
import json
import os
import sys

import speechbrain as sb
import torch
import torch.nn.functional as F

from ssm_plugins.data.timeseries import ForecastWindows, load_forecasting_splits, resolve_forecasting_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sequence_brain import experiment  # noqa: E402  (recipes_sequence/sequence_brain.py: the shared start)


class ForecastErrors:
    """Mean squared and absolute error over every forecast value of a stage (torch's mse / l1 losses summed;
    torchmetrics is not in the stack)."""

    def __init__(self):
        self.squared = self.absolute = 0.0
        self.count = 0

    def append(self, predictions, targets):
        predictions, targets = predictions.detach().float(), targets.detach().float()
        self.squared += F.mse_loss(predictions, targets, reduction="sum").item()
        self.absolute += F.l1_loss(predictions, targets, reduction="sum").item()
        self.count += targets.numel()

    def summarize(self):
        if self.count == 0:
            raise ValueError("no forecasts were appended")
        return {"mse": self.squared / self.count, "mae": self.absolute / self.count}


class ForecastBrain(sb.Brain):
    """(look-back window, target) batches -> TSM2 / TSQS forecast; MSE training loss."""

    def compute_forward(self, batch, stage):
        inputs, _ = batch
        return self.modules.model(inputs.to(self.device))

    def compute_objectives(self, predictions, batch, stage):
        targets = batch[1].to(self.device)
        if stage != sb.Stage.TRAIN:
            self.errors.append(predictions, targets)
        return self.hparams.compute_cost(predictions, targets)

    def on_stage_start(self, stage, epoch=None):
        if stage != sb.Stage.TRAIN:
            self.errors = ForecastErrors()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == sb.Stage.TRAIN:
            self.train_stats = {"loss": stage_loss}
            return
        stats = self.errors.summarize()
        if stage == sb.Stage.VALID:
            # every_epoch: lradj='type1' of the Informer / Autoformer / DLinear code
            if self.hparams.lr_decay == "every_epoch":
                old_lr = self.optimizer.param_groups[0]["lr"]
                new_lr = old_lr * 0.5
            else:  # 'plateau': NewBob, halved when the validation MSE did not fall
                old_lr, new_lr = self.hparams.lr_annealing(stats["mse"])
            sb.nnet.schedulers.update_learning_rate(self.optimizer, new_lr)
            self.hparams.epoch_counter.update_metric(stats["mse"])
            self.hparams.train_logger.log_stats(stats_meta={"epoch": epoch, "lr": old_lr},
                                                train_stats=self.train_stats, valid_stats=stats)
            self.checkpointer.save_and_keep_only(meta={"mse": stats["mse"]}, min_keys=["mse"])
        else:
            self.hparams.train_logger.log_stats({"Epoch loaded": self.hparams.epoch_counter.current},
                                                test_stats=stats)
            self.test_stats = stats


def repeat_last_errors(dataset, batch_size=256):
    """The naive forecast that repeats the last observed value over the horizon, on ``dataset``'s windows."""
    errors = ForecastErrors()
    for inputs, targets in torch.utils.data.DataLoader(dataset, batch_size=batch_size):
        errors.append(inputs[:, -1:].expand_as(targets), targets)
    return errors.summarize()


def dataio_prep(hparams):
    """The train / valid / test windows of the standard split of ``csv_file`` (or the same dataset's file under
    another release name: ``.gz``, LSTNet's ``.txt``)."""
    path = resolve_forecasting_file(hparams["csv_file"])
    splits = load_forecasting_splits(path, hparams["seq_len"], hparams["horizon"])
    print(f"data: {path}, {len(splits['columns'])} variates, split rows (with look-back) "
          f"{'/'.join(str(len(splits[k])) for k in ('train', 'valid', 'test'))}")
    if len(splits["columns"]) != hparams["n_vars"]:
        raise ValueError(f"{path} has {len(splits['columns'])} variates but n_vars is "
                         f"{hparams['n_vars']}; set --n_vars={len(splits['columns'])} or use the hparams file of "
                         f"that dataset")
    strides = {"train": hparams["train_stride"], "valid": 1, "test": 1}
    datasets = {split: ForecastWindows(splits[split], hparams["seq_len"], hparams["horizon"], stride=strides[split])
                for split in ("train", "valid", "test")}
    datasets["columns"] = splits["columns"]
    datasets["scaler"] = splits["scaler"]
    return datasets


def plot_forecast(model, dataset, columns, path, title, window=0, n_vars=3):
    """A PNG of one test window: the look-back, the truth and the forecast of ``n_vars`` variates (the first ones
    and the last, the target ``OT`` of the Autoformer files), normalised scale, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inputs, targets = dataset[window]
    model.eval()
    with torch.no_grad():
        forecast = model(inputs[None].to(next(model.parameters()).device))[0].cpu()
    total = inputs.shape[1]
    shown = list(range(min(n_vars, total) - 1)) + [total - 1]
    seq_len, horizon = len(inputs), len(targets)
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 2.4 * len(shown)), sharex=True, squeeze=False)
    for v, ax in zip(shown, axes[:, 0]):
        ax.plot(range(seq_len), inputs[:, v], color="0.5", lw=0.8, label="look-back")
        ax.plot(range(seq_len, seq_len + horizon), targets[:, v], color="k", lw=1.0, label="truth")
        ax.plot(range(seq_len, seq_len + horizon), forecast[:, v], color="C3", lw=1.0, label="forecast")
        ax.axvline(seq_len, color="0.8", lw=0.8)
        ax.set_ylabel(str(columns[v]))
    axes[0, 0].legend(loc="upper left", fontsize=8, ncol=3)
    axes[0, 0].set_title(title, fontsize=9)
    axes[-1, 0].set_xlabel("step (normalised values)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = ["--plot=True" if a == "--plot" else a for a in argv]  # a bare flag for the hparams key
    hparams, run_opts = experiment(argv)
    if hparams.setdefault("lr_decay", "plateau") not in ("plateau", "every_epoch"):  # before any data is read
        raise ValueError(f"lr_decay must be 'plateau' or 'every_epoch', got {hparams['lr_decay']!r}")
    datasets = dataio_prep(hparams)
    columns = datasets.pop("columns")
    scaler = datasets.pop("scaler")
    if sb.utils.distributed.if_main_process():  # predict.py puts new data on the scale the model was trained on
        with open(os.path.join(hparams["output_folder"], "scaler.json"), "w") as f:
            json.dump({"columns": columns, "mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist()}, f)

    brain = ForecastBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                          run_opts=run_opts, checkpointer=hparams["checkpointer"])
    n_params = sum(p.numel() for p in hparams["model"].parameters())
    print(f"{hparams['model_name']} on {hparams['dataset']}: {n_params:,} parameters, look-back {hparams['seq_len']}, "
          f"horizon {hparams['horizon']}, windows train/valid/test "
          f"{len(datasets['train'])}/{len(datasets['valid'])}/{len(datasets['test'])}")

    train_kwargs = dict(hparams["dataloader_options"])
    fraction = hparams.get("train_fraction", 1.0)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1], got {fraction}")
    if fraction < 1.0:  # each epoch a fresh random subset of the windows (all of them over the epochs)
        train_kwargs.pop("shuffle", None)
        train_kwargs["sampler"] = torch.utils.data.RandomSampler(
            datasets["train"], num_samples=max(1, int(fraction * len(datasets["train"]))))
    brain.fit(brain.hparams.epoch_counter, datasets["train"], datasets["valid"],
              train_loader_kwargs=train_kwargs,
              valid_loader_kwargs=hparams["test_dataloader_options"])
    trained = brain.hparams.epoch_counter.current  # the test below loads the best epoch's checkpoint
    brain.evaluate(datasets["test"], min_key="mse", test_loader_kwargs=hparams["test_dataloader_options"])

    result = {"model": hparams["model_name"], "dataset": hparams["dataset"], "seq_len": hparams["seq_len"],
              "horizon": hparams["horizon"], "parameters": n_params, "epochs": trained,
              "best_epoch": brain.hparams.epoch_counter.current,
              "test": brain.test_stats, "repeat_last": repeat_last_errors(datasets["test"])}
    if sb.utils.distributed.if_main_process():
        print(f"Test MSE {result['test']['mse']:.4f}, MAE {result['test']['mae']:.4f} (repeat-last MSE "
              f"{result['repeat_last']['mse']:.4f}, MAE {result['repeat_last']['mae']:.4f}; normalised scale)")
        with open(os.path.join(hparams["output_folder"], "test_stats.json"), "w") as f:
            json.dump(result, f, indent=1)
        if hparams.get("plot", False):
            title = (f"{hparams['model_name']} on {hparams['dataset']}, first test window, L {hparams['seq_len']}, "
                     f"H {hparams['horizon']}: test MSE {result['test']['mse']:.3f} (all windows)")
            png = plot_forecast(hparams["model"], datasets["test"], columns,
                                os.path.join(hparams["output_folder"], f"forecast_{hparams['dataset']}.png"), title)
            print(f"plot: {png}")
    return result


if __name__ == "__main__":
    main()
