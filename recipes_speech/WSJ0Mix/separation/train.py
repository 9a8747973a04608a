#!/usr/bin/env python3
"""Recipe: two-speaker separation on WSJ0-2mix (8 kHz, min) with dual-path state-space mask networks.

    python train.py hparams/mambamixer.yaml --data_folder /yourpath/wsj0-mix/2speakers
    python train.py hparams/qsmixer.yaml    --data_folder ... --output_folder results/qsmixer
    python train.py hparams/essm.yaml | hparams/myo.yaml ...

Encoder (Conv1d, kernel 16, stride 8) -> Dual_Path_Model mask net whose intra/inter models are the
``ssm_plugins.speechbrain`` blocks -> masked encodings -> Decoder (ConvTranspose1d). Loss: SI-SNR with
permutation-invariant training. Optional dynamic mixing (``--dynamic_mixing True``) and speed perturbation.
Training resumes from the last checkpoint of ``output_folder``; the best (validation SI-SNR) checkpoint is
evaluated on the test set and ``<output_folder>/test_results.csv`` gets SI-SNR, SI-SNRi, SDR and SDRi of every
utterance and their means (row ``avg``). SDR: BSS Eval v3 (512-tap distortion filter) by ``fast_bss_eval``.
``<save_folder>/inference/`` then holds that checkpoint for SpeechBrain's ``SepformerSeparation.from_hparams``
(``ssm_plugins.speechbrain_inference``).

No data at hand? ``python -m ssm_plugins.data.mixtures --out DIR`` writes a small synthetic set in the same
layout; pass ``--data_folder DIR``.
"""
import csv
import dataclasses
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from hyperpyyaml import load_hyperpyyaml

import speechbrain as sb
import speechbrain.nnet.schedulers as schedulers
from speechbrain.utils.distributed import if_main_process, run_on_main
from speechbrain.utils.logger import get_logger
from ssm_plugins.speechbrain import ddp_init_group
from ssm_plugins.speechbrain_inference import write_inference_folder

logger = get_logger(__name__)


def sdr_best_permutation(reference, estimate):
    """BSS Eval v3 SDR (dB) of every reference source by ``fast_bss_eval`` (512-tap distortion filter, float64),
    each reference scored against the estimate the best permutation (largest SDR sum) assigns to it.

    reference, estimate: (num_sources, T) arrays."""
    import fast_bss_eval  # the maintained BSS Eval implementation (pinned in requirements/stack.in)

    reference, estimate = np.asarray(reference, dtype=np.float64), np.asarray(estimate, dtype=np.float64)
    if reference.ndim != 2 or reference.shape != estimate.shape:
        raise ValueError(f"reference and estimate must both have shape (num_sources, T), got {reference.shape} "
                         f"and {estimate.shape}")
    return fast_bss_eval.sdr(reference, estimate)


class Separation(sb.Brain):
    """Encoder -> mask net -> decoder, trained with SI-SNR + PIT on the valid part of every (padded) item.
    ``dynamic_mixer``: the training set's ``DynamicMixer`` (None: fixed mixtures), told each epoch."""

    def __init__(self, *args, dynamic_mixer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dynamic_mixer = dynamic_mixer
        self.steps_per_epoch = None  # known once fit() has built the training loader

    def separate(self, mix):
        """mix (B, T) -> estimated sources (B, T, num_spks)."""
        mix_w = self.modules.encoder(mix)
        est_mask = self.modules.masknet(mix_w)
        sep_h = torch.stack([mix_w] * self.hparams.num_spks) * est_mask
        est = torch.stack([self.modules.decoder(sep_h[i]) for i in range(self.hparams.num_spks)], dim=-1)
        # the transposed conv returns a few samples less or more than T: pad or cut to the input length
        length = mix.shape[1]
        return F.pad(est, (0, 0, 0, length - est.shape[1])) if est.shape[1] < length else est[:, :length]

    def compute_forward(self, batch, stage):
        mix, mix_lens = batch.mix_sig
        mix, mix_lens = mix.to(self.device), mix_lens.to(self.device)
        targets = torch.stack([getattr(batch, f"s{i + 1}_sig")[0] for i in range(self.hparams.num_spks)],
                              dim=-1).to(self.device)
        if stage == sb.Stage.TRAIN:
            with torch.no_grad():
                if self.hparams.use_speedperturb:
                    targets = self.speed_perturb(targets)
                    mix = targets.sum(-1)
                if self.hparams.limit_training_signal_len:
                    mix, targets = self.cut_signals(mix, targets)
        return self.separate(mix), targets, mix_lens

    def sisnr_loss(self, predictions, targets, lens):
        """Negative SI-SNR (PIT) of each item on its own valid samples (padding excluded): (B,)."""
        num_samples = (lens * targets.shape[1]).round().long().clamp(1, targets.shape[1])
        if bool((num_samples == targets.shape[1]).all()):
            return self.hparams.loss(targets, predictions)
        return torch.cat([self.hparams.loss(targets[i:i + 1, :n], predictions[i:i + 1, :n])
                          for i, n in enumerate(num_samples.tolist())])

    def compute_objectives(self, outputs, batch, stage):
        predictions, targets, lens = outputs
        if stage == sb.Stage.TRAIN and self.hparams.use_speedperturb:
            lens = torch.ones_like(lens)  # speed-perturbed targets are re-cut to a common length
        loss = self.sisnr_loss(predictions, targets, lens)
        if stage == sb.Stage.TRAIN:
            if self.hparams.threshold_byloss:  # items already separated better than -threshold dB drop out
                loss = loss[loss > self.hparams.threshold]
            if loss.numel() == 0 or not loss.mean() < self.hparams.loss_upper_lim:
                return (predictions * 0).sum()  # nothing to learn from this batch: a zero step
        return loss.mean()

    def make_dataloader(self, dataset, stage, *args, **kwargs):
        loader = super().make_dataloader(dataset, stage, *args, **kwargs)
        if stage == sb.Stage.TRAIN:  # optimiser steps per epoch (of this process under DDP): the one-cycle length
            self.steps_per_epoch = max(1, len(loader) // self.grad_accumulation_factor)
        return loader

    def init_optimizers(self):
        super().init_optimizers()
        self.onecycle = None
        if self.hparams.lr_schedule == "onecycle":
            if self.steps_per_epoch is None:
                raise ValueError("lr_schedule onecycle needs fit() to build the training loader (pass a dataset)")
            # torch's one-cycle over all N_epochs steps: cosine warm-up from lr / 25 to lr over the first
            # onecycle_warmup of them, cosine annealing to lr / 2.5e5 after; Adam's betas stay fixed
            self.onecycle = torch.optim.lr_scheduler.OneCycleLR(
                self.optimizer, max_lr=self.hparams.lr, total_steps=max(2, self.hparams.N_epochs * self.steps_per_epoch),
                pct_start=self.hparams.onecycle_warmup, cycle_momentum=False)
            if self.checkpointer is not None:
                self.checkpointer.add_recoverable("onecycle", self.onecycle)
        elif self.hparams.lr_schedule != "plateau":
            raise ValueError(f"lr_schedule must be 'plateau' or 'onecycle', got {self.hparams.lr_schedule!r}")

    def on_fit_batch_start(self, batch, should_step):
        # plateau schedule: linear warm-up of the learning rate over the first n_warmup_step optimiser steps
        warmup = self.hparams.n_warmup_step
        if self.onecycle is None and warmup and self.optimizer_step < warmup:
            for group in self.optimizer.param_groups:
                group["lr"] = self.hparams.lr * (self.optimizer_step + 1) / warmup

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        # the one-cycle schedule steps with the optimiser; past its last step (a run continued with more
        # N_epochs) the learning rate stays at its final value
        if self.onecycle is not None and should_step and self.onecycle.last_epoch < self.onecycle.total_steps - 1:
            self.onecycle.step()

    def on_stage_start(self, stage, epoch=None):
        if stage == sb.Stage.TRAIN and self.dynamic_mixer is not None:  # before the loader iterates (forks workers)
            self.dynamic_mixer.set_epoch(epoch)

    def on_stage_end(self, stage, stage_loss, epoch):
        stage_stats = {"si-snr": stage_loss}
        if stage == sb.Stage.TRAIN:
            self.train_stats = stage_stats
        elif stage == sb.Stage.VALID:
            current_lr = self.optimizer.param_groups[0]["lr"]
            if self.onecycle is None and isinstance(self.hparams.lr_scheduler, schedulers.ReduceLROnPlateau):
                current_lr, next_lr = self.hparams.lr_scheduler([self.optimizer], epoch, stage_loss)
                schedulers.update_learning_rate(self.optimizer, next_lr)
            self.hparams.train_logger.log_stats(stats_meta={"epoch": epoch, "lr": current_lr},
                                                train_stats=self.train_stats, valid_stats=stage_stats)
            self.checkpointer.save_and_keep_only(meta={"si-snr": stage_loss}, min_keys=["si-snr"])
        elif stage == sb.Stage.TEST:
            self.hparams.train_logger.log_stats(stats_meta={"Epoch loaded": self.hparams.epoch_counter.current},
                                                test_stats=stage_stats)

    def speed_perturb(self, targets):
        """Each source at its own random speed (hparams speed_perturb), cut to the shortest."""
        perturbed = [self.hparams.speed_perturb(targets[..., i]) for i in range(targets.shape[-1])]
        length = min(p.shape[-1] for p in perturbed)
        return torch.stack([p[:, :length] for p in perturbed], dim=-1)

    def cut_signals(self, mix, targets):
        """A random window of training_signal_len samples (the whole signal when shorter)."""
        start = random.randint(0, max(0, mix.shape[1] - self.hparams.training_signal_len))
        stop = start + self.hparams.training_signal_len
        return mix[:, start:stop], targets[:, start:stop]

    def save_results(self, test_data):
        """SI-SNR(i) and SDR(i) of every test utterance and their means -> <output_folder>/test_results.csv."""
        save_file = os.path.join(self.hparams.output_folder, "test_results.csv")
        loader = sb.dataio.dataloader.make_dataloader(test_data, batch_size=1)
        self.modules.eval()
        rows = []
        with torch.no_grad():
            for batch in loader:
                predictions, targets, lens = self.compute_forward(batch, sb.Stage.TEST)
                mixture = torch.stack([batch.mix_sig[0].to(self.device)] * self.hparams.num_spks, dim=-1)
                sisnr = -self.sisnr_loss(predictions, targets, lens).item()
                sisnr_mix = -self.sisnr_loss(mixture, targets, lens).item()
                reference = targets[0].t().cpu().numpy()
                sdr = sdr_best_permutation(reference, predictions[0].t().cpu().numpy()).mean()
                sdr_mix = sdr_best_permutation(reference, mixture[0].t().cpu().numpy()).mean()
                rows.append({"snt_id": batch.id[0], "sdr": sdr, "sdr_i": sdr - sdr_mix, "si-snr": sisnr,
                             "si-snr_i": sisnr - sisnr_mix})
                if self.hparams.save_audio and len(rows) <= self.hparams.n_audio_to_save:
                    self.save_audio(batch.id[0], batch.mix_sig[0][0], targets[0], predictions[0])
        columns = ["snt_id", "sdr", "sdr_i", "si-snr", "si-snr_i"]
        mean = {"snt_id": "avg", **{k: float(np.mean([r[k] for r in rows])) for k in columns[1:]}}
        with open(save_file, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows + [mean])
        logger.info("Test means over %d utterances: SI-SNR %.2f dB, SI-SNRi %.2f dB, SDR %.2f dB, SDRi %.2f dB",
                    len(rows), mean["si-snr"], mean["si-snr_i"], mean["sdr"], mean["sdr_i"])
        return mean

    def save_audio(self, snt_id, mixture, targets, predictions):
        """Peak-normalised mixture, references and estimates of one test item under <save_folder>/audio_results."""
        folder = os.path.join(self.hparams.save_folder, "audio_results")
        os.makedirs(folder, exist_ok=True)
        signals = {"mix": mixture}
        for i in range(self.hparams.num_spks):
            signals[f"source{i + 1}"], signals[f"source{i + 1}hat"] = targets[:, i], predictions[:, i]
        for name, signal in signals.items():
            signal = signal.detach().cpu().float()
            sb.dataio.dataio.write_audio(os.path.join(folder, f"item{snt_id}_{name}.wav"),
                                         signal / signal.abs().max().clamp_min(1e-8), self.hparams.sample_rate)


def _source_names(hparams):
    return [f"s{i + 1}" for i in range(hparams["num_spks"])]


def dataio_prep(hparams):
    """DynamicItemDatasets of the train/valid/test csv files: id, mix_sig, s1_sig, s2_sig(, s3_sig)."""
    datasets = [sb.dataio.dataset.DynamicItemDataset.from_csv(csv_path=hparams[key],
                                                              replacements={"data_root": hparams["data_folder"]})
                for key in ("train_data", "valid_data", "test_data")]
    for name in ["mix"] + _source_names(hparams):
        read = sb.utils.data_pipeline.takes(f"{name}_wav")(
            sb.utils.data_pipeline.provides(f"{name}_sig")(sb.dataio.dataio.read_audio))
        sb.dataio.dataset.add_dynamic_item(datasets, read)
    sb.dataio.dataset.set_output_keys(datasets, ["id", "mix_sig"] + [f"{s}_sig" for s in _source_names(hparams)])
    return datasets


class DynamicMixer:
    """The sources of dynamic mix ``index`` of the current epoch, a pure function of (seed, epoch, index): each
    item draws num_spks utterances of different speakers and random relative levels (±2.5 dB, as wsj0-2mix)
    from its own generator seeded by the three, so DataLoader workers, a resumed run and every process of a
    distributed run draw the same mixtures as one uninterrupted process. ``set_epoch`` before each epoch's
    iteration (workers copy the mixer when the epoch's iteration starts: not with persistent_workers).

    by_speaker: {speaker: [wav paths]}; max_samples: cut every mixture to at most this many samples (or None).
    """

    def __init__(self, by_speaker, num_spks, seed, max_samples=None):
        if len(by_speaker) < num_spks:
            raise ValueError(f"dynamic mixing needs utterances of at least num_spks={num_spks} speakers, "
                             f"found {len(by_speaker)}")
        self.speakers = sorted(by_speaker, key=str)
        self.files = [sorted(by_speaker[spk]) for spk in self.speakers]
        self.num_spks, self.seed, self.max_samples = num_spks, int(seed), max_samples
        self.epoch = 1

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def choose(self, index):
        """(wav paths, levels in dB) of item ``index`` in the current epoch."""
        rng = np.random.default_rng([self.seed, self.epoch, int(index)])
        speakers = rng.choice(len(self.speakers), self.num_spks, replace=False)
        paths = [self.files[s][rng.integers(len(self.files[s]))] for s in speakers]
        return paths, rng.uniform(-2.5, 2.5, self.num_spks).tolist()

    def __call__(self, index):
        """The sources of item ``index``, (num_spks, T): cut to the shortest (and max_samples), each at unit
        power times its level, scaled together to a mixture peak of 0.9 (no clipping: mix = their sum)."""
        paths, levels = self.choose(index)
        sources = [sb.dataio.dataio.read_audio(path) for path in paths]
        length = min(s.shape[0] for s in sources)
        if self.max_samples:
            length = min(length, self.max_samples)
        sources = torch.stack([s[:length] / s[:length].std().clamp_min(1e-8) * 10 ** (level / 20)
                               for s, level in zip(sources, levels)])
        return sources * (0.9 / sources.sum(0).abs().max().clamp_min(1e-8))


def dynamic_mix_data_prep(hparams):
    """Training set remixed on the fly (``DynamicMixer``, seeded by hparams ``seed``), as many items as the
    training csv: returns (dataset, mixer); the mixer's ``set_epoch`` selects the epoch's mixtures.

    Sources: every wav under ``base_folder_dm`` (speaker = its parent folder, as WSJ0's si_tr_s/<spk>/), or
    when that is null the training csv's own source files (each its own speaker).
    """
    if hparams["base_folder_dm"]:
        root = hparams["base_folder_dm"]
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".wav"))
        speakers = [os.path.basename(os.path.dirname(f)) for f in files]
    else:
        with open(hparams["train_data"], newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        files = [row[f"{s}_wav"].replace("$data_root", hparams["data_folder"])
                 for row in rows for s in _source_names(hparams)]
        speakers = list(range(len(files)))
    by_speaker = {}
    for path, speaker in zip(files, speakers):
        by_speaker.setdefault(speaker, []).append(path)
    if len(by_speaker) < hparams["num_spks"]:
        raise ValueError(f"dynamic mixing needs utterances of at least num_spks={hparams['num_spks']} speakers, "
                         f"found {len(by_speaker)} in {hparams['base_folder_dm'] or hparams['train_data']}")
    mixer = DynamicMixer(by_speaker, hparams["num_spks"], hparams["seed"],
                         hparams["training_signal_len"] if hparams["limit_training_signal_len"] else None)
    with open(hparams["train_data"], encoding="utf-8") as f:
        size = sum(1 for _ in f) - 1
    dataset = sb.dataio.dataset.DynamicItemDataset({f"dm{i:06d}": {"index": i} for i in range(size)})

    @sb.utils.data_pipeline.takes("index")
    @sb.utils.data_pipeline.provides("mix_sig", *[f"{s}_sig" for s in _source_names(hparams)])
    def remix(index):
        sources = mixer(index)
        yield sources.sum(0)
        yield from sources

    sb.dataio.dataset.add_dynamic_item([dataset], remix)
    sb.dataio.dataset.set_output_keys([dataset], ["id", "mix_sig"] + [f"{s}_sig" for s in _source_names(hparams)])
    return dataset, mixer


def main(argv):
    hparams_file, run_opts, overrides = sb.parse_arguments(argv)
    if run_opts["optimizer_step_limit"] is not None:  # SpeechBrain 1.1.2's parser leaves this option a string
        run_opts = dataclasses.replace(run_opts, optimizer_step_limit=int(run_opts["optimizer_step_limit"]))
    ddp_init_group(run_opts)  # under torchrun: one process group (gloo on CPUs)
    with open(hparams_file, encoding="utf-8") as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    sb.create_experiment_directory(experiment_directory=hparams["output_folder"], hyperparams_to_save=hparams_file,
                                   overrides=overrides)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from prepare_data import prepare_wsjmix  # noqa: E402  (the recipe folder's own module)

    run_on_main(prepare_wsjmix, kwargs={"datapath": hparams["data_folder"], "savepath": hparams["save_folder"],
                                        "n_spks": hparams["num_spks"], "skip_prep": hparams["skip_prep"],
                                        "fs": hparams["sample_rate"]})
    train_data, valid_data, test_data = dataio_prep(hparams)
    mixer = None
    if hparams["dynamic_mixing"]:
        train_data, mixer = dynamic_mix_data_prep(hparams)

    separator = Separation(modules=hparams["modules"], opt_class=hparams["optimizer"], hparams=hparams,
                           run_opts=run_opts, checkpointer=hparams["checkpointer"], dynamic_mixer=mixer)
    # No re-initialisation of the modules (SpeechBrain's recipe resets every layer): the ssm_plugins blocks
    # carry their papers' initialisation (Δ, A, HiPPO, zero-initialised gates), which a reset would undo.
    separator.fit(separator.hparams.epoch_counter, train_data, valid_data,
                  train_loader_kwargs=hparams["dataloader_opts"], valid_loader_kwargs=hparams["dataloader_opts"])
    separator.evaluate(test_data, min_key="si-snr", test_loader_kwargs=hparams["dataloader_opts"])
    if not if_main_process():  # one writer of test_results.csv and of the inference folder under torchrun
        return None
    # SpeechBrain's SepformerSeparation.from_hparams(source=<save_folder>/inference) loads the best checkpoint
    write_inference_folder(hparams_file, overrides, separator.checkpointer,
                           os.path.join(hparams["save_folder"], "inference"),
                           modules={"encoder": ("Encoder", "encoder"), "masknet": ("MaskNet", "masknet"),
                                    "decoder": ("Decoder", "decoder")},
                           keys=("sample_rate", "num_spks"), min_key="si-snr")
    return separator.save_results(test_data)


if __name__ == "__main__":
    main(sys.argv[1:])
