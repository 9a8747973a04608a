"""SpeechBrain adapter: Dual_Path_Model intra/inter blocks and sequence classifiers built from ssm_plugins layers.

Recipes reference it from their hparams (``!new:ssm_plugins.speechbrain.<Block>``). It is the only module of the
package that imports speechbrain; ``import ssm_plugins`` never does. The blocks arrive with the SpeechBrain issue.
"""
import speechbrain  # noqa: F401  (fail here, with the toolbox's own error, when SpeechBrain is missing)

__all__: list = []


# ---- eSSM raw-waveform keyword classifier (Speech Commands SC10 / SC35, essm.md §2.2, §3.2-3.3) ----------------

import math  # noqa: E402  (this section is self-contained so it merges cleanly below the Dual_Path blocks)
from typing import Optional, Sequence  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from .models.essm import ESSMSequence, essm_param_groups  # noqa: E402


class ESSMWaveformClassifier(nn.Module):
    """eSSM keyword classifier on raw waveforms, as in the paper's SC10/SC35 16 kHz setting (essm.md §2.2, §8.4).

    The model is :class:`ssm_plugins.models.essm.ESSMSequence` with ``in_chans=1``: every sample is one step of
    the sequence, Linear(1 -> H) encoder, ``depth`` residual eSSM blocks at width H, [final norm if prenorm],
    mean pool over time, Linear(H -> n_classes). Table 10 (SC10 and SC35 raw): depth 6, H = N = 128, 32 heads,
    dropout 0.1, BatchNorm, bidirectional, half_glu1; SC10 prenorm, SC35 post-norm.

    Variable lengths: SpeechBrain pads a batch to its longest clip and passes relative lengths. The mean pool
    covers each clip's valid samples only, and with ``mask_padding=True`` [D, spec A19's recommendation for
    SpeechBrain] each block also zeroes the padded steps before its SSM convolution, so that padding cannot leak
    into valid steps through the bidirectional kernel: in eval mode a clip's output does not depend on how much
    padding the batch adds. ``mask_padding=False`` is the official behaviour (mask only in the pool). In train
    mode BatchNorm statistics still include padded steps.

    Args:
        n_classes: number of keywords (10 for SC10, 35 for SC35).
        d_model, depth, d_state, n_heads, prenorm, norm, dropout: as :class:`ESSMSequence` (``dropout`` is its
            ``drop_rate``). Defaults: the SC35 row of Table 10.
        log_softmax: return log-probabilities (for SpeechBrain's ``nll_loss`` and ``classification_error``)
            [D: True]; False returns logits.
        **ssm_kwargs: eSSM layer options (bidirectional, conj_sym, dt_min, dt_max, glu, ...).

    Forward: ``wavs`` (B, T) float, ``wav_lens`` (B,) relative lengths in (0, 1] (SpeechBrain's convention; None:
    every clip fills T), ``dt_scale`` (Δ multiplier for this call: 2.0 for the zero-shot evaluation of a 16 kHz
    model at 8 kHz, essm.md §3.2) -> (B, 1, n_classes).
    """

    def __init__(
            self,
            n_classes: int,
            d_model: int = 128,
            depth: int = 6,
            d_state: Optional[int] = 128,
            n_heads: int = 32,
            prenorm: bool = False,
            norm: str = "batch",
            dropout: float = 0.1,
            mask_padding: bool = True,
            log_softmax: bool = True,
            **ssm_kwargs,
    ):
        super().__init__()
        if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
            raise ValueError(f"n_classes must be an int >= 2, got {n_classes!r}")
        self.n_classes = n_classes
        self.mask_padding = bool(mask_padding)
        self.log_softmax = bool(log_softmax)
        self.model = ESSMSequence(in_chans=1, num_classes=n_classes, d_model=d_model, depth=depth, d_state=d_state,
                                  n_heads=n_heads, prenorm=prenorm, norm=norm, drop_rate=dropout, **ssm_kwargs)

    def param_groups(self, lr: float, lr_ssm: float, weight_decay: float = 0.,
                     lr_other_params: Sequence[str] = ("C",)):
        """The paper's two-learning-rate AdamW groups (essm.md §2.1; see ``essm_param_groups``)."""
        return essm_param_groups(self, lr=lr, lr_ssm=lr_ssm, weight_decay=weight_decay,
                                 lr_other_params=tuple(lr_other_params))

    @staticmethod
    def padding_mask(wavs: torch.Tensor, wav_lens: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """(B, T) bool, True at padded samples, from SpeechBrain's relative lengths (rounded like SpeechBrain)."""
        if wav_lens is None:
            return None
        if not isinstance(wav_lens, torch.Tensor) or tuple(wav_lens.shape) != (wavs.shape[0],):
            got = tuple(wav_lens.shape) if isinstance(wav_lens, torch.Tensor) else type(wav_lens).__name__
            raise ValueError(f"wav_lens must have shape (B,) = ({wavs.shape[0]},) (relative lengths), got {got}")
        steps = torch.round(wav_lens.to(device=wavs.device, dtype=torch.float64) * wavs.shape[1]).long()
        if bool((steps < 1).any()) or bool((wav_lens > 1 + 1e-6).any()):
            raise ValueError(f"wav_lens must be relative lengths in (0, 1] leaving >= 1 sample, got "
                             f"{wav_lens.tolist()}")
        return torch.arange(wavs.shape[1], device=wavs.device)[None, :] >= steps[:, None]

    def forward(self, wavs: torch.Tensor, wav_lens: Optional[torch.Tensor] = None,
                dt_scale: Optional[float] = None) -> torch.Tensor:
        if not isinstance(wavs, torch.Tensor) or wavs.dim() != 2 or wavs.shape[1] < 1 \
                or not wavs.is_floating_point():
            got = (f"{tuple(wavs.shape)} {wavs.dtype}" if isinstance(wavs, torch.Tensor)
                   else type(wavs).__name__)
            raise ValueError(f"wavs must be a float waveform batch of shape (B, T), got {got}")
        mask = self.padding_mask(wavs, wav_lens)
        x = wavs.unsqueeze(-1)  # (B, T, 1): one sample per step
        feats = self.model.forward_features(x, dt_scale, mask if self.mask_padding else None)
        logits = self.model.forward_head(feats, padding_mask=mask)
        out = torch.log_softmax(logits, dim=-1) if self.log_softmax else logits
        return out.unsqueeze(1)


def warmup_cosine_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int,
                            total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step schedule of the SC35 recipe (essm.md §2.2-2.3): linear warm-up over ``warmup_steps``, then a
    half cosine to 0 at ``total_steps``, held at 0 afterwards (the HF schedule the official code uses would rise
    again past its end, A11). Scales every parameter group's own learning rate, so LR_SSM / LR_other keep their
    ratio."""
    if warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got {warmup_steps} and {total_steps}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


__all__ += ["ESSMWaveformClassifier", "warmup_cosine_scheduler"]
