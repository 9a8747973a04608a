"""ActionMambaMixer / ActionQSMixer: MambaMixer and QSMixer blocks in ActionFormer for temporal action localisation
(MambaMixer paper, arXiv 2403.19888 v2, App. H.2, Table 8: HACS Segment, mAP at tIoU 0.5 / 0.75 / 0.95), with
ActionFormer's own local-attention transformer as the control.

The paper: "we use the architecture design of ActionFormer ... but replace the transformer architecture with
MambaMixer and QSMixer blocks"; its baselines are the Video Mamba Suite's (Chen et al. 2024). ActionFormer (Zhang,
Wu & Li, ECCV 2022) is kept as its authors define it; ours [D] where the paper is silent (docs/mambamixer.md,
'Video'):

    features (batch, T, C) -> 2 x [Conv1d(k 3) -> LayerNorm -> ReLU]                  (embedding, width D)
      -> ``arch[1]`` blocks at T (the stem)                                        -> level 0
      -> ``arch[2]`` x [MaxPool1d(3, stride 2) -> block]                           -> levels 1 .. arch[2]
      -> LayerNorm per level (ActionFormer's identity neck)
      -> heads shared by the levels, each (head_layers - 1) x [Conv1d(k 3) -> LayerNorm -> ReLU] then
         classification Conv1d(-> classes, bias at prior 0.01) and regression Conv1d(-> 2) x Scale_l -> ReLU:
         the distances (in strides) from each point to its action's start and end

A block: ``'mambamixer'``: MambaMixerBlock (bidirectional S6 along time, ``s6_bi``: video is not causal, and the
QS channel mixer over the D channels); ``'qsmixer'``: QSMixerBlock; ``'attention'`` (the control): ActionFormer's
pre-norm transformer block, multi-head self-attention restricted to a window of ``window`` steps, then a 4x MLP.
Downsampling is the same max-pool before every branch block for all three (ActionFormer folds it into the
attention's strided projections), so the blocks differ only in the mixing. The channel mixer's time-axis weights are
built for each level's fixed length (``seq_len / 2^l``): the recipe resizes every video to ``seq_len`` steps.

Training (``loss``): ActionFormer's. Points at every step of every level (level l: stride 2^l); a point is positive
for the shortest ground-truth action that contains it within ``center_sample_radius`` strides of the action's
centre and whose largest distance lies in the level's regression range; sigmoid focal loss (torchvision) on every
point with smoothed one-hot targets, and the 1-D distance-IoU loss on the positives, both over an EMA of the number
of positives. Inference (``predict``): scores above ``min_score``, ``pre_nms_topk`` per level, segments decoded,
class-wise Gaussian soft-NMS, the ``max_segments`` best.
"""
from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import sigmoid_focal_loss

from ..layers._common import choice, drop_path, positive_int, probability, shape_or_type
from ..layers.mambamixer import MambaMixerBlock, QSMixerBlock
from ._common import no_weight_decay_names

__all__ = ["ActionLocalizationMixer", "LOCALIZATION_BLOCKS", "diou_loss_1d", "soft_nms_1d"]

LOCALIZATION_BLOCKS = ("mambamixer", "qsmixer", "attention")
# ActionFormer's regression ranges for its 6 levels, in level-0 steps
REGRESSION_RANGES = ((0, 4), (4, 8), (8, 16), (16, 32), (32, 64), (64, 10000))


class _ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of a (batch, C, T) map."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class _LocalAttentionBlock(nn.Module):
    """ActionFormer's transformer block (pre-norm): x + MHA_window(LN(x)); x + MLP(LN(x)), on (batch, T, D)."""

    def __init__(self, dim: int, heads: int, window: int, drop_path: float):
        super().__init__()
        self.window, self.drop_path_prob = window, drop_path
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, grid_size=None):
        steps = torch.arange(x.shape[1], device=x.device)
        mask = (steps[:, None] - steps[None, :]).abs() > self.window // 2  # True: not attended
        h = self.norm1(x)
        x = x + drop_path(self.attn(h, h, h, attn_mask=mask, need_weights=False)[0], self.drop_path_prob,
                          self.training)
        return x + drop_path(self.mlp(self.norm2(x)), self.drop_path_prob, self.training)


def _head(dim: int, out: int, layers: int) -> nn.Sequential:
    parts = []
    for _ in range(layers - 1):
        parts += [nn.Conv1d(dim, dim, 3, padding=1), _ChannelNorm(dim), nn.ReLU()]
    return nn.Sequential(*parts, nn.Conv1d(dim, out, 3, padding=1))


def diou_loss_1d(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Distance-IoU loss of 1-D segments given as (distance to start, distance to end) from the same point,
    (N, 2) each: 1 - IoU + (centre distance / enclosing length)^2 (Zheng et al. 2020; ActionFormer's), summed."""
    lp, rp = pred.unbind(-1)
    lg, rg = target.unbind(-1)
    inter = torch.min(lp, lg) + torch.min(rp, rg)
    union = lp + rp + lg + rg - inter
    iou = inter / union.clamp(min=eps)
    enclosing = torch.max(lp, lg) + torch.max(rp, rg)
    centre = 0.5 * (rp - lp - rg + lg)
    return (1 - iou + (centre / enclosing.clamp(min=eps)) ** 2).sum()


def soft_nms_1d(segments: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, sigma: float,
                max_segments: int, min_score: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Class-wise Gaussian soft-NMS (Bodla et al. 2017) of (N, 2) segments: repeatedly keep the best remaining
    segment and decay every other same-class score by exp(-tIoU^2 / sigma); stops at ``max_segments`` kept or when
    no score is above ``min_score``. Returns the kept (segments, scores, labels), best first."""
    scores = scores.clone()
    kept = []
    alive = scores > min_score
    while alive.any() and len(kept) < max_segments:
        best = torch.where(alive, scores, scores.new_tensor(-1.0)).argmax()
        kept.append((segments[best], scores[best].clone(), labels[best]))
        alive[best] = False
        same = alive & (labels == labels[best])
        inter = (torch.min(segments[:, 1], segments[best, 1]) - torch.max(segments[:, 0], segments[best, 0])).clamp(min=0)
        union = (segments[:, 1] - segments[:, 0]) + (segments[best, 1] - segments[best, 0]) - inter
        iou = inter / union.clamp(min=1e-8)
        scores = torch.where(same, scores * torch.exp(-(iou ** 2) / sigma), scores)
        alive &= scores > min_score
    if not kept:
        return segments.new_zeros(0, 2), scores.new_zeros(0), labels.new_zeros(0)
    s, c, l = zip(*kept)
    return torch.stack(s), torch.stack(c), torch.stack(l)


class ActionLocalizationMixer(nn.Module):
    """ActionFormer with MambaMixer / QSMixer blocks (or its own local attention): (batch, seq_len, features_dim)
    features -> per level, classification logits (batch, T_l, classes) and distances (batch, T_l, 2).

    Args:
        num_classes: actions (HACS 200). features_dim: input features per step [2304: SlowFast 2048 + 256].
        seq_len: the fixed number of steps every video is resized to [D: 960, the Video Mamba Suite's HACS length].
        block: 'mambamixer' | 'qsmixer' | 'attention' (ActionFormer, the control) [D: 'mambamixer'].
        embed_dim: D of the embedding, blocks and heads [D: 512]. arch: (embedding convs, stem blocks, branch
            blocks) [ActionFormer: (2, 2, 5)]; arch[2] + 1 levels, at most 6 (its regression ranges).
        d_state, expand, headdim: the mixers' N, expansion and QS head size [16, 2, 16].
        heads, window: the control's attention heads and window [ActionFormer: 4, 19].
        drop_path: stochastic depth in the blocks [ActionFormer: 0.1]. head_layers: convolutions per head [3].
        center_sample_radius, label_smoothing, focal alpha / gamma: ActionFormer's [1.5, 0.1, 0.25, 2].
        prior_prob: the classification bias's initial probability [0.01].
        init_loss_norm: the starting value of the losses' normaliser, an EMA (momentum 0.9) of the positive points
            per batch [ActionFormer: 100; its ActivityNet config 400].
        channel_mixer: False drops the mixers' channel mixer (the paper's "- QS" ablation, Table 3) [True].
    """

    def __init__(self, num_classes: int, features_dim: int = 2304, seq_len: int = 960, block: str = "mambamixer",
                 embed_dim: int = 512, arch: Sequence[int] = (2, 2, 5), d_state: int = 16, expand: int = 2,
                 headdim: int = 16, heads: int = 4, window: int = 19, drop_path: float = 0.1, head_layers: int = 3,
                 center_sample_radius: float = 1.5, label_smoothing: float = 0.1, prior_prob: float = 0.01,
                 init_loss_norm: float = 100.0, channel_mixer: bool = True):
        super().__init__()
        for name, value in (("num_classes", num_classes), ("features_dim", features_dim), ("seq_len", seq_len),
                            ("embed_dim", embed_dim), ("head_layers", head_layers), ("window", window)):
            positive_int(name, value)
        choice("block", block, LOCALIZATION_BLOCKS)
        probability("drop_path", drop_path)
        probability("label_smoothing", label_smoothing)
        arch = tuple(int(a) for a in arch)
        if len(arch) != 3 or arch[0] < 1 or arch[1] < 0 or not 0 <= arch[2] <= len(REGRESSION_RANGES) - 1:
            raise ValueError(f"arch must be (embedding convs >= 1, stem blocks >= 0, branch blocks 0 .. "
                             f"{len(REGRESSION_RANGES) - 1}), got {arch}")
        if seq_len % 2 ** arch[2]:
            raise ValueError(f"seq_len must be divisible by 2^{arch[2]} (one halving per branch block), got {seq_len}")
        self.num_classes, self.features_dim, self.seq_len, self.block = num_classes, features_dim, seq_len, block
        self.center_sample_radius, self.label_smoothing = float(center_sample_radius), float(label_smoothing)
        self.levels = arch[2] + 1
        self.embed = nn.Sequential(*[m for i in range(arch[0]) for m in (
            nn.Conv1d(features_dim if i == 0 else embed_dim, embed_dim, 3, padding=1), _ChannelNorm(embed_dim),
            nn.ReLU())])

        def make_block(length: int) -> nn.Module:
            if block == "attention":
                return _LocalAttentionBlock(embed_dim, heads, window, drop_path)
            common = dict(drop_path=drop_path, d_state=d_state, expand=expand, token_grid=(1, length),
                          channel_mixer=channel_mixer)
            if block == "mambamixer":
                return MambaMixerBlock(embed_dim, length, token_mixer="s6_bi", **common)
            return QSMixerBlock(embed_dim, length, headdim=headdim, **common)

        self.stem = nn.ModuleList(make_block(seq_len) for _ in range(arch[1]))
        self.branch = nn.ModuleList(make_block(seq_len // 2 ** (i + 1)) for i in range(arch[2]))
        self.pool = nn.MaxPool1d(3, stride=2, padding=1)
        self.neck = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(self.levels))
        self.cls_head = _head(embed_dim, num_classes, head_layers)
        self.reg_head = _head(embed_dim, 2, head_layers)
        self.scales = nn.Parameter(torch.ones(self.levels))
        nn.init.constant_(self.cls_head[-1].bias, -math.log((1 - prior_prob) / prior_prob))
        # ActionFormer's EMA of the positives per batch, from its initial value (its ActivityNet config: 400)
        self.register_buffer("loss_normalizer", torch.tensor(float(init_loss_norm)))

    def no_weight_decay(self):
        return no_weight_decay_names(self, ("scales",), (nn.LayerNorm,))

    def forward(self, x: torch.Tensor) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1:] != (self.seq_len, self.features_dim):
            raise ValueError(f"x must have shape (batch, seq_len={self.seq_len}, features_dim={self.features_dim}), "
                             f"got {shape_or_type(x)}")
        h = self.embed(x.transpose(1, 2)).transpose(1, 2)  # (batch, T, D)
        for block in self.stem:
            h = block(h, grid_size=(1, h.shape[1]))
        pyramid = [h]
        for block in self.branch:
            h = self.pool(h.transpose(1, 2)).transpose(1, 2)
            h = block(h, grid_size=(1, h.shape[1]))
            pyramid.append(h)
        logits, distances = [], []
        for level, (h, norm) in enumerate(zip(pyramid, self.neck)):
            h = norm(h).transpose(1, 2)
            logits.append(self.cls_head(h).transpose(1, 2))
            distances.append(F.relu(self.reg_head(h) * self.scales[level]).transpose(1, 2))
        return logits, distances

    def points(self, device=None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every level's points, concatenated: position (level-0 steps), stride, regression range (P, 2)."""
        pos, stride, ranges = [], [], []
        for level in range(self.levels):
            s = 2 ** level
            n = self.seq_len // s
            pos.append(torch.arange(n, device=device, dtype=torch.float32) * s)
            stride.append(torch.full((n,), float(s), device=device))
            lo, hi = REGRESSION_RANGES[level]
            if level == self.levels - 1:
                hi = REGRESSION_RANGES[-1][1]  # the top level takes every longer action
            ranges.append(torch.tensor([[lo, hi]], device=device, dtype=torch.float32).expand(n, 2))
        return torch.cat(pos), torch.cat(stride), torch.cat(ranges)

    def assign(self, segments: torch.Tensor, labels: torch.Tensor, device=None):
        """ActionFormer's centre sampling for one video: (P, classes) targets and (P, 2) distances in strides."""
        pos, stride, ranges = self.points(device)
        targets = torch.zeros(len(pos), self.num_classes, device=device)
        distances = torch.zeros(len(pos), 2, device=device)
        if len(segments) == 0:
            return targets, distances, torch.zeros(len(pos), dtype=torch.bool, device=device)
        segments = segments.to(device).float()
        left = pos[:, None] - segments[None, :, 0]  # (P, K)
        right = segments[None, :, 1] - pos[:, None]
        centre = segments.mean(-1)[None]
        radius = self.center_sample_radius * stride[:, None]
        inside = ((pos[:, None] >= torch.max(segments[None, :, 0], centre - radius))
                  & (pos[:, None] <= torch.min(segments[None, :, 1], centre + radius)))
        reach = torch.max(left, right)
        in_range = (reach >= ranges[:, :1]) & (reach <= ranges[:, 1:])
        lengths = (segments[:, 1] - segments[:, 0])[None].expand_as(left)
        lengths = torch.where(inside & in_range, lengths, torch.full_like(lengths, float("inf")))
        best_length, best = lengths.min(1)
        positive = torch.isfinite(best_length)
        targets[positive, labels.to(device)[best[positive]]] = 1.0
        idx = torch.arange(len(pos), device=device)
        distances = torch.stack([left[idx, best], right[idx, best]], -1) / stride[:, None]
        return targets, distances, positive

    def loss(self, outputs, segments: Sequence[torch.Tensor], labels: Sequence[torch.Tensor]) -> Dict[str, torch.Tensor]:
        """ActionFormer's losses for a batch: ``segments`` per video (K, 2) in level-0 steps, ``labels`` (K,)."""
        logits, distances = (torch.cat(o, dim=1) for o in outputs)  # (batch, P, .)
        assigned = [self.assign(s, l, logits.device) for s, l in zip(segments, labels)]
        targets, target_dist, positive = (torch.stack(a) for a in zip(*assigned))
        num_pos = positive.sum()
        if self.training:  # ActionFormer: the normaliser follows the positives, momentum 0.9
            self.loss_normalizer.mul_(0.9).add_(0.1 * max(num_pos.item(), 1))
        norm = self.loss_normalizer
        targets = targets * (1 - self.label_smoothing) + self.label_smoothing / (self.num_classes + 1)
        cls = sigmoid_focal_loss(logits, targets, alpha=0.25, gamma=2.0, reduction="sum") / norm
        reg = diou_loss_1d(distances[positive], target_dist[positive]) / norm if num_pos > 0 else logits.sum() * 0
        return {"cls": cls, "reg": reg, "total": cls + reg}

    @torch.no_grad()
    def predict(self, outputs, min_score: float = 0.001, pre_nms_topk: int = 2000, nms_sigma: float = 0.8,
                max_segments: int = 100, duration_thresh: float = 0.05):
        """Per video: (segments (N, 2) in level-0 steps clipped to [0, seq_len], class indices, scores)."""
        logits, distances = outputs
        pos, stride, _ = self.points(logits[0].device)
        starts = torch.cumsum(torch.tensor([0] + [l.shape[1] for l in logits]), 0).tolist()
        results = []
        for b in range(logits[0].shape[0]):
            segs, scores, labels = [], [], []
            for level, (lg, dist) in enumerate(zip(logits, distances)):
                prob = lg[b].sigmoid().flatten()
                keep = prob > min_score
                idx = keep.nonzero().squeeze(1)
                top = prob[idx].topk(min(pre_nms_topk, len(idx))).indices
                idx = idx[top]
                point, label = idx // self.num_classes, idx % self.num_classes
                p = pos[starts[level] + point]
                s = stride[starts[level] + point]
                seg = torch.stack([p - dist[b, point, 0] * s, p + dist[b, point, 1] * s], -1).clamp(0, self.seq_len)
                long_enough = (seg[:, 1] - seg[:, 0]) > duration_thresh
                segs.append(seg[long_enough])
                scores.append(prob[idx][long_enough])
                labels.append(label[long_enough])
            kept, kept_scores, kept_labels = soft_nms_1d(torch.cat(segs), torch.cat(scores), torch.cat(labels),
                                                         nms_sigma, max_segments, min_score)
            results.append((kept, kept_labels, kept_scores))
        return results
