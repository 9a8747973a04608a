#!/usr/bin/env python3
"""Recipe: temporal action localisation with ActionMambaMixer / ActionQSMixer (MambaMixer / QSMixer blocks in
ActionFormer), and ActionFormer's own local-attention transformer as the control.

Paper: A. Behrouz, M. Santacatterina, R. Zabih, "MambaMixer: Efficient Selective State Space Models with Dual Token
and Channel Selection" (arXiv 2403.19888 v2), App. H.2, Table 8 (HACS Segment: mAP at tIoU 0.5 / 0.75 / 0.95 on
the validation videos); our choices where it is silent: docs/mambamixer.md, 'Video'.

To run this recipe:
    python train.py hparams/am2_hacs.yaml --data_folder=/path/to/hacs
    python train.py hparams/actionformer_hacs.yaml --data_folder=/path/to/hacs   # the control

``data_folder`` holds the release as ActionFormer-family code reads it (``ssm_plugins.data.action_localization``):
the ActivityNet-format annotation JSON and one SlowFast feature file per video; ``python -m
ssm_plugins.data.action_localization --out DIR`` writes a small generated one in the same layout. Every video's
features are resized to ``seq_len`` steps (ActionFormer's fixed-length protocol for ActivityNet-style data).
Training is ActionFormer's (ActivityNet): AdamW 1e-3, weight decay 0.05 (none on vectors), batch 16, linear warm-up
over 5 epochs then cosine decay to 0 (``ssm_plugins.speechbrain.warmup_cosine_scheduler``, per step) over 15 epochs
in all, gradients clipped at norm 1. The last epoch's model is tested on the ``test_subset`` videos (HACS:
'validation', as the paper and ActionFormer report); the metrics go to ``<output_folder>/test_stats.json``.
"""
import sys

import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml

from ssm_plugins.data.action_localization import ActionLocalizationVideos, LocalizationMetrics
from ssm_plugins.speechbrain import ddp_init_group, warmup_cosine_scheduler, write_test_stats


class LocalizationBrain(sb.Brain):
    """A batch of videos at ``seq_len`` steps -> per-level logits and distances; ActionFormer's losses; warm-up +
    cosine per step; a checkpoint after every epoch (the last one is tested)."""

    def compute_forward(self, batch, stage):
        return self.modules.model(batch["features"].to(self.device))

    def compute_objectives(self, outputs, batch, stage):
        # the model's own methods on the unwrapped module (self.modules.model is DDP-wrapped under torchrun)
        losses = self.hparams.model.loss(outputs, batch["segments"], batch["labels"])
        self.last_losses = {k: v.detach() for k, v in losses.items()}
        return losses["total"]

    def init_optimizers(self):
        """AdamW in two groups: no weight decay on vectors (biases, norms, the heads' scales: ActionFormer's rule)
        and on what the model names in ``no_weight_decay()`` (the mixers' A_log and D, as Mamba keeps them)."""
        if self.opt_class is None:
            return
        model = self.hparams.model
        skip = model.no_weight_decay()
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        no_decay = [p for n, p in named if p.dim() <= 1 or n in skip]
        decay = [p for n, p in named if not (p.dim() <= 1 or n in skip)]
        self.optimizer = self.opt_class([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
        self.optimizers_dict = {"opt_class": self.optimizer}
        steps_per_epoch = self.hparams.steps_per_epoch
        self.lr_scheduler = warmup_cosine_scheduler(self.optimizer, self.hparams.warmup_epochs * steps_per_epoch,
                                                    self.hparams.number_of_epochs * steps_per_epoch)
        if self.checkpointer is not None:
            self.checkpointer.add_recoverable("optimizer", self.optimizer)
            self.checkpointer.add_recoverable("lr_scheduler", self.lr_scheduler)

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        if should_step:
            self.lr_scheduler.step()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage != sb.Stage.TRAIN:
            return
        stats = {"loss": stage_loss, **{k: round(v.item(), 4) for k, v in self.last_losses.items() if k != "total"}}
        self.hparams.train_logger.log_stats(
            stats_meta={"epoch": epoch, "lr": self.optimizer.param_groups[0]["lr"]}, train_stats=stats)
        self.checkpointer.save_and_keep_only(meta={"epoch": epoch, "loss": stage_loss}, keep_recent=True,
                                             num_to_keep=1)


@torch.no_grad()
def test_metrics(model, videos: ActionLocalizationVideos, batch_size: int, device, test_cfg: dict) -> dict:
    """ActivityNet's mAP at tIoU 0.5:0.05:0.95 over ``videos``: the model's segments mapped back to seconds."""
    model.eval()
    metrics = LocalizationMetrics(videos.ground_truth())
    loader = torch.utils.data.DataLoader(videos, batch_size=batch_size, collate_fn=ActionLocalizationVideos.collate)
    for batch in loader:
        predictions = model.predict(model(batch["features"].to(device)), **test_cfg)
        for video, duration, (segments, labels, scores) in zip(batch["video"], batch["duration"], predictions):
            seconds = (segments.cpu() * (float(duration) / videos.seq_len)).numpy()
            metrics.append(video, seconds, [videos.classes[i] for i in labels.tolist()], scores.cpu().numpy())
    return metrics.summarize()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    hparams_file, run_opts, overrides = sb.parse_arguments(argv)
    ddp_init_group(run_opts)
    with open(hparams_file) as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    sb.create_experiment_directory(experiment_directory=hparams["output_folder"],
                                   hyperparams_to_save=hparams_file, overrides=overrides)
    common = {key: hparams[key] for key in ("data_folder", "dataset", "seq_len", "json_file", "feature_folder",
                                             "feature_ext")}
    train = ActionLocalizationVideos(subset="training", **common)
    test = ActionLocalizationVideos(subset=hparams["test_subset"], classes=train.classes, **common)
    if len(train.classes) != hparams["num_classes"]:
        raise ValueError(f"{train.json_file} has {len(train.classes)} action classes in its training videos but "
                         f"num_classes is {hparams['num_classes']}; set --num_classes={len(train.classes)}")
    features_dim = train[0]["features"].shape[1]
    if features_dim != hparams["features_dim"]:
        raise ValueError(f"the features of {train.videos[0]} have {features_dim} channels but features_dim is "
                         f"{hparams['features_dim']}; set --features_dim={features_dim}")
    model = hparams["model"]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{hparams['model_name']} on {hparams['dataset']}: {n_params:,} parameters, {len(train)} training / "
          f"{len(test)} {hparams['test_subset']} videos at {hparams['seq_len']} steps")

    loader_kwargs = dict(hparams["dataloader_options"], collate_fn=ActionLocalizationVideos.collate)
    hparams["steps_per_epoch"] = -(-len(train) // loader_kwargs["batch_size"])
    brain = LocalizationBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                              run_opts=run_opts, checkpointer=hparams["checkpointer"])
    brain.fit(hparams["epoch_counter"], train, train_loader_kwargs=loader_kwargs)
    stats = test_metrics(hparams["model"], test, loader_kwargs["batch_size"], brain.device, hparams["test_cfg"])
    result = {"model": hparams["model_name"], "dataset": hparams["dataset"], "test_subset": hparams["test_subset"],
              "parameters": n_params, "epochs": hparams["epoch_counter"].current, "test": stats}
    write_test_stats(hparams, result, digits=2)
    return result


if __name__ == "__main__":
    main()
