"""TSM2 / TSQS: MambaMixer and QSMixer for multivariate long-term forecasting (MambaMixer paper, arXiv:2403.19888
v2, App. H.3-H.4, Table 10; v1 details from arXiv 2403.19888 v1, Sec. 5 [P1]) as timm models. Our choices [D]:
docs/mambamixer.md, 'Time-series forecasting'.

    x (batch, L, M) look-back window of M variates
      -> RevIN (per-instance, per-variate mean/std with a learnable affine map; Kim et al. 2022)
      -> patching of each variate separately [P1, v1 Sec. 5]: patch_len / stride with the last value repeated ``stride``
         times at the end (PatchTST's ``padding_patch='end'``), P patches; Linear(patch_len -> D) shared by the
         variates + a learnable position embedding (P, D)
      -> ``depth`` TimeVariateMixerBlocks (layers.mambamixer): the selective token mixer along the patches of each
         variate (TSM2: causal S6 [P1 "unidirectional"]; TSQS: QS) and the selective channel mixer along the
         variates (QS, non-causal: selects the relevant variates, App. F.2), pre-norm LayerNorm residuals,
         in a MixerStack with v1's weighted averaging of earlier features (v1 Sec. 3.2; ``dense_wavg=True`` as its TSM2)
      -> final norm, per-variate flatten head Linear(P·D -> H) shared by the variates (TSMixer / SAMFormer /
         PatchTST convention [D]) -> RevIN inverse -> (batch, H, M).

The paper reports neither width, depth nor patch size ("tuned by grid search", v1 Sec. 5); the defaults are [D]:
PatchTST's patch 16 / stride 8 on the 512-step input (64 patches), D 64, depth 2, N 16, dropout 0.1.

Registered variants (every size argument can be overridden, e.g. ``timm.create_model('tsm2', n_vars=321,
pred_len=720)``):
  * ``tsm2``: MambaMixer blocks with the causal S6 time mixer and dense weighted averaging.
  * ``tsqs``: QSMixer blocks (QS time mixer, scalar A) with dense weighted averaging.

The timm interface of a forecaster: ``forward(x)`` (batch, seq_len, n_vars) -> (batch, pred_len, n_vars) in the
input's units; ``normalize(x)`` -> (RevIN-normalised input, statistics), ``forward_features(x_norm)`` ->
(batch, n_vars, P, D), ``forward_head(features)`` -> the normalised forecast, ``denormalize(y, statistics)``;
``reset_classifier(pred_len)`` builds a new head for another horizon. RevIN is written here (12 lines, as in
the RevIN paper's reference code): no package of the stack provides it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Set, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from ..layers._common import is_positive_int, make_mixer_norm, positive_int, shape_or_type
from ..layers.mambamixer import MixerStack, TimeVariateMixerBlock
from ._common import local_weights_cfg, new_head, no_weight_decay_names

__all__ = ["TimeSeriesMixer", "RevIN", "DLinear", "SeriesDecomposition"]


class RevIN(nn.Module):
    """Reversible instance normalisation (Kim et al., ICLR 2022): x (batch, L, M) normalised by its own mean and
    standard deviation over time per variate, then ``weight * x + bias`` per variate; ``denormalize`` inverts it."""

    def __init__(self, n_vars: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_vars)) if affine else None
        self.bias = nn.Parameter(torch.zeros(n_vars)) if affine else None

    def forward(self, x) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        mean = x.mean(dim=1, keepdim=True).detach()
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        x = (x - mean) / std
        if self.weight is not None:
            x = x * self.weight + self.bias
        return x, (mean, std)

    def denormalize(self, y, stats):
        mean, std = stats
        if self.weight is not None:
            y = (y - self.bias) / (self.weight + self.eps * self.eps)
        return y * std + mean


class TimeSeriesMixer(nn.Module):
    """TSM2 / TSQS forecaster: (batch, seq_len, n_vars) -> (batch, pred_len, n_vars).

    Args ([D] = a default of ours, docs/mambamixer.md; the paper gives none of these):
        seq_len: look-back L [P2: 512]. pred_len: horizon H [96; Table 10: 96, 192, 336, 720]. n_vars: M [7].
        patch_len [D: 16], stride [D: 8] (PatchTST); patch_pad: repeat the last value ``stride`` times before
            patching [True].
        embed_dim: D [D: 64]. depth [D: 2]. token_mixer: 's6' (TSM2, causal) | 'qs' (TSQS) | 's6_bi'.
        variate_mixer: the selective channel mixer along the variates [True]. variate_selection: 'history' |
            'pooled', what its Δ, B, C are read from (TimeVariateMixerBlock) [D: 'history'].
        dense_wavg: v1's weighted averaging of earlier features (v1 Sec. 3.2) [True, as v1's TSM2].
        d_state: N [16]. expand [2]. headdim ('qs') [D: 32]. gate_kernels: the time mixer's multi-resolution gate
            [D: (3, 5, 7)]. pos_embed: learnable patch position embedding [True].
        revin: RevIN on input and output [True]; revin_affine [True].
        drop_rate: dropout after the embedding and before the head [D: 0.1]; drop_path_rate [0].
        norm: 'layernorm' | 'rmsnorm'.
    """

    def __init__(self, seq_len: int = 512, pred_len: int = 96, n_vars: int = 7, patch_len: int = 16,
                 stride: int = 8, patch_pad: bool = True, embed_dim: int = 64, depth: int = 2,
                 token_mixer: str = "s6", variate_mixer: bool = True, variate_selection: str = "history",
                 dense_wavg: bool = True, d_state: int = 16,
                 expand: int = 2, headdim: int = 32, gate_kernels=(3, 5, 7), pos_embed: bool = True,
                 revin: bool = True, revin_affine: bool = True, drop_rate: float = 0.1, drop_path_rate: float = 0.0,
                 norm: str = "layernorm", device=None, dtype=None):
        super().__init__()
        for name, value in (("seq_len", seq_len), ("pred_len", pred_len), ("n_vars", n_vars),
                            ("patch_len", patch_len), ("stride", stride), ("embed_dim", embed_dim), ("depth", depth)):
            positive_int(name, value)
        padded = seq_len + (stride if patch_pad else 0)
        if patch_len > padded:
            raise ValueError(f"patch_len ({patch_len}) must be at most seq_len ({seq_len})"
                             + (f" + stride ({stride})" if patch_pad else ""))
        self.seq_len, self.pred_len, self.n_vars = seq_len, pred_len, n_vars
        self.patch_len, self.stride, self.patch_pad = patch_len, stride, bool(patch_pad)
        self.num_patches = (padded - patch_len) // stride + 1
        self.embed_dim = self.num_features = embed_dim
        self.head_hidden_size = self.num_patches * embed_dim
        self.token_mixer = token_mixer
        self.revin = RevIN(n_vars, affine=revin_affine) if revin else None
        self.patch_embed = nn.Linear(patch_len, embed_dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, 1, self.num_patches, embed_dim)) if pos_embed else None
        self.pos_drop = nn.Dropout(drop_rate)
        dpr = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()
        self.stack = MixerStack([
            TimeVariateMixerBlock(n_vars, self.num_patches, embed_dim, drop_path=dpr[i], norm=norm,
                                  token_mixer=token_mixer, variate_mixer=variate_mixer,
                                  variate_selection=variate_selection, d_state=d_state, expand=expand,
                                  headdim=headdim, gate_kernels=gate_kernels)
            for i in range(depth)], dense_wavg=dense_wavg)
        self.norm = make_mixer_norm(norm, embed_dim)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(self.head_hidden_size, pred_len)
        # timm's feature-extraction bookkeeping: one entry per block, features (batch, n_vars, P, D)
        self.feature_info = [dict(num_chs=embed_dim, reduction=stride, module=f"stack.blocks.{i}")
                             for i in range(depth)]
        if self.pos_embed is not None:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    # ---- timm model interface -------------------------------------------------------------------------------

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return no_weight_decay_names(self, params=("pos_embed", "revin.weight", "revin.bias"))

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(stem=r"^revin|^patch_embed|^pos_embed",
                    blocks=[(r"^stack\.blocks\.(\d+)", None), (r"^stack\.dense", (0,)), (r"^norm", (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.stack.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, pred_len: int, global_pool: Optional[str] = None) -> None:
        """A new (untrained) head for horizon ``pred_len`` (fine-tuning to another horizon)."""
        positive_int("pred_len", pred_len)
        self.pred_len = pred_len
        self.head = new_head(self.head.weight, self.head_hidden_size, pred_len)

    def _check_input(self, x):
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or tuple(x.shape[1:]) != (self.seq_len, self.n_vars):
            shape = shape_or_type(x)
            raise ValueError(f"x must have shape (batch, seq_len={self.seq_len}, n_vars={self.n_vars}), got {shape}")
        if not x.is_floating_point():
            raise ValueError(f"x must be a floating-point tensor, got {x.dtype}")

    def normalize(self, x):
        """x (batch, seq_len, n_vars) -> (RevIN-normalised x, statistics for ``denormalize``)."""
        self._check_input(x)
        if self.revin is None:
            return x, None
        return self.revin(x)

    def denormalize(self, y, stats):
        return y if self.revin is None else self.revin.denormalize(y, stats)

    def patchify(self, x):
        """(batch, seq_len, n_vars) -> (batch, n_vars, P, patch_len), each variate patched separately."""
        x = x.transpose(1, 2)
        if self.patch_pad:
            x = F.pad(x, (0, self.stride), mode="replicate")
        return x.unfold(-1, self.patch_len, self.stride)

    def forward_features(self, x):
        """Normalised input (batch, seq_len, n_vars) -> final-norm features (batch, n_vars, P, D)."""
        self._check_input(x)
        x = self.patch_embed(self.patchify(x))
        if self.pos_embed is not None:
            x = x + self.pos_embed
        x = self.stack(self.pos_drop(x))
        return self.norm(x)

    def forward_head(self, x, pre_logits: bool = False):
        """Features (batch, n_vars, P, D) -> the normalised forecast (batch, pred_len, n_vars); with
        ``pre_logits`` the flattened features (batch, n_vars, P·D)."""
        x = self.head_drop(x.flatten(2))
        return x if pre_logits else self.head(x).transpose(1, 2)

    def forward(self, x):
        x, stats = self.normalize(x)
        return self.denormalize(self.forward_head(self.forward_features(x)), stats)


class SeriesDecomposition(nn.Module):
    """DLinear's ``series_decomp`` (Zeng et al., AAAI 2023): trend = moving average of ``kernel_size`` steps with
    stride 1 over time, the series padded by repeating its first and last value (kernel_size - 1) // 2 times;
    seasonal = x - trend. x (batch, L, M) -> (seasonal, trend), both (batch, L, M)."""

    def __init__(self, kernel_size: int = 25):
        super().__init__()
        if not is_positive_int(kernel_size) or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd int, got {kernel_size!r}")
        self.kernel_size = kernel_size

    def forward(self, x):
        pad = (self.kernel_size - 1) // 2
        padded = F.pad(x.transpose(1, 2), (pad, pad), mode="replicate")  # (batch, M, L + 2 pad)
        trend = F.avg_pool1d(padded, self.kernel_size, stride=1).transpose(1, 2)
        return x - trend, trend


class DLinear(nn.Module):
    """DLinear (Zeng et al., "Are Transformers Effective for Time Series Forecasting?", AAAI 2023), the linear
    control of the forecasting recipe: x (batch, L, M) -> SeriesDecomposition (moving average, kernel 25) ->
    Linear(L -> H) on the seasonal part + Linear(L -> H) on the trend, summed; both maps shared by the variates
    (the authors' default ``individual=False``); no normalisation (the authors' DLinear has none), PyTorch's
    default Linear initialisation (as their code). ``individual=True``: one pair of maps per variate."""

    def __init__(self, seq_len: int = 512, pred_len: int = 96, n_vars: int = 7, kernel_size: int = 25,
                 individual: bool = False):
        super().__init__()
        for name, value in (("seq_len", seq_len), ("pred_len", pred_len), ("n_vars", n_vars)):
            positive_int(name, value)
        self.seq_len, self.pred_len, self.n_vars, self.individual = seq_len, pred_len, n_vars, bool(individual)
        self.decomposition = SeriesDecomposition(kernel_size)
        copies = n_vars if individual else 1
        self.linear_seasonal = nn.ModuleList(nn.Linear(seq_len, pred_len) for _ in range(copies))
        self.linear_trend = nn.ModuleList(nn.Linear(seq_len, pred_len) for _ in range(copies))

    def forward(self, x):
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or tuple(x.shape[1:]) != (self.seq_len, self.n_vars):
            shape = shape_or_type(x)
            raise ValueError(f"x must have shape (batch, seq_len={self.seq_len}, n_vars={self.n_vars}), got {shape}")
        seasonal, trend = (part.transpose(1, 2) for part in self.decomposition(x))  # (batch, M, L)
        if self.individual:
            out = torch.stack([s(seasonal[:, i]) + t(trend[:, i]) for i, (s, t) in
                               enumerate(zip(self.linear_seasonal, self.linear_trend))], dim=1)
        else:
            out = self.linear_seasonal[0](seasonal) + self.linear_trend[0](trend)
        return out.transpose(1, 2)  # (batch, H, M)


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: TimeSeriesMixer) -> Dict[str, torch.Tensor]:
    """Unwrap training checkpoints ({'state_dict': ...} / {'model': ...}); keys are ours unchanged."""
    return state_dict.get("state_dict", state_dict.get("model", state_dict))


def _create(variant: str, pretrained: bool = False, **kwargs) -> TimeSeriesMixer:
    if kwargs.get("features_only"):
        raise ValueError(f"{variant} is a forecaster: features_only is not supported (use forward_features)")
    return build_model_with_cfg(TimeSeriesMixer, variant, pretrained, pretrained_filter_fn=checkpoint_filter_fn,
                                **kwargs)


def _cfg(**kwargs) -> Dict[str, Any]:
    # not an image classifier: no input_size / num_classes / classifier for timm to adapt
    return local_weights_cfg(input_size=None, num_classes=None, classifier=None, mean=None, std=None,
                             crop_pct=None, interpolation=None, paper_name=_PAPER, **kwargs)


_PAPER = "MambaMixer: Efficient Selective State Space Models with Dual Token and Channel Selection (v2), Table 10"
default_cfgs = generate_default_cfgs({"tsm2": _cfg(), "tsqs": _cfg()})


@register_model
def tsm2(pretrained: bool = False, **kwargs) -> TimeSeriesMixer:
    """TSM2 (Table 10): MambaMixer blocks (causal S6 time mixer, QS variate mixer) with dense weighted averaging."""
    return _create("tsm2", pretrained, **dict(dict(token_mixer="s6", dense_wavg=True), **kwargs))


@register_model
def tsqs(pretrained: bool = False, **kwargs) -> TimeSeriesMixer:
    """TSQS (Table 10): QSMixer blocks (QS time mixer, QS variate mixer) with dense weighted averaging."""
    return _create("tsqs", pretrained, **dict(dict(token_mixer="qs", dense_wavg=True), **kwargs))
