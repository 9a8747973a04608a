"""The multi-resolution convolution branch of ViM2 / ViQS and its fusion with the tokens (Behrouz et al. 2024,
"MambaMixer", arXiv:2403.19888 v2, Sec. 3, App. E; derived from ViT-CoMer; our choices where the paper is silent:
docs/mambamixer.md, 'Multi-resolution branch').

    SpatialPriorModule       the conv stem: the image -> the 1/4 map and the 1/8, 1/16, 1/32 levels' tokens.
    MultiResolutionConvGate  Eq. 11 (ViT-CoMer's MRFP): the per-level mixed depthwise convolutions.
    ConvTokenInteraction     the conv <-> token fusion of one interaction (App. E, Eq. 44).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import check_tokens, is_positive_int, positive_int, shape_or_type

__all__ = ["SpatialPriorModule", "MultiResolutionConvGate", "ConvTokenInteraction"]


def _conv_bn_relu(cin, cout, stride):
    return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def _check_levels(F_tokens, dim, sizes):
    sizes = [tuple(int(v) for v in s) for s in sizes]
    if len(sizes) != 3:
        raise ValueError(f"sizes must list the 3 levels' (height, width), got {sizes!r}")
    check_tokens("F_tokens", F_tokens, dim, sum(h * w for h, w in sizes), f" = the sum of h*w over sizes {sizes}")
    return sizes


class SpatialPriorModule(nn.Module):
    """Conv stem of the multi-resolution branch (SPM; ViT-CoMer ``CNN``, docs/mambamixer.md 'Multi-resolution
    branch'): image (batch, 3, H, W) -> c1 (batch, dim, H/4, W/4) and the tokens of F1, F2, F3 at 1/8, 1/16, 1/32
    concatenated along the token axis (batch, n1 + n2 + n3, dim) with a learnable embedding per level, plus the 3
    levels' (height, width).

    Args: dim; inplanes: stem width (1/4 level; then 2x, 4x, 4x) [D: 64]; in_chans [3]; with_c1: build the 1/4
    level's projection (only dense outputs use c1; without it c1 is None, so no parameter goes without a gradient).
    The level embeddings are kept out of weight decay (``no_weight_decay_names``).
    """

    no_weight_decay_names = ("level_embed",)

    def __init__(self, dim: int, inplanes: int = 64, in_chans: int = 3, with_c1: bool = True):
        super().__init__()
        for name, value in (("dim", dim), ("inplanes", inplanes), ("in_chans", in_chans)):
            positive_int(name, value)
        self.dim = dim
        self.stem = nn.Sequential(*_conv_bn_relu(in_chans, inplanes, 2), *_conv_bn_relu(inplanes, inplanes, 1),
                                  *_conv_bn_relu(inplanes, inplanes, 1), nn.MaxPool2d(3, 2, 1))
        self.down8 = nn.Sequential(*_conv_bn_relu(inplanes, 2 * inplanes, 2))
        self.down16 = nn.Sequential(*_conv_bn_relu(2 * inplanes, 4 * inplanes, 2))
        self.down32 = nn.Sequential(*_conv_bn_relu(4 * inplanes, 4 * inplanes, 2))
        self.proj_c1 = nn.Conv2d(inplanes, dim, 1) if with_c1 else None
        self.proj = nn.ModuleList(nn.Conv2d(c, dim, 1) for c in (2 * inplanes, 4 * inplanes, 4 * inplanes))
        self.level_embed = nn.Parameter(torch.zeros(3, dim))
        nn.init.trunc_normal_(self.level_embed, std=0.02)

    def forward(self, img):
        if not isinstance(img, torch.Tensor) or img.dim() != 4 or img.shape[1] != self.stem[0].in_channels:
            shape = shape_or_type(img)
            raise ValueError(f"img must have shape (batch, {self.stem[0].in_channels}, H, W), got {shape}")
        # channels-last: oneDNN's full-resolution 3x3 convs and the max-pool run 3-10x faster on NHWC (one thread)
        c1 = self.stem(img.contiguous(memory_format=torch.channels_last))
        c2 = self.down8(c1)
        c3 = self.down16(c2)
        c4 = self.down32(c3)
        maps = [p(c) for p, c in zip(self.proj, (c2, c3, c4))]
        sizes = [tuple(m.shape[-2:]) for m in maps]
        tokens = torch.cat([m.flatten(2).transpose(1, 2) + self.level_embed[i] for i, m in enumerate(maps)], 1)
        return (self.proj_c1(c1) if self.proj_c1 is not None else None), tokens, sizes


class MultiResolutionConvGate(nn.Module):
    """Eq. 11 (ViT-CoMer ``MRFP``): F_conv = W_c1 GELU(BN(MixDW(W_c2 F))) on the concatenated level tokens.

    MixDW works inside each resolution: the hidden channels are split among ``kernels`` and every level has its
    own depthwise k x k convs. Args: dim; kernels [D: (3, 5), App. I.2]; hidden_ratio: hidden = ratio*dim [0.5].
    ``forward(F_tokens (batch, n1+n2+n3, dim), sizes)`` -> same shape.
    """

    def __init__(self, dim: int, kernels: Sequence[int] = (3, 5), hidden_ratio: float = 0.5):
        super().__init__()
        positive_int("dim", dim)
        kernels = tuple(kernels)
        if not kernels or not all(is_positive_int(k) and k % 2 == 1 for k in kernels):
            raise ValueError(f"kernels must be a non-empty sequence of odd positive ints, got {kernels!r}")
        hidden = int(round(dim * hidden_ratio))
        if hidden < len(kernels):
            raise ValueError(f"hidden_ratio*dim = {hidden} must be at least len(kernels) = {len(kernels)}")
        self.dim, self.hidden, self.kernels = dim, hidden, kernels
        self.splits = [len(c) for c in torch.arange(hidden).tensor_split(len(kernels))]
        self.fc_in = nn.Linear(dim, hidden)  # W_c2
        self.dwconvs = nn.ModuleList(
            nn.ModuleList(nn.Conv2d(c, c, k, padding=k // 2, groups=c) for c, k in zip(self.splits, kernels))
            for _ in range(3))
        self.norm = nn.BatchNorm1d(hidden)
        self.fc_out = nn.Linear(hidden, dim)  # W_c1

    def forward(self, F_tokens, sizes):
        sizes = _check_levels(F_tokens, self.dim, sizes)
        h = self.fc_in(F_tokens)
        outs = []
        for level, ((height, width), chunk) in enumerate(zip(sizes, h.split([a * b for a, b in sizes], dim=1))):
            grid = chunk.transpose(1, 2).reshape(chunk.shape[0], self.hidden, height, width)
            parts = [conv(part) for conv, part in zip(self.dwconvs[level], grid.split(self.splits, dim=1))]
            outs.append(torch.cat(parts, 1).flatten(2))
        h = F.gelu(self.norm(torch.cat(outs, dim=2))).transpose(1, 2)
        return self.fc_out(h)


class ConvTokenInteraction(nn.Module):
    """Bi-directional conv <-> token fusion of one interaction (App. E: ViT-CoMer CTI with attention replaced by
    Linear; details docs/mambamixer.md 'Multi-resolution branch').

    ``to_tokens(x_grid, F_conv, sizes)``: V = Linear_v(LN([F1 ‖ F2 + x_grid ‖ F3])); V1 resized down and V3 up to
        the 1/16 grid (bilinear); returns x_grid + λ_v ⊙ (V1↓ + V2 + V3↑), λ_v = 0 at init.
    ``to_conv(F_conv, x_grid, sizes)``: Eq. 44, F̂ = [F1 ‖ F2 + x_S ‖ F3]; returns F̂ + Linear_c(LN(F̂)) [D residual].
    x_grid (batch, h2*w2, dim) are the patch tokens without the class token; the 1/16 level must match their grid.
    λ_v is kept out of weight decay (``no_weight_decay_names``).
    """

    no_weight_decay_names = ("lambda_v",)

    def __init__(self, dim: int, with_to_conv: bool = True):
        super().__init__()
        positive_int("dim", dim)
        self.dim = dim
        self.norm_v = nn.LayerNorm(dim, eps=1e-6)
        self.proj_v = nn.Linear(dim, dim)
        self.lambda_v = nn.Parameter(torch.zeros(dim))
        # the last interaction's tokens->conv update feeds only dense outputs: built only when it is used
        self.with_to_conv = with_to_conv
        if with_to_conv:
            self.norm_c = nn.LayerNorm(dim, eps=1e-6)
            self.proj_c = nn.Linear(dim, dim)

    def _add_grid(self, F_conv, x_grid, sizes):
        sizes = _check_levels(F_conv, self.dim, sizes)
        n1, n2 = sizes[0][0] * sizes[0][1], sizes[1][0] * sizes[1][1]
        check_tokens("x_grid", x_grid, self.dim, n2, f" = h*w of the 1/16 level {sizes[1]}")
        added = torch.cat([F_conv[:, :n1], F_conv[:, n1:n1 + n2] + x_grid, F_conv[:, n1 + n2:]], dim=1)
        return added, sizes

    def to_tokens(self, x_grid, F_conv, sizes):
        fused, sizes = self._add_grid(F_conv, x_grid, sizes)
        V = self.proj_v(self.norm_v(fused))
        target = sizes[1]
        total = 0
        for (height, width), chunk in zip(sizes, V.split([a * b for a, b in sizes], dim=1)):
            if (height, width) != target:
                grid = chunk.transpose(1, 2).reshape(chunk.shape[0], self.dim, height, width)
                chunk = F.interpolate(grid, size=target, mode="bilinear", align_corners=False).flatten(2).transpose(1, 2)
            total = total + chunk
        return x_grid + self.lambda_v * total

    def to_conv(self, F_conv, x_grid, sizes):
        if not self.with_to_conv:
            raise RuntimeError("to_conv needs an interaction built with with_to_conv=True")
        fused, _ = self._add_grid(F_conv, x_grid, sizes)
        return fused + self.proj_c(self.norm_c(fused))
