#!/usr/bin/env python3
"""Recipe: temporal action segmentation with ASMambaMixer / ASQSMixer (MambaMixer / QSMixer blocks in ASFormer's
encoder), and MS-TCN's single stage as the control.

Paper: A. Behrouz, M. Santacatterina, R. Zabih, "MambaMixer: Efficient Selective State Space Models with Dual Token
and Channel Selection" (arXiv 2403.19888 v2), App. H.2, Table 9 (GTEA: Acc, Edit, F1@{10, 25, 50}); our choices
where it is silent: docs/mambamixer.md, 'Video'.

To run this recipe (one run per split; the paper's figure is the mean over GTEA's 4 splits):
    python train.py hparams/asm2_gtea.yaml --data_folder=/path/to/ms-tcn/data --split=1
    python train.py hparams/sstcn_gtea.yaml --data_folder=/path/to/ms-tcn/data --split=1   # the control

``data_folder`` is MS-TCN's released ``data/`` folder (``gtea/mapping.txt``, ``gtea/splits/``, ``gtea/features/*.npy``
(2048 x T I3D features), ``gtea/groundTruth/*.txt``), read as released (``ssm_plugins.data.action_segmentation``);
``python -m ssm_plugins.data.action_segmentation --out DIR --dataset gtea`` writes a small generated one in the same
layout. Training is ASFormer's: batch 1 (one video), Adam 5e-4 with weight decay 1e-5, the learning rate halved
when the epoch's training loss has not fallen for 3 epochs (torch's ReduceLROnPlateau), 120 epochs, MS-TCN's loss
(cross-entropy + 0.15 x the truncated MSE of neighbouring frames' log-probabilities, tau = 4); there is no
validation split, so the last epoch's model is tested (as ASFormer and MS-TCN do). Test metrics (MS-TCN's eval.py)
go to ``<output_folder>/test_stats.json``.
"""
import sys

import speechbrain as sb
import torch
import torch.nn.functional as F
from hyperpyyaml import load_hyperpyyaml

from ssm_plugins.data.action_segmentation import ActionSegmentationVideos, SegmentationMetrics
from ssm_plugins.speechbrain import ddp_init_group, write_test_stats


def segmentation_loss(logits: torch.Tensor, labels: torch.Tensor, smoothing_weight: float = 0.15,
                      smoothing_clamp: float = 16.0) -> torch.Tensor:
    """MS-TCN's loss (Farha & Gall 2019, Eq. 4-6): frame-wise cross-entropy + ``smoothing_weight`` x the mean of the
    squared difference of neighbouring frames' log-probabilities, each clamped at tau^2 = ``smoothing_clamp``, the
    earlier frame detached. logits (batch, T, C), labels (batch, T)."""
    ce = F.cross_entropy(logits.transpose(1, 2), labels)
    log_probs = F.log_softmax(logits, dim=-1)
    smooth = F.mse_loss(log_probs[:, 1:], log_probs.detach()[:, :-1], reduction="none").clamp(0, smoothing_clamp)
    return ce + smoothing_weight * smooth.mean()


class SegmentationBrain(sb.Brain):
    """(features, labels) of one video per batch -> frame logits; MS-TCN's loss; lr halved on a training-loss
    plateau; a checkpoint after every epoch (the last one is tested)."""

    def compute_forward(self, batch, stage):
        features, _ = batch
        return self.modules.model(features.to(self.device))

    def compute_objectives(self, logits, batch, stage):
        return segmentation_loss(logits, batch[1].to(self.device), self.hparams.smoothing_weight,
                                 self.hparams.smoothing_clamp)

    def init_optimizers(self):
        super().init_optimizers()
        if self.opt_class is not None:
            self.lr_scheduler = self.hparams.lr_scheduler(self.optimizer)
            if self.checkpointer is not None:
                self.checkpointer.add_recoverable("lr_scheduler", self.lr_scheduler)

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage != sb.Stage.TRAIN:
            return
        lr = self.optimizer.param_groups[0]["lr"]
        self.lr_scheduler.step(stage_loss)
        self.hparams.train_logger.log_stats(stats_meta={"epoch": epoch, "lr": lr}, train_stats={"loss": stage_loss})
        self.checkpointer.save_and_keep_only(meta={"epoch": epoch, "loss": stage_loss}, keep_recent=True,
                                             num_to_keep=1)


@torch.no_grad()
def test_metrics(model, videos: ActionSegmentationVideos, device) -> dict:
    """MS-TCN's metrics over the test videos: each video's frame predictions at the features' sample rate, every
    prediction repeated ``sample_rate`` times, compared with the full-rate ground truth."""
    model.eval()
    metrics = SegmentationMetrics(background=("background",))
    rate = videos.sample_rate
    for features, labels in videos:
        predicted = model(features[None].to(device))[0].argmax(-1).cpu()
        predicted = predicted.repeat_interleave(rate)[: len(labels)]  # ceil(T / rate) steps cover the T frames
        names = [videos.actions[i] for i in predicted.tolist()]
        metrics.append(names, [videos.actions[i] for i in labels.tolist()])
    return metrics.summarize()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    hparams_file, run_opts, overrides = sb.parse_arguments(argv)
    ddp_init_group(run_opts)
    with open(hparams_file) as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    sb.create_experiment_directory(experiment_directory=hparams["output_folder"],
                                   hyperparams_to_save=hparams_file, overrides=overrides)
    if hparams["batch_size"] != 1:
        raise ValueError(f"batch_size must be 1 (one video per step, as MS-TCN and ASFormer train: the mixers "
                         f"scan whole videos, so padded frames would leak into them), got {hparams['batch_size']}")
    common = dict(data_folder=hparams["data_folder"], dataset=hparams["dataset"], split=hparams["split"],
                  sample_rate=hparams["sample_rate"])
    train = ActionSegmentationVideos(stage="train", **common)
    test = ActionSegmentationVideos(stage="test", full_rate_labels=True, **common)
    if len(train.actions) != hparams["num_classes"]:
        raise ValueError(f"{train.root}/mapping.txt has {len(train.actions)} actions but num_classes is "
                         f"{hparams['num_classes']}; set --num_classes={len(train.actions)}")
    model = hparams["model"]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{hparams['model_name']} on {hparams['dataset']} split {hparams['split']}: {n_params:,} parameters, "
          f"{len(train)} train / {len(test)} test videos, sample rate {train.sample_rate}")

    brain = SegmentationBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                              run_opts=run_opts, checkpointer=hparams["checkpointer"])
    brain.fit(hparams["epoch_counter"], train, train_loader_kwargs=hparams["dataloader_options"])
    stats = test_metrics(brain.modules.model, test, brain.device)
    result = {"model": hparams["model_name"], "dataset": hparams["dataset"], "split": hparams["split"],
              "parameters": n_params, "epochs": hparams["epoch_counter"].current, "test": stats}
    write_test_stats(hparams, result)
    return result


if __name__ == "__main__":
    main()
