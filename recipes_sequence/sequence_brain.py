"""The SpeechBrain ``Brain`` both sequence-classification recipes use (LRA/ and sequential_images/).

One class instead of two copies: the recipes differ only in their data (what ``dataio_prep`` of each train.py
builds), not in how a classifier is trained. A train.py imports it after putting this folder on ``sys.path``
(``recipes_sequence`` is a recipe collection, not a package), as SpeechBrain recipes import a sibling
``prepare_*.py``.

The hparams contract (keys this module reads; the recipe READMEs repeat it):

    model            the nn.Module (``!new:`` / ``!apply:timm.create_model``), called as
                     ``model(x)`` (x: (B, L, C) float, (B, L) token ids, or (B, C, H, W) with ``as_image``),
                     or ``model(x, padding_mask=mask)`` on padded token batches (see mask_padding),
                     ``model(x, x2, padding_mask=..., padding_mask2=...)`` for pair tasks (items with an ``x2``)
    modules          {model: <model>}
    opt_class        !name:torch.optim.AdamW (hyperparameters that every group shares)
    param_groups     optional !name: a callable ``f(model) -> list of param-group dicts`` (e.g.
                     ssm_plugins.models.essm.essm_param_groups with lr, lr_ssm, weight_decay, lr_other_params;
                     timm_weight_decay_groups below for a timm model with one lr);
                     absent: one group, ``opt_class``'s own lr / weight decay
    lr_scheduler     optional !name: ``f(optimizer)``: torch ReduceLROnPlateau (stepped on the valid accuracy),
                     any torch LRScheduler, or timm.scheduler.CosineLRScheduler (``step_update`` per step)
    lr_scheduler_interval   "epoch" or "step"
    mask_padding     True: padded steps are zeroed before every SSM convolution and excluded from the mean pool
                     (docs/essm.md, 'Padding mask'); False: masked in the pool only (the official code); ignored
                     when the batch has no padding (images)
    compute_cost     !name: loss f(log_probs (B, C), labels (B,)), e.g. speechbrain.nnet.losses.nll_loss
    error_stats      !name:speechbrain.utils.metric_stats.MetricStats (metric: classification_error)
    epoch_counter, checkpointer, train_logger   SpeechBrain's own
    limit_train_batches   optional float in (0, 1]: each epoch draws this fraction of the training set at
                     random (the released Path-X config: 0.5)
    max_grad_norm    SpeechBrain's run option (default 5.0), here applied to the gradients of *all* parameter
                     groups (SpeechBrain clips the first group only); .inf: no clipping (eSSM), 1.0: Mega
"""
import json
import os
import sys

import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml
from speechbrain.dataio.batch import PaddedBatch
from ssm_plugins.speechbrain import ddp_init_group


def timm_weight_decay_groups(model: torch.nn.Module, weight_decay: float) -> list:
    """``param_groups`` for a timm model: timm's own two groups (``timm.optim.param_groups_weight_decay``: no decay on
    biases, norms, other 1-D parameters and the model's ``no_weight_decay()`` names, e.g. SSM scalars)."""
    from timm.optim import param_groups_weight_decay

    return param_groups_weight_decay(model, weight_decay, no_weight_decay_list=model.no_weight_decay())


def padding_mask_from_lengths(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, L) bool, True at padded steps, from SpeechBrain's relative lengths (fractions of ``max_len``)."""
    absolute = torch.round(lengths * max_len).long()
    return torch.arange(max_len, device=lengths.device)[None, :] >= absolute[:, None]


class SequenceClassifierBrain(sb.Brain):
    """Sequence classification: batch ``x`` (and ``x2``) -> model -> log-probabilities over the classes."""

    test_stats = None

    def _input(self, padded):
        x, lengths = padded
        if x.dim() == 4:  # (B, C, H, W) images (``as_image``): never padded
            return x, None
        mask = padding_mask_from_lengths(lengths, x.shape[1])
        return x, (mask if bool(mask.any()) else None)

    def compute_forward(self, batch, stage):
        batch = batch.to(self.device)
        model = self.modules.model
        x, mask = self._input(batch.x)
        if hasattr(batch, "x2"):
            x2, mask2 = self._input(batch.x2)
            if mask is None and mask2 is None:
                logits = model(x, x2)
            else:
                logits = model(x, x2, padding_mask=mask, padding_mask2=mask2,
                               mask_blocks=getattr(self.hparams, "mask_padding", True))
        elif mask is None:
            logits = model(x)
        elif getattr(self.hparams, "mask_padding", True):
            logits = model(x, padding_mask=mask)
        else:  # official: padding reaches the SSM convolutions, only the mean pool skips it
            inner = getattr(model, "module", model)
            logits = inner.forward_head(inner.forward_features(x), padding_mask=mask)
        return torch.log_softmax(logits.float(), dim=-1)

    def compute_objectives(self, predictions, batch, stage):
        labels = batch.label.to(self.device)
        loss = self.hparams.compute_cost(predictions, labels)
        if stage != sb.Stage.TRAIN:
            self.error_metrics.append(batch.id, predictions, labels)
        return loss

    def init_optimizers(self):
        """``opt_class`` over ``param_groups(model)`` (the papers' two learning rates), and the scheduler."""
        model = getattr(self.modules.model, "module", self.modules.model)  # DDP-wrapped or not
        make_groups = getattr(self.hparams, "param_groups", None)
        params = make_groups(model) if make_groups is not None else model.parameters()
        self.optimizer = self.opt_class(params)
        self.optimizers_dict = {"opt_class": self.optimizer}
        make_scheduler = getattr(self.hparams, "lr_scheduler", None)
        self.lr_scheduler = make_scheduler(self.optimizer) if make_scheduler is not None else None
        if self.checkpointer is not None:
            self.checkpointer.add_recoverable("optimizer", self.optimizer)
            if hasattr(self.lr_scheduler, "step_update"):  # timm: state_dict() but no SpeechBrain hooks
                self.checkpointer.add_recoverable(
                    "lr_scheduler", self.lr_scheduler,
                    custom_save_hook=lambda obj, path: torch.save(obj.state_dict(), path),
                    custom_load_hook=lambda obj, path, *args, **kwargs: obj.load_state_dict(
                        torch.load(path, weights_only=False)))
            elif self.lr_scheduler is not None:
                self.checkpointer.add_recoverable("lr_scheduler", self.lr_scheduler)

    def optimizers_step(self):
        """SpeechBrain clips ``param_groups[0]`` only; with several groups (two learning rates) clip them all."""
        if not self.scaler.is_enabled():  # under AMP SpeechBrain unscales first; its own clip then applies
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        super().optimizers_step()

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        if should_step and self.lr_scheduler is not None and self.hparams.lr_scheduler_interval == "step":
            if hasattr(self.lr_scheduler, "step_update"):  # timm schedulers
                self.lr_scheduler.step_update(self.optimizer_step)
            else:
                self.lr_scheduler.step()

    def on_stage_start(self, stage, epoch=None):
        if stage != sb.Stage.TRAIN:
            self.error_metrics = self.hparams.error_stats()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        stats = {"loss": stage_loss}
        if stage == sb.Stage.TRAIN:
            self.train_stats = stats
            return
        stats["error_rate"] = self.error_metrics.summarize("average")
        stats["accuracy"] = 1.0 - stats["error_rate"]
        if stage == sb.Stage.VALID:
            lrs = [group["lr"] for group in self.optimizer.param_groups]
            if self.lr_scheduler is not None and self.hparams.lr_scheduler_interval == "epoch":
                if isinstance(self.lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    self.lr_scheduler.step(stats["accuracy"])  # mode="max" on the valid accuracy
                elif hasattr(self.lr_scheduler, "step_update"):
                    self.lr_scheduler.step(epoch)
                else:
                    self.lr_scheduler.step()
            self.hparams.train_logger.log_stats(
                stats_meta={"epoch": epoch, "lr": max(lrs), "lr_min_group": min(lrs)},
                train_stats=self.train_stats, valid_stats=stats)
            self.checkpointer.save_and_keep_only(meta={"error_rate": stats["error_rate"]},
                                                 min_keys=["error_rate"])
        else:
            self.hparams.train_logger.log_stats(
                {"Epoch loaded": self.hparams.epoch_counter.current}, test_stats=stats)
            self.test_stats = stats


def run(hparams, run_opts, datasets, collate_fn, extra_results=None):
    """Train on ``datasets['train']`` (validating on 'valid'), test the best checkpoint on 'test', write
    ``<output_folder>/test_stats.json``; returns the brain. ``collate_fn`` builds the padded batches."""
    brain = SequenceClassifierBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                                    run_opts=run_opts, checkpointer=hparams["checkpointer"])
    train_kwargs = dict(hparams["dataloader_options"], collate_fn=collate_fn)
    test_kwargs = dict(hparams["test_dataloader_options"], collate_fn=collate_fn)
    n_train = len(datasets["train"])
    fraction = hparams.get("limit_train_batches", 1.0)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"limit_train_batches must be in (0, 1], got {fraction}")
    if fraction < 1.0:  # a fresh random subset every epoch
        n_train = max(1, int(fraction * n_train))
        train_kwargs.pop("shuffle", None)
        train_kwargs["sampler"] = torch.utils.data.RandomSampler(datasets["train"], num_samples=n_train)
    if train_kwargs.get("drop_last") and n_train < train_kwargs["batch_size"]:
        raise ValueError(f"batch_size={train_kwargs['batch_size']} with drop_last leaves no training batch for "
                         f"{n_train} training examples")
    n_params = sum(p.numel() for p in hparams["model"].parameters())
    print(f"model: {n_params:,} parameters; train/valid/test: "
          f"{len(datasets['train'])}/{len(datasets['valid'])}/{len(datasets['test'])}")
    brain.fit(brain.hparams.epoch_counter, datasets["train"], datasets["valid"],
              train_loader_kwargs=train_kwargs, valid_loader_kwargs=test_kwargs)
    brain.evaluate(datasets["test"], min_key="error_rate", test_loader_kwargs=test_kwargs)
    if sb.utils.distributed.if_main_process():
        print(f"Test accuracy: {100 * brain.test_stats['accuracy']:.2f}% ({len(datasets['test'])} examples)")
        results = {"parameters": n_params, "epochs": brain.hparams.epoch_counter.current,
                   "test": brain.test_stats, **(extra_results or {})}
        with open(os.path.join(hparams["output_folder"], "test_stats.json"), "w") as f:
            json.dump(results, f, indent=1)
    return brain


def experiment(argv=None):
    """A recipe's start: ``train.py hparams.yaml [--key=value ...]`` parsed (``argv``, default ``sys.argv[1:]``),
    the process group joined under torchrun, the experiment folder made; returns (hparams, run_opts)."""
    hparams_file, run_opts, overrides = sb.parse_arguments(sys.argv[1:] if argv is None else argv)
    ddp_init_group(run_opts)
    with open(hparams_file) as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    sb.create_experiment_directory(experiment_directory=hparams["output_folder"],
                                   hyperparams_to_save=hparams_file, overrides=overrides)
    return hparams, run_opts


def main(dataio_prep, result_keys=(), argv=None):
    """A recipe's command line: ``train.py hparams.yaml [--key=value ...]`` -> experiment folder, datasets from
    ``dataio_prep(hparams)``, :func:`run` (the batches padded by SpeechBrain's ``PaddedBatch``); ``result_keys``:
    hparams copied into test_stats.json; ``argv``: the arguments (default ``sys.argv[1:]``)."""
    hparams, run_opts = experiment(argv)
    datasets = dataio_prep(hparams)
    return run(hparams, run_opts, datasets, collate_fn=PaddedBatch,
               extra_results={key: hparams[key] for key in result_keys})
