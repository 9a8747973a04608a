"""SpeechBrain adapter: Dual_Path_Model intra/inter blocks and sequence classifiers built from ssm_plugins layers.

Recipes reference it from their hparams (``!new:ssm_plugins.speechbrain.<Block>``). It is the only module of the
package that imports speechbrain; ``import ssm_plugins`` never does.

Dual-path blocks (``speechbrain.lobes.models.dual_path.Dual_Path_Model`` ``intra_model`` / ``inter_model``) map
``[B*S, K, N] -> [B*S, K, N]`` (intra: K frames of each of the S chunks; inter: S chunks at each of the K
positions), like SpeechBrain's ``SBTransformerBlock`` / ``SBRNNBlock``. Any number of sequences and any length
work. Each is ``num_layers`` residual layers of one paper: MambaMixer (arXiv 2403.19888 v2), eSSM ("Efficient
State Space Model via Fast Tensor Convolution and Block Diagonalization", arXiv 2402.15290) or Myosotis (arXiv
2509.20503); what the papers leave open is in docs/mambamixer.md, docs/essm.md and docs/myosotis.md.

    SBMambaMixerBlock  MambaMixer blocks (MambaMixer Sec. 2.1, App. H.5): bidirectional S6 token mixer + QS channel
                       mixer
    SBQSMixerBlock     QSMixer blocks (MambaMixer Sec. 2.2, Eq. 9-10): QS token mixer + QS channel mixer
    SBESSMBlock        eSSM residual blocks (eSSM Sec. 4.6), bidirectional kernel
    SBMyoBlock         Myo blocks (Myosotis Sec. 4: S5's blocks with the Myo layer) on a ceil k-ary tree over the
                       sequence (Myosotis Sec. 3.2; docs/myosotis.md, 'Ceil trees'), virtual nodes carried through
                       the layers and dropped at the end

Classifier: ``ESSMWaveformClassifier`` (eSSM on raw waveforms, eSSM Table 10, App. E.2.8-E.2.9: Speech Commands
SC10/SC35).
"""
from __future__ import annotations

import json
import math
import os
from typing import Optional, Sequence

import speechbrain  # noqa: F401  (fail here, with the toolbox's own error, when SpeechBrain is missing)
import torch
import torch.nn as nn

from .distributed import end_process_group_at_exit
from .layers import ESSMBlock, MambaMixerBlock, MyoBlock, QSMixerBlock
from .models.essm import ESSMSequence, essm_param_groups
from .ops import myo_tree

__all__ = ["SBMambaMixerBlock", "SBQSMixerBlock", "SBESSMBlock", "SBMyoBlock", "ESSMWaveformClassifier",
           "ddp_init_group", "warmup_cosine_scheduler"]


def _check_num_layers(num_layers):
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")


def _check_chunks(x, d_model):
    """The dual-path contract: a (B*S, K, N) tensor with N = d_model and at least one step."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != d_model or x.shape[1] < 1:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape [B*S, K, N] (sequences, steps, N=d_model={d_model}), got {got}")
    if not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor (encoder features), got {x.dtype}")


class _SBMixerStack(nn.Module):
    """``num_layers`` MambaMixer/QSMixer blocks; the channel mixer's token-axis weights are built for
    ``num_tokens`` steps and linearly resampled for other lengths (``channel_res_mode='resample'``: docs/mambamixer.md,
    'Channel mixer at other token counts', 'Speech separation')."""

    block_cls = MambaMixerBlock

    def __init__(self, num_layers, d_model, num_tokens, channel_mixer, norm, drop_path, **block_kwargs):
        super().__init__()
        _check_num_layers(num_layers)
        self.d_model, self.num_tokens = d_model, num_tokens
        self.layers = nn.ModuleList(
            self.block_cls(d_model, num_tokens, drop_path=drop_path, norm=norm, channel_mixer=channel_mixer,
                           token_grid=(1, num_tokens) if channel_mixer else None, **block_kwargs)
            for _ in range(num_layers))

    def forward(self, x):
        """x: [B*S, K, N] -> [B*S, K, N]."""
        _check_chunks(x, self.d_model)
        grid = (1, x.shape[1])
        for layer in self.layers:
            x = layer(x, grid)
        return x


class SBMambaMixerBlock(_SBMixerStack):
    """Dual-path intra/inter model of MambaMixer blocks (MambaMixer paper App. H.5; our layout [D], docs/mambamixer.md,
    'Speech separation': DPMamba with each bidirectional Mamba replaced by a MambaMixer block).

    Args:
        num_layers: MambaMixer blocks in a row (DPMamba-M: 1 per intra/inter model).
        d_model: N, the masknet width (Dual_Path_Model ``out_channels``).
        num_tokens: steps the channel mixer's token-axis weights are sized for: the chunk size K for the intra
            model, a typical number of chunks S for the inter model; other lengths are resampled [250].
        d_state, expand, d_conv: S6 sizes [DPMamba: 16, 2, 4].
        bidirectional: forward + backward S6 (``token_mixer='s6_bi'``, 'same' padding) or causal S6 [True]. The
            channel mixer's selection reads every step, so only ``channel_mixer=False`` makes a causal block.
        channel_mixer: the selective channel mixer over the N encoder channels [True]; False = plain
            (bidirectional) Mamba-style blocks with the multi-resolution gate (``inter_channel_mixer`` of
            docs/mambamixer.md, 'Speech separation').
        norm: 'rmsnorm' (DPMamba's RMSNorm) or 'layernorm' [D: 'rmsnorm'].
        drop_path: stochastic depth on both branches [0].
        **mixer_kwargs: other MambaMixerBlock / SelectiveTokenMixer options (gate_kernels, dt_rank, ...).
    """

    def __init__(self, num_layers: int, d_model: int, num_tokens: int = 250, d_state: int = 16, expand: int = 2,
                 d_conv: int = 4, bidirectional: bool = True, channel_mixer: bool = True, norm: str = "rmsnorm",
                 drop_path: float = 0.0, **mixer_kwargs):
        super().__init__(num_layers, d_model, num_tokens, channel_mixer, norm, drop_path, d_state=d_state,
                         expand=expand, d_conv=d_conv, token_mixer="s6_bi" if bidirectional else "s6",
                         **mixer_kwargs)


class SBQSMixerBlock(_SBMixerStack):
    """Dual-path intra/inter model of QSMixer blocks (MambaMixer paper Sec. 2.2, Eq. 9-10, App. H.5; docs/mambamixer.md,
    'Block layout', 'Speech separation'): scalar-A quasi-separable token mixer (non-causal by construction, so no
    ``bidirectional`` switch) and the QS channel mixer.

    Args: as :class:`SBMambaMixerBlock`, plus ``headdim`` (features per QS head; must divide expand*d_model) [64].
    """

    block_cls = QSMixerBlock

    def __init__(self, num_layers: int, d_model: int, num_tokens: int = 250, d_state: int = 16, expand: int = 2,
                 d_conv: int = 4, headdim: int = 64, channel_mixer: bool = True, norm: str = "rmsnorm",
                 drop_path: float = 0.0, **mixer_kwargs):
        super().__init__(num_layers, d_model, num_tokens, channel_mixer, norm, drop_path, d_state=d_state,
                         expand=expand, d_conv=d_conv, headdim=headdim, **mixer_kwargs)


class SBESSMBlock(nn.Module):
    """Dual-path intra/inter model of ``num_layers`` eSSM residual blocks (eSSM paper Sec. 4.6, Fig. 3; docs/essm.md,
    'Layer forward pass', 'Block and model').

    Args:
        num_layers, d_model: as :class:`SBMambaMixerBlock`.
        d_state: N, complex modes over all heads [None = d_model, the paper's M = N].
        n_heads: S, block-diagonal heads [1].
        bidirectional: the time-flipped kernel on future samples (non-causal separation) [True].
        norm, prenorm: [D: 'layer', True] -- the paper's BatchNorm after the layer (post-norm) sees the statistics
            of the chunks of a single utterance here (batch 1 in the separation recipes), so the blocks use
            DPMamba's pre-norm residual with LayerNorm; 'batch' / prenorm=False give the paper's block.
        dropout: the eSSM model dropout [0].
        **ssm_kwargs: other ESSM options (glu, conj_sym, dt_min, dt_max, ...).
    """

    def __init__(self, num_layers: int, d_model: int, d_state=None, n_heads: int = 1, bidirectional: bool = True,
                 norm: str = "layer", prenorm: bool = True, dropout: float = 0.0, **ssm_kwargs):
        super().__init__()
        _check_num_layers(num_layers)
        self.d_model = d_model
        self.layers = nn.Sequential(*(
            ESSMBlock(d_model, norm=norm, prenorm=prenorm, dropout=dropout, d_state=d_state, n_heads=n_heads,
                      bidirectional=bidirectional, **ssm_kwargs) for _ in range(num_layers)))

    def forward(self, x):
        """x: [B*S, K, N] -> [B*S, K, N]."""
        _check_chunks(x, self.d_model)
        return self.layers(x)


class SBMyoBlock(nn.Module):
    """Dual-path intra/inter model of ``num_layers`` Myo blocks (Myosotis paper Sec. 4; docs/myosotis.md, 'Block and
    GLU') over a ceil ``arity``-ary tree of the K steps (paper Sec. 3.2, Fig. 3: leaves = steps in order; internal
    nodes are virtual; docs/myosotis.md, 'Ceil trees').

    The virtual nodes start at zero (the ``"zero"`` option for layer-1 virtual inputs, docs/myosotis.md,
    'Virtual-node inputs') and are persistent through the ``num_layers`` blocks (their outputs are the next block's
    inputs); the leaves are returned. The layer is non-causal by construction (child->parent and parent->child
    coupling).

    Args:
        num_layers, d_model: as :class:`SBMambaMixerBlock`.
        state_size: P, S5's state size (P/2 complex heads with conj_sym) [None = d_model].
        blocks: HiPPO-N blocks J [1].
        arity: k of the tree [D: 2, the paper's choice for 1-D text sequences].
        norm: [D: 'layer'] -- BatchNorm (S5's default) would pool the chunks of one utterance; see SBESSMBlock.
        dropout: S5's channel dropout [0].
        **ssm_kwargs: other MyoBlock / MyoSSM options (glu, C_init, level_step, ...).
    """

    def __init__(self, num_layers: int, d_model: int, state_size=None, blocks: int = 1, arity: int = 2,
                 norm: str = "layer", dropout: float = 0.0, **ssm_kwargs):
        super().__init__()
        _check_num_layers(num_layers)
        if isinstance(arity, bool) or not isinstance(arity, int) or arity < 2:
            raise ValueError(f"arity must be an int >= 2, got {arity!r}")
        self.d_model, self.arity = d_model, arity
        state_size = d_model if state_size is None else state_size
        self.layers = nn.ModuleList(
            MyoBlock(d_model, state_size=state_size, blocks=blocks, norm=norm, dropout=dropout, **ssm_kwargs)
            for _ in range(num_layers))

    def forward(self, x):
        """x: [B*S, K, N] -> [B*S, K, N]."""
        _check_chunks(x, self.d_model)
        steps = x.shape[1]
        tree = myo_tree(steps, self.arity, device=x.device)
        nodes = x.new_zeros(x.shape[0], tree.parent.numel(), x.shape[2])
        nodes[:, :steps] = x
        for layer in self.layers:
            nodes = layer(nodes, tree)
        return nodes[:, :steps]


# ---- eSSM raw-waveform keyword classifier (Speech Commands SC10 / SC35: eSSM Table 10, App. E.2.8-9, Tables 3, 8) --




class ESSMWaveformClassifier(nn.Module):
    """eSSM keyword classifier on raw waveforms, as in the paper's SC10/SC35 16 kHz setting (Table 10, App. E.2.8-9).

    The model is :class:`ssm_plugins.models.essm.ESSMSequence` with ``in_chans=1``: every sample is one step of
    the sequence, Linear(1 -> H) encoder, ``depth`` residual eSSM blocks at width H, [final norm if prenorm],
    mean pool over time, Linear(H -> n_classes). Table 10 (SC10 and SC35 raw): depth 6, H = N = 128, 32 heads,
    dropout 0.1, BatchNorm, bidirectional, half_glu1; SC10 prenorm, SC35 post-norm.

    Variable lengths: SpeechBrain pads a batch to its longest clip and passes relative lengths. The mean pool
    covers each clip's valid samples only, and with ``mask_padding=True`` [D, our choice for SpeechBrain: docs/essm.md,
    'Padding mask'] each block also zeroes the padded steps before its SSM convolution, so that padding cannot leak
    into valid steps through the bidirectional kernel: in eval mode a clip's output does not depend on how much
    padding the batch adds. ``mask_padding=False`` is the official behaviour (mask only in the pool). In train
    mode BatchNorm statistics still include padded steps.

    Args:
        n_classes: number of keywords (10 for SC10, 35 for SC35).
        d_model, depth, d_state, n_heads, prenorm, norm, dropout: as :class:`ESSMSequence` (``dropout`` is its
            ``drop_rate``). Defaults: the SC35 row of Table 10.
        log_softmax: return log-probabilities (for SpeechBrain's ``nll_loss`` and ``classification_error``)
            [D: True]; False returns logits.
        in_features: features per step: 1 for raw waveforms (input (B, T)); 20 for the SC10-MFCC setting (input
            (B, T, 20) frames from SpeechBrain's ``MFCC``, Table 3's MFCC column).
        **ssm_kwargs: eSSM layer options (bidirectional, conj_sym, dt_min, dt_max, glu, ...).

    Forward: ``wavs`` (B, T) float, ``wav_lens`` (B,) relative lengths in (0, 1] (SpeechBrain's convention; None:
    every clip fills T), ``dt_scale`` (Δ multiplier for this call: 2.0 for the zero-shot evaluation of a 16 kHz
    model at 8 kHz, paper Sec. 5.6; docs/essm.md, 'Δ scaling') -> (B, 1, n_classes).
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
            in_features: int = 1,
            **ssm_kwargs,
    ):
        super().__init__()
        if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
            raise ValueError(f"n_classes must be an int >= 2, got {n_classes!r}")
        if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features < 1:
            raise ValueError(f"in_features must be an int >= 1, got {in_features!r}")
        self.in_features = in_features
        self.n_classes = n_classes
        self.mask_padding = bool(mask_padding)
        self.log_softmax = bool(log_softmax)
        self.model = ESSMSequence(in_chans=in_features, num_classes=n_classes, d_model=d_model, depth=depth,
                                  d_state=d_state, n_heads=n_heads, prenorm=prenorm, norm=norm, drop_rate=dropout,
                                  **ssm_kwargs)

    def param_groups(self, lr: float, lr_ssm: float, weight_decay: float = 0.,
                     lr_other_params: Sequence[str] = ("C",)):
        """The paper's two-learning-rate AdamW groups (App. E.1; docs/essm.md, 'Optimiser and schedules'; see
        ``essm_param_groups``)."""
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
        rank = 2 if self.in_features == 1 else 3
        if not isinstance(wavs, torch.Tensor) or wavs.dim() != rank or wavs.shape[1] < 1 \
                or not wavs.is_floating_point() or (rank == 3 and wavs.shape[2] != self.in_features):
            got = (f"{tuple(wavs.shape)} {wavs.dtype}" if isinstance(wavs, torch.Tensor)
                   else type(wavs).__name__)
            what = "a float waveform batch of shape (B, T)" if rank == 2 else \
                f"a float feature batch of shape (B, T, {self.in_features})"
            raise ValueError(f"wavs must be {what}, got {got}")
        mask = self.padding_mask(wavs, wav_lens)
        x = wavs.unsqueeze(-1) if rank == 2 else wavs  # (B, T, in_features): one sample (or frame) per step
        feats = self.model.forward_features(x, dt_scale, mask if self.mask_padding else None)
        logits = self.model.forward_head(feats, padding_mask=mask)
        out = torch.log_softmax(logits, dim=-1) if self.log_softmax else logits
        return out.unsqueeze(1)


def warmup_cosine_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int,
                            total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step schedule of the SC35 recipe (eSSM paper App. E.2.9: cosine, 270,000 steps; the warm-up is the released
    config's): linear warm-up over ``warmup_steps``, then a half cosine to 0 at ``total_steps``, held at 0 afterwards
    (the HF schedule the official code uses would rise again past its end: docs/essm.md, 'Optimiser and schedules').
    Scales every parameter group's own learning rate, so LR_SSM / LR_other keep their ratio."""
    if warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got {warmup_steps} and {total_steps}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def write_test_stats(hparams: dict, result: dict, digits: int = 1) -> None:
    """A recipe's last step: the test metrics ``result["test"]`` to the train logger (with the epoch loaded) and, on
    the main process, to stdout and with ``result`` to ``<output_folder>/test_stats.json``. Every process calls it:
    the logger's ``log_stats`` is SpeechBrain's ``main_process_only``, which ends in a broadcast (called on the main
    process alone, it waits for the others forever)."""
    from speechbrain.utils.distributed import if_main_process

    stats = result["test"]
    hparams["train_logger"].log_stats({"Epoch loaded": hparams["epoch_counter"].current}, test_stats=stats)
    if not if_main_process():
        return
    print("Test " + ", ".join(f"{k} {v:.{digits}f}" for k, v in stats.items()))
    with open(os.path.join(hparams["output_folder"], "test_stats.json"), "w") as f:
        json.dump(result, f, indent=1)


def ddp_init_group(run_opts) -> None:
    """SpeechBrain's ``ddp_init_group`` (joins torchrun's process group; nothing in one process), with a gloo group
    ended at exit once every process got there: see :func:`ssm_plugins.distributed.end_process_group_at_exit` (a
    finished run could abort at exit). The recipes of recipes_speech/ and recipes_sequence/ start with it."""
    from speechbrain.utils.distributed import ddp_init_group as speechbrain_ddp_init_group

    speechbrain_ddp_init_group(run_opts)
    end_process_group_at_exit()
