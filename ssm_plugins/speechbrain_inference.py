"""SpeechBrain inference: the folder a recipe writes for ``Pretrained.from_hparams``, and a keyword classifier.

After training, each recipe of ``recipes_speech/`` writes ``<save_folder>/inference/``, laid out as SpeechBrain's
published models are: ``hyperparams.yaml`` (the modules only, built with the training run's hparams and overrides,
and a ``Pretrainer`` that loads them) and one ``<name>.ckpt`` per module, copied from the best checkpoint. Then:

    from speechbrain.inference.separation import SepformerSeparation
    separator = SepformerSeparation.from_hparams(source="results/.../save/inference", savedir="pretrained")
    est_sources = separator.separate_file("mix.wav")            # (1, T, num_spks)

    from ssm_plugins.speechbrain_inference import KeywordClassifier
    classifier = KeywordClassifier.from_hparams(source="results/.../save/inference", savedir="pretrained")
    out_prob, score, index, text_lab = classifier.classify_file("clip.wav")

The separation recipes' encoder / mask net / decoder are SpeechBrain's own dual-path lobes, so SpeechBrain's
``SepformerSeparation`` hosts them unchanged. The keyword classifier is one module over raw samples (or over
SpeechBrain's MFCC frames), which ``EncoderClassifier``'s feature / embedding / classifier split cannot hold:
``KeywordClassifier`` is ``EncoderClassifier``'s ``classify_batch`` / ``classify_file`` over that one module.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Mapping, Optional

import speechbrain  # noqa: F401  (fail here, with the toolbox's own error, when SpeechBrain is missing)
import torch
from speechbrain.inference.interfaces import Pretrained

__all__ = ["write_inference_folder", "KeywordClassifier"]

logger = logging.getLogger(__name__)
_PRETRAINER = "!new:speechbrain.utils.parameter_transfer.Pretrainer"


def _tagged(tag: str, **items):
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.tag import Tag

    node = CommentedMap(**items)
    node.yaml_set_ctag(Tag(suffix=tag))
    return node


def write_inference_folder(hparams_file: str, overrides, checkpointer, folder: str,
                           modules: Mapping[str, tuple[str, str]], keys: tuple[str, ...] = (),
                           objects: Optional[Mapping[str, tuple[str, dict, Optional[str]]]] = None,
                           min_key: Optional[str] = None, max_key: Optional[str] = None) -> Optional[str]:
    """Writes ``folder/hyperparams.yaml`` and the module files of the best checkpoint; returns ``folder``.

    A run that saved no checkpoint (``--N_epochs 0`` evaluates the initialisation) has nothing trained to
    package: it logs a warning, writes nothing and returns None.

    Args:
        hparams_file, overrides: the training run's hparams file and its overrides (as ``sb.parse_arguments``
            returns them), so the modules are built exactly as they were trained.
        checkpointer: the run's ``Checkpointer``; its best checkpoint by ``min_key`` / ``max_key`` is used.
        modules: inference module name -> (top-level hparams key that builds it, the checkpointer's recoverable
            name whose file holds its weights), e.g. ``{"masknet": ("MaskNet", "masknet")}``.
        keys: further top-level hparams entries the inference class reads (``sample_rate``, ``num_spks``, ...),
            copied with everything they reference.
        objects: new entries, name -> (``!new:`` tag, arguments, file to load into it or None), e.g. the
            label encoder that the training run wrote as a text file.
    """
    from hyperpyyaml import resolve_references
    import ruamel.yaml
    from ruamel.yaml.comments import CommentedMap

    ckpt = checkpointer.find_checkpoint(min_key=min_key, max_key=max_key)
    if ckpt is None:
        logger.warning("no checkpoint in %s (no epoch trained): no inference folder written to %s",
                       checkpointer.checkpoints_dir, folder)
        return None
    with open(hparams_file, encoding="utf-8") as f:
        resolved = resolve_references(f, overrides).getvalue()
    yaml = ruamel.yaml.YAML()
    training = yaml.load(resolved)
    missing = [k for k in (*keys, *(key for key, _ in modules.values())) if k not in training]
    if missing:
        raise KeyError(f"{hparams_file} has no top-level {missing} to build the inference modules from")

    os.makedirs(folder, exist_ok=True)
    doc, mods, loadables = CommentedMap(), CommentedMap(), CommentedMap()
    for key in keys:
        doc[key] = training[key]
    for name, (tag, kwargs, source) in (objects or {}).items():
        doc[name] = node = _tagged(tag, **kwargs)
        if source is not None:
            loadables[name] = node
            shutil.copyfile(source, os.path.join(folder, f"{name}.ckpt"))
    for name, (key, recoverable) in modules.items():
        if recoverable not in ckpt.paramfiles:
            raise KeyError(f"checkpoint {ckpt.path} has no {recoverable!r} file (it has {sorted(ckpt.paramfiles)})")
        doc[key] = mods[name] = loadables[name] = training[key]
        shutil.copyfile(ckpt.paramfiles[recoverable], os.path.join(folder, f"{name}.ckpt"))
    doc["modules"] = mods
    doc["pretrainer"] = _tagged(_PRETRAINER, loadables=loadables)  # files: <source>/<loadable name>.ckpt

    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"# Inference hyperparameters of {os.path.abspath(hparams_file)} (overrides applied), written "
                    f"by\n# the recipe from checkpoint {os.path.basename(ckpt.path)}; load with "
                    f"<class>.from_hparams(source=this folder)\n")
            yaml.dump(doc, f)
        os.replace(tmp, os.path.join(folder, "hyperparams.yaml"))
    except BaseException:
        os.unlink(tmp)
        raise
    return folder


class KeywordClassifier(Pretrained):
    """A trained keyword classifier of ``recipes_speech/Google-speech-commands`` (``ESSMWaveformClassifier``).

    Modules: ``classifier``, and in the MFCC setting ``mean_var_norm`` (hparams ``compute_features`` gives the
    frames). Hparams: ``label_encoder`` (a ``CategoricalEncoder``), ``sample_rate`` (``classify_file``
    resamples to it through ``audio_normalizer``).
    """

    MODULES_NEEDED = ["classifier"]
    HPARAMS_NEEDED = ["label_encoder"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # from_hparams has loaded the label encoder: it must name every output of the classifier
        self.hparams.label_encoder.expect_len(self.mods.classifier.n_classes)

    def classify_batch(self, wavs: torch.Tensor, wav_lens: Optional[torch.Tensor] = None):
        """wavs (B, T) at ``sample_rate``, wav_lens (B,) relative lengths (None: all full) ->
        ``(out_prob, score, index, text_lab)`` as ``EncoderClassifier.classify_batch``: log-probabilities (B, C),
        the best one's value and index (B,), and its label for each clip."""
        if not isinstance(wavs, torch.Tensor) or wavs.dim() != 2:
            got = tuple(wavs.shape) if isinstance(wavs, torch.Tensor) else type(wavs).__name__
            raise ValueError(f"wavs must be a (batch, samples) tensor, got {got}")
        wavs = wavs.to(self.device).float()
        wav_lens = torch.ones(wavs.shape[0], device=self.device) if wav_lens is None else wav_lens.to(self.device)
        feats = wavs
        if getattr(self.hparams, "compute_features", None) is not None:
            feats = self.mods.mean_var_norm(self.hparams.compute_features(wavs), wav_lens)
        out_prob = self.mods.classifier(feats, wav_lens).squeeze(1)
        score, index = torch.max(out_prob, dim=-1)
        return out_prob, score, index, self.hparams.label_encoder.decode_torch(index)

    def classify_file(self, path: str, savedir: Optional[str] = None):
        """One audio file (any rate: resampled to ``sample_rate``; channels averaged) -> as ``classify_batch``."""
        waveform = self.load_audio(path, savedir=savedir)
        return self.classify_batch(waveform.unsqueeze(0), torch.tensor([1.0]))

    def forward(self, wavs, wav_lens=None):
        return self.classify_batch(wavs, wav_lens)
