"""ASMambaMixer / ASQSMixer: MambaMixer and QSMixer blocks in ASFormer's encoder for temporal action segmentation
(MambaMixer paper, arXiv 2403.19888 v2, App. H.2, Table 9: GTEA), with MS-TCN's single stage as the control.

The paper: "we use the architecture design of ... ASFormer, but replace the transformer architecture with
MambaMixer and QSMixer blocks"; its baselines are those of the Video Mamba Suite (Chen et al. 2024), whose
ASMamba rows are ASFormer's encoder alone ("Enc"). Ours [D] (docs/mambamixer.md, 'Video'):

    features (batch, T, 2048) -> channel dropout (Dropout2d, rate 0.3)
      -> Conv1d(2048 -> F, 1)
      -> ``num_layers`` layers i = 0 .. n-1 (ASFormer's AttModule with the attention replaced):
             h = ReLU(Conv1d_{k=3, dilation 2^i}(x))                       (ASFormer's ConvFeedForward)
             h = h + [MixerBlock(InstanceNorm(h)) - InstanceNorm(h)]      (the block's two residual updates)
             x = x + Dropout(Conv1d(F -> F, 1)(h))
      -> Conv1d(F -> classes, 1) -> (batch, T, classes) frame logits

MixerBlock: ``block='mambamixer'``: MambaMixerBlock with the bidirectional S6 token mixer (``s6_bi``; video is
not causal) and the QS channel mixer over the F channels; ``'qsmixer'``: QSMixerBlock (QS along time and
channels); ``'none'``: no mixer, which makes each layer MS-TCN's DilatedResidualLayer and the model MS-TCN's
single stage (SS-TCN; Farha & Gall 2019), the control. The channel mixer's selection weights act on the time axis;
they are built for ``num_frames`` frames and resampled linearly to each video's length (``token_grid=(1,
num_frames)``; docs/mambamixer.md, 'Channel mixer at other token counts').
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..layers._common import choice, positive_int, probability, shape_or_type
from ..layers.mambamixer import MambaMixerBlock, QSMixerBlock
from ._common import no_weight_decay_names

__all__ = ["ActionSegmentationMixer", "SEGMENTATION_BLOCKS"]

SEGMENTATION_BLOCKS = ("mambamixer", "qsmixer", "none")


class _EncoderLayer(nn.Module):
    """One layer: dilated conv feed-forward, the mixer block's residual updates, 1x1 conv, dropout, residual."""

    def __init__(self, channels: int, dilation: int, block: str, num_frames: int, d_state: int, expand: int,
                 headdim: int, dropout: float):
        super().__init__()
        self.feed_forward = nn.Conv1d(channels, channels, 3, padding=dilation, dilation=dilation)
        if block == "none":
            self.norm = self.mixer = None
        else:
            self.norm = nn.InstanceNorm1d(channels, track_running_stats=False)
            common = dict(d_state=d_state, expand=expand, token_grid=(1, num_frames))
            self.mixer = (MambaMixerBlock(channels, num_frames, token_mixer="s6_bi", **common) if block == "mambamixer"
                          else QSMixerBlock(channels, num_frames, headdim=headdim, **common))
        self.conv_1x1 = nn.Conv1d(channels, channels, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, F, T)
        h = torch.relu(self.feed_forward(x))
        if self.mixer is not None:
            normed = self.norm(h).transpose(1, 2)  # (batch, T, F)
            h = h + (self.mixer(normed, grid_size=(1, normed.shape[1])) - normed).transpose(1, 2)
        return x + self.dropout(self.conv_1x1(h))


class ActionSegmentationMixer(nn.Module):
    """Frame-wise action classifier (batch, T, features_dim) -> (batch, T, num_classes) logits.

    Args:
        num_classes: actions (GTEA 11). features_dim: input features per frame [2048, I3D].
        block: 'mambamixer' | 'qsmixer' | 'none' (MS-TCN's single stage) [D: 'mambamixer'].
        num_layers: dilated layers, dilation 2^i [ASFormer, MS-TCN: 10]. num_f_maps: width F [64].
        num_frames: the frame count the channel mixer's time-axis weights are built for [D: 1024].
        d_state, expand, headdim: the mixers' N, expansion and QS head size [16, 2, 16].
        channel_mask_rate: Dropout2d on the input feature channels [ASFormer: 0.3].
        dropout: after each layer's 1x1 conv [ASFormer, MS-TCN: 0.5].
    """

    def __init__(self, num_classes: int, features_dim: int = 2048, block: str = "mambamixer", num_layers: int = 10,
                 num_f_maps: int = 64, num_frames: int = 1024, d_state: int = 16, expand: int = 2,
                 headdim: int = 16, channel_mask_rate: float = 0.3, dropout: float = 0.5):
        super().__init__()
        for name, value in (("num_classes", num_classes), ("features_dim", features_dim), ("num_layers", num_layers),
                            ("num_f_maps", num_f_maps), ("num_frames", num_frames)):
            positive_int(name, value)
        choice("block", block, SEGMENTATION_BLOCKS)
        probability("channel_mask_rate", channel_mask_rate)
        probability("dropout", dropout)
        self.num_classes, self.features_dim, self.block = num_classes, features_dim, block
        self.channel_dropout = nn.Dropout2d(channel_mask_rate)
        self.conv_in = nn.Conv1d(features_dim, num_f_maps, 1)
        self.layers = nn.ModuleList(_EncoderLayer(num_f_maps, 2 ** i, block, num_frames, d_state, expand, headdim,
                                                  dropout) for i in range(num_layers))
        self.conv_out = nn.Conv1d(num_f_maps, num_classes, 1)

    def no_weight_decay(self):
        return no_weight_decay_names(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.features_dim:
            raise ValueError(f"x must have shape (batch, frames, features_dim) with features_dim={self.features_dim}, "
                             f"got {shape_or_type(x)}")
        h = x.transpose(1, 2)  # (batch, D, T)
        h = self.channel_dropout(h.unsqueeze(-1)).squeeze(-1)  # whole feature channels dropped (ASFormer)
        h = self.conv_in(h)
        for layer in self.layers:
            h = layer(h)
        return self.conv_out(h).transpose(1, 2)
