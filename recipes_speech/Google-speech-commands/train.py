#!/usr/bin/env python3
"""Recipe: eSSM keyword classification on raw waveforms, Google Speech Commands v2 (SC10 / SC35).

Paper: T. Liang, H.-X. Li, "Efficient State Space Model via Fast Tensor Convolution and Block Diagonalization"
(arXiv 2402.15290), Tables 3 and 8; settings from Table 10 and App. E.2, gaps filled as in docs/essm.md.

To run this recipe:
    python train.py hparams/essm_sc10.yaml --data_folder=/path/to/speech_commands_v0.02
    python train.py hparams/essm_sc35.yaml --data_folder=/path/to/speech_commands_v0.02

The model is ``ssm_plugins.speechbrain.ESSMWaveformClassifier`` (one waveform sample per step). Training uses
the paper's two learning rates (SSM parameters at ``lr_ssm`` without weight decay, the rest at ``lr``), NLL loss
on log-probabilities, the classification error on valid/test, and keeps the checkpoint with the lowest valid
error. The test set is evaluated with that checkpoint at ``sample_rate`` and, when ``zero_shot_downsample`` > 1,
zero-shot at ``sample_rate / zero_shot_downsample`` (Δ multiplied by the same factor; Table 3's 8 kHz column).
``<save_folder>/inference/`` then holds that checkpoint for
``ssm_plugins.speechbrain_inference.KeywordClassifier.from_hparams(source=...)`` and its ``classify_file``.
"""
import json
import os
import sys

import soundfile
import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml
from speechbrain.utils.distributed import run_on_main
from ssm_plugins.speechbrain import ddp_init_group
from ssm_plugins.speechbrain_inference import write_inference_folder

from prepare_GSC import prepare_GSC, words_for


class KeywordBrain(sb.Brain):
    """Keyword classification: waveform -> eSSM classifier -> log-probabilities over the commands."""

    zero_shot_factor = 1  # > 1 while evaluating the zero-shot lower-rate test set

    def compute_forward(self, batch, stage):
        batch = batch.to(self.device)
        wavs, wav_lens = batch.sig
        dt_scale = None
        if stage == sb.Stage.TEST and self.zero_shot_factor > 1:
            wavs = wavs[:, ::self.zero_shot_factor]  # subsampling as in the paper's zero-shot test
            dt_scale = float(self.zero_shot_factor)
        if getattr(self.hparams, "compute_features", None) is not None:  # MFCC setting: SpeechBrain's feature modules
            wavs = self.modules.mean_var_norm(self.hparams.compute_features(wavs), wav_lens)
        return self.modules.classifier(wavs, wav_lens, dt_scale=dt_scale)

    def compute_objectives(self, predictions, batch, stage):
        commands, _ = batch.command_encoded  # (B, 1)
        loss = self.hparams.compute_cost(predictions, commands)
        if stage != sb.Stage.TRAIN:
            self.error_metrics.append(batch.id, predictions, commands)
        return loss

    def init_optimizers(self):
        """AdamW over the paper's parameter groups (App. E.1-E.2), and the learning-rate schedule."""
        classifier = getattr(self.modules.classifier, "module", self.modules.classifier)  # DDP-wrapped or not
        groups = classifier.param_groups(lr=self.hparams.lr, lr_ssm=self.hparams.lr_ssm,
                                         weight_decay=self.hparams.weight_decay,
                                         lr_other_params=self.hparams.lr_other_params)
        self.optimizer = self.opt_class(groups)
        self.optimizers_dict = {"opt_class": self.optimizer}
        self.lr_scheduler = self.hparams.lr_scheduler(self.optimizer)
        if self.checkpointer is not None:
            self.checkpointer.add_recoverable("optimizer", self.optimizer)
            self.checkpointer.add_recoverable("lr_scheduler", self.lr_scheduler)

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        if should_step and self.hparams.lr_scheduler_interval == "step":
            self.lr_scheduler.step()

    def on_stage_start(self, stage, epoch=None):
        if stage != sb.Stage.TRAIN:
            self.error_metrics = self.hparams.error_stats()
        if stage == sb.Stage.VALID and self.hparams.precise_bn_batches > 0:
            self.recalibrate_batchnorm(self.hparams.precise_bn_batches)

    @torch.no_grad()
    def recalibrate_batchnorm(self, n_batches):
        """Re-estimate the BatchNorm running statistics of the current weights as a plain average over
        ``n_batches`` training batches ("precise BN"). On raw waveforms the per-batch statistics are dominated by a
        few clips and move with the weights, so the default running average (momentum 0.1) can be far from the
        current weights' statistics and spoil validation/test in eval mode."""
        norms = [m for m in self.modules.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if not norms:
            return
        self.modules.eval()
        momenta = [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # cumulative average
            m.train()
        for i, batch in enumerate(self.bn_calibration_loader):
            if i >= n_batches:
                break
            self.compute_forward(batch, sb.Stage.VALID)
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
            m.eval()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        stats = {"loss": stage_loss}
        if stage == sb.Stage.TRAIN:
            self.train_stats = stats
            return
        stats["error_rate"] = self.error_metrics.summarize("average")
        stats["accuracy"] = 1.0 - stats["error_rate"]
        if stage == sb.Stage.VALID:
            lrs = [group["lr"] for group in self.optimizer.param_groups]
            if self.hparams.lr_scheduler_interval == "epoch":
                self.lr_scheduler.step(stats["accuracy"])  # ReduceLROnPlateau(mode="max") on valid accuracy
            self.hparams.train_logger.log_stats(
                stats_meta={"epoch": epoch, "lr": max(lrs), "lr_ssm": min(lrs)},
                train_stats=self.train_stats, valid_stats=stats)
            self.checkpointer.save_and_keep_only(meta={"error_rate": stats["error_rate"]}, min_keys=["error_rate"])
        else:
            rate = self.hparams.sample_rate // self.zero_shot_factor
            self.hparams.train_logger.log_stats(
                {"Epoch loaded": self.hparams.epoch_counter.current, "sample_rate": rate}, test_stats=stats)
            self.test_stats[rate] = stats


def dataio_prep(hparams, words):
    """Datasets of (id, waveform, command index); the label order is the task's word list."""
    first = None
    datasets = {}
    for split in ("train", "valid", "test"):
        datasets[split] = sb.dataio.dataset.DynamicItemDataset.from_csv(
            csv_path=hparams[f"{split}_annotation"], replacements={"data_root": hparams["data_folder"]})
        first = first or datasets[split].data[datasets[split].data_ids[0]]["wav"]
    rate = soundfile.info(first).samplerate
    if rate != hparams["sample_rate"]:
        raise ValueError(f"sample_rate is {hparams['sample_rate']} but the data is at {rate} Hz ({first}); "
                         f"set --sample_rate={rate} or resample the data")

    label_encoder = sb.dataio.encoder.CategoricalEncoder()
    label_encoder.load_or_create(os.path.join(hparams["save_folder"], "label_encoder.txt"), from_iterables=[words])
    label_encoder.expect_len(len(words))

    @sb.utils.data_pipeline.takes("wav")
    @sb.utils.data_pipeline.provides("sig")
    def audio_pipeline(wav):
        return sb.dataio.dataio.read_audio(wav)

    @sb.utils.data_pipeline.takes("command")
    @sb.utils.data_pipeline.provides("command_encoded")
    def label_pipeline(command):
        return label_encoder.encode_sequence_torch([command])

    splits = list(datasets.values())
    sb.dataio.dataset.add_dynamic_item(splits, audio_pipeline)
    sb.dataio.dataset.add_dynamic_item(splits, label_pipeline)
    sb.dataio.dataset.set_output_keys(splits, ["id", "sig", "command_encoded"])
    return datasets


if __name__ == "__main__":
    hparams_file, run_opts, overrides = sb.parse_arguments(sys.argv[1:])
    ddp_init_group(run_opts)
    with open(hparams_file) as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    sb.create_experiment_directory(experiment_directory=hparams["output_folder"],
                                   hyperparams_to_save=hparams_file, overrides=overrides)

    words = words_for(hparams["number_of_commands"])
    run_on_main(prepare_GSC, kwargs={
        "data_folder": hparams["data_folder"], "save_folder": hparams["save_folder"],
        "number_of_commands": hparams["number_of_commands"], "skip_prep": hparams["skip_prep"]})
    datasets = dataio_prep(hparams, words)

    brain = KeywordBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                         run_opts=run_opts, checkpointer=hparams["checkpointer"])
    brain.bn_calibration_loader = sb.dataio.dataloader.make_dataloader(
        datasets["train"], **hparams["dataloader_options"])
    n_params = sum(p.numel() for p in hparams["classifier"].parameters())
    print(f"eSSM keyword classifier: {n_params:,} parameters, {len(words)} commands")

    brain.fit(brain.hparams.epoch_counter, datasets["train"], datasets["valid"],
              train_loader_kwargs=hparams["dataloader_options"],
              valid_loader_kwargs=hparams["test_dataloader_options"])

    brain.test_stats = {}
    brain.evaluate(datasets["test"], min_key="error_rate", test_loader_kwargs=hparams["test_dataloader_options"])
    if hparams["zero_shot_downsample"] > 1:
        brain.zero_shot_factor = int(hparams["zero_shot_downsample"])
        brain.evaluate(datasets["test"], min_key="error_rate",
                       test_loader_kwargs=hparams["test_dataloader_options"])
    if sb.utils.distributed.if_main_process():
        # ssm_plugins.speechbrain_inference.KeywordClassifier.from_hparams(source=<save_folder>/inference)
        mfcc = hparams.get("compute_features") is not None
        write_inference_folder(
            hparams_file, overrides, brain.checkpointer, os.path.join(hparams["save_folder"], "inference"),
            modules={"classifier": ("classifier", "classifier"),
                     **({"mean_var_norm": ("mean_var_norm", "normalizer")} if mfcc else {})},
            keys=("sample_rate", *(("compute_features",) if mfcc else ())),
            objects={"label_encoder": ("!new:speechbrain.dataio.encoder.CategoricalEncoder", {},
                                       os.path.join(hparams["save_folder"], "label_encoder.txt")),
                     "audio_normalizer": ("!new:speechbrain.dataio.preprocess.AudioNormalizer",
                                          {"sample_rate": hparams["sample_rate"]}, None)},
            min_key="error_rate")
        for rate, stats in brain.test_stats.items():
            zero_shot = " (zero-shot)" if rate != hparams["sample_rate"] else ""
            print(f"Test accuracy at {rate} Hz{zero_shot}: {100 * stats['accuracy']:.2f}% "
                  f"({len(datasets['test'])} clips)")
        with open(os.path.join(hparams["output_folder"], "test_stats.json"), "w") as f:
            json.dump({"parameters": n_params, "epochs": brain.hparams.epoch_counter.current,
                       "test": {str(rate): stats for rate, stats in brain.test_stats.items()}}, f, indent=1)
