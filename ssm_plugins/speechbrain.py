"""SpeechBrain adapter: Dual_Path_Model intra/inter blocks and sequence classifiers built from ssm_plugins layers.

Recipes reference it from their hparams (``!new:ssm_plugins.speechbrain.<Block>``). It is the only module of the
package that imports speechbrain; ``import ssm_plugins`` never does.

Dual-path blocks (``speechbrain.lobes.models.dual_path.Dual_Path_Model`` ``intra_model`` / ``inter_model``) map
``[B*S, K, N] -> [B*S, K, N]`` (intra: K frames of each of the S chunks; inter: S chunks at each of the K
positions), like SpeechBrain's ``SBTransformerBlock`` / ``SBRNNBlock``. Any number of sequences and any length
work. Each is ``num_layers`` residual layers of one paper:

    SBMambaMixerBlock  MambaMixer blocks (mambamixer.md §2.3, §4.4): bidirectional S6 token mixer + QS channel mixer
    SBQSMixerBlock     QSMixer blocks (§2.4): QS token mixer + QS channel mixer
    SBESSMBlock        eSSM residual blocks (essm.md §1.12), bidirectional kernel
    SBMyoBlock         Myo blocks (myosotis.md §3) on a ceil k-ary tree over the sequence (§2.4), virtual
                       nodes carried through the layers and dropped at the end
"""
from __future__ import annotations

import speechbrain  # noqa: F401  (fail here, with the toolbox's own error, when SpeechBrain is missing)
import torch
import torch.nn as nn

from .layers import ESSMBlock, MambaMixerBlock, MyoBlock, QSMixerBlock
from .ops import myo_tree

__all__ = ["SBMambaMixerBlock", "SBQSMixerBlock", "SBESSMBlock", "SBMyoBlock"]


def _check_num_layers(num_layers):
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")


def _check_chunks(x, d_model):
    """The dual-path contract: a (B*S, K, N) tensor with N = d_model and at least one step."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != d_model or x.shape[1] < 1:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape [B*S, K, N] (sequences, steps, N=d_model={d_model}), got {got}")


class _SBMixerStack(nn.Module):
    """``num_layers`` MambaMixer/QSMixer blocks; the channel mixer's token-axis weights are built for
    ``num_tokens`` steps and linearly resampled for other lengths (spec §4.4 ``channel_res_mode='resample'``)."""

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
    """Dual-path intra/inter model of MambaMixer blocks (mambamixer.md §4.4 [D]: DPMamba with each bidirectional
    Mamba replaced by a MambaMixer block).

    Args:
        num_layers: MambaMixer blocks in a row (DPMamba-M: 1 per intra/inter model).
        d_model: N, the masknet width (Dual_Path_Model ``out_channels``).
        num_tokens: steps the channel mixer's token-axis weights are sized for: the chunk size K for the intra
            model, a typical number of chunks S for the inter model; other lengths are resampled [250].
        d_state, expand, d_conv: S6 sizes [DPMamba: 16, 2, 4].
        bidirectional: forward + backward S6 (``token_mixer='s6_bi'``, 'same' padding) or causal S6 [True]. The
            channel mixer's selection reads every step, so only ``channel_mixer=False`` makes a causal block.
        channel_mixer: the selective channel mixer over the N encoder channels [True]; False = plain
            (bidirectional) Mamba-style blocks with the multi-resolution gate (spec's ``inter_channel_mixer``).
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
    """Dual-path intra/inter model of QSMixer blocks (mambamixer.md §2.4, §4.4): scalar-A quasi-separable token
    mixer (non-causal by construction, so no ``bidirectional`` switch) and the QS channel mixer.

    Args: as :class:`SBMambaMixerBlock`, plus ``headdim`` (features per QS head; must divide expand*d_model) [64].
    """

    block_cls = QSMixerBlock

    def __init__(self, num_layers: int, d_model: int, num_tokens: int = 250, d_state: int = 16, expand: int = 2,
                 d_conv: int = 4, headdim: int = 64, channel_mixer: bool = True, norm: str = "rmsnorm",
                 drop_path: float = 0.0, **mixer_kwargs):
        super().__init__(num_layers, d_model, num_tokens, channel_mixer, norm, drop_path, d_state=d_state,
                         expand=expand, d_conv=d_conv, headdim=headdim, **mixer_kwargs)


class SBESSMBlock(nn.Module):
    """Dual-path intra/inter model of ``num_layers`` eSSM residual blocks (essm.md §1.11-1.12).

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
    """Dual-path intra/inter model of ``num_layers`` Myo blocks (myosotis.md §3) over a ceil ``arity``-ary tree of
    the K steps (§2.4: leaves = steps in order; internal nodes are virtual).

    The virtual nodes start at zero (the spec's "zero" option for layer-1 virtual inputs) and are persistent
    through the ``num_layers`` blocks (their outputs are the next block's inputs); the leaves are returned.
    The layer is non-causal by construction (child->parent and parent->child coupling).

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
