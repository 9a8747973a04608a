"""ViM2 / ViQS (MambaMixer v2, arXiv:2403.19888: paper Sec. 3, App. E, App. G) as timm models; our choices where
the paper is silent, and the tags [D] / [P2]: docs/mambamixer.md ('Vision backbone' and the sections after it).

Isotropic patch-16 backbone with a class token (inserted in the middle of every scanned sequence), Switch of
Scans (one router per network on local summary tokens, top-1 scan run bidirectionally), MambaMixer (ViM2: f+b S6
token mixer) or QSMixer (ViQS: QS token mixer) blocks with the QS channel mixer, and the multi-resolution conv
branch (SPM stem, Eq. 11 MRFP, ViT-CoMer-style interactions with Linear instead of attention, Eq. 44).

Variant sizes [D] (the paper gives no width or depth; docs/mambamixer.md, 'Variant sizes') are fitted to
Table 15's parameters AND FLOPs (``benchmarks/models_vim2.py`` prints the comparison). FLOPs convention: the
paper's "FLOPs" are multiply-adds (timm deit_small / swin_tiny / resnet50 measure 4.24 / 4.49 / 4.09 GMACs with
FlopCounterMode against the table's 4.6 / 4.5 / 4.1), counted here with the scans (selective_scan / qs_mix
registered FLOPs / 2).
  * Nearly every weight acts on all 197 tokens (~197 MACs per parameter; the S6 scans add ~15%), so each
    variant's params/MACs ratio is almost fixed by the design; the ViT-CoMer conv branch costs ~1000 MACs per
    parameter (1029 conv tokens, 112² stem). At ViT-CoMer's sizes (SPM 64, MRFP 0.5 D, 4 interactions) it
    alone is 1.5 of ViM2-T's 2.1 GMACs, so all variants use our FLOP-cutting options (docs/mambamixer.md,
    'Variant sizes'): SPM stem width 16, MRFP hidden 0.25 D, 2 interactions (the fewest that keep Eq. 44's
    tokens->conv fusion in a classifier). N = 16, expand 2 (Mamba) everywhere.
  * (D, depth) per variant: searched over D (multiples of 32) and even depths for params within 10% and FLOPs
    within 15% of the paper (ViM2-S / ViQS-S share D 320). S, B and L land inside. The Tiny rows cannot: ViM2-T
    has 3.1M (31%) more parameters than ViQS-T for 0.2 GFLOPs (10%) more, although the two differ only in the
    token mixer's selection parameters, and 13.2M / 2.1G is 159 MACs per parameter, below what any per-token
    weight costs. For T the parameters are matched (DeiT/Vim's Tiny width 192, depth from the params) and the
    FLOPs exceed the paper's (ViM2-T +39%, ViQS-T +20%).
  * Without the scans (an fvcore count with no handle for custom ops, which papers in this family often use,
    docs/mambamixer.md 'Variant sizes') every variant, Tiny included, is within 15% (ViM2-T +15%, ViQS-T +5%).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Set, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_function, register_notrace_module
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from .. import ops
from ..layers._common import choice, drop_path, make_mixer_norm
from ..layers.lti import LTI_KINDS
from ..layers.mambamixer import (ForwardBackwardChannelMixer, SelectiveChannelMixer, SelectiveTokenMixer,
                                resample_token_axis)
from ..layers.multires_conv import ConvTokenInteraction, MultiResolutionConvGate, SpatialPriorModule
from ..layers.switch_of_scans import SwitchOfScans
from ._common import check_image, local_weights_cfg, new_head, no_weight_decay_names

__all__ = ["VisionMambaMixer", "VisionTokenMixer", "VisionMixerBlock"]


# ---- torch.fx: the shape-dependent steps run as opaque calls (timm's notrace registry), the rest is traced ------
# (public names: torch.fx autowraps no function whose name starts with '_')
# (timm's FX feature extraction and test suite pass these to the tracer: ``timm.models.get_notrace_modules()`` /
# ``get_notrace_functions()``; with torchvision's create_feature_extractor pass them as ``tracer_kwargs``)
for _leaf in (SwitchOfScans, SpatialPriorModule, MultiResolutionConvGate):
    register_notrace_module(_leaf)


@torch.fx.wrap
@register_notrace_function
def check_img(img, in_chans: int):
    check_image(img, in_chans, "img")
    if img.shape[-2] % 32 or img.shape[-1] % 32 or min(img.shape[-2:]) < 32:
        raise ValueError(f"img height and width must be positive multiples of 32, got {tuple(img.shape[-2:])}")
    if not img.is_floating_point():
        raise ValueError(f"img must be a floating-point image batch (normalised by the data pipeline), got {img.dtype}")
    return img


@torch.fx.wrap
@register_notrace_function
def grid_of(t) -> Tuple[int, int]:
    return tuple(t.shape[-2:])


@torch.fx.wrap
@register_notrace_function
def resize_pos_embed_to(pos_embed, grid, base_grid):
    """(1, 1 + h0*w0, D) position embedding at the patch grid ``grid`` (bicubic when it differs from h0 x w0)."""
    if tuple(grid) == tuple(base_grid):
        return pos_embed
    maps = pos_embed[:, 1:].reshape(1, *base_grid, -1).permute(0, 3, 1, 2)
    maps = F.interpolate(maps, size=tuple(grid), mode="bicubic", align_corners=False)
    return torch.cat([pos_embed[:, :1], maps.flatten(2).transpose(1, 2)], dim=1)


@torch.fx.wrap
@register_notrace_function
def scan_index_of(sos, scan_ids, grid):
    return sos.scan_index(scan_ids, grid)


@torch.fx.wrap
@register_notrace_function
def interact_to_tokens(interaction, x, F_conv, sizes):
    return torch.cat([x[:, :1], interaction.to_tokens(x[:, 1:], F_conv, sizes)], dim=1)


@torch.fx.wrap
@register_notrace_function
def interact_to_conv(interaction, F_conv, x, sizes):
    return interaction.to_conv(F_conv, x[:, 1:], sizes)


@torch.fx.wrap
@register_notrace_function
def tokens_to_grid(tokens, grid):
    """(B, 1 + h*w, D) tokens, class token first -> the patch tokens as a (B, D, h, w) grid."""
    return tokens[:, 1:].transpose(1, 2).reshape(tokens.shape[0], -1, *grid)


@torch.fx.wrap
@register_notrace_function
def levels_to_grids(F_tokens, sizes):
    return [t.transpose(1, 2).reshape(F_tokens.shape[0], -1, h, w)
            for t, (h, w) in zip(F_tokens.split([h * w for h, w in sizes], dim=1), sizes)]


@torch.fx.wrap
@register_notrace_function
def resize_like(t, like):
    return F.interpolate(t, size=like.shape[-2:], mode="bilinear", align_corners=False)


class _LastForward(dict):
    """The last forward's routing statistics. Not copied by deepcopy (timm copies models to prune them, and
    router_aux_loss is a non-leaf tensor that deepcopy refuses)."""

    def __deepcopy__(self, memo):
        return _LastForward()


def _pyramid_levels(indices):
    if indices is None:
        return [0, 1, 2, 3]
    if isinstance(indices, int):
        return list(range(4 - indices, 4))
    return sorted({i % 4 for i in indices})



def scan_sequences(orders, inverses):
    """Patch scan orders and inverses (batch, n, h*w) -> (perms, invs) (batch, n, 1 + h*w) over the tokens with the
    class token first: ``tokens[b, perms[b, j]]`` is scan j's sequence with the class token in its middle [D: ViM's],
    ``scanned[b, invs[b, j]]`` puts a scanned sequence back in token order."""
    middle = orders.shape[-1] // 2
    cls = orders.new_zeros(orders.shape[:-1] + (1,))
    perms = torch.cat([orders[..., :middle] + 1, cls, orders[..., middle:] + 1], dim=-1)
    # the class token sits at `middle`; patches scanned after it move one place on
    invs = torch.cat([cls + middle, inverses + (inverses >= middle).to(inverses.dtype)], dim=-1)
    return perms, invs


def _take_tokens(x, index):
    """x (batch, L, C) contiguous, index (batch, L) -> x[b, index[b]]: one row copy per token (index_select on the
    flattened rows; a gather over (batch, L, C) is several times slower on the CPU)."""
    batch, length, channels = x.shape
    rows = index + torch.arange(batch, device=index.device)[:, None] * length
    return x.reshape(batch * length, channels).index_select(0, rows.reshape(-1)).view(batch, length, channels)


def _no_grad() -> bool:
    """Inference (no_grad / inference_mode): element-wise steps may overwrite their inputs, as autograd keeps none."""
    return not torch.is_grad_enabled()


class VisionTokenMixer(SelectiveTokenMixer):
    """Token mixer of ViM2 ('s6_bi') / ViQS ('qs') on (batch, 1 + h*w, dim) tokens (class token first); 's4' /
    'hippo': Table 3's LTI token mixers in the same block.

    Main branch: x̄ = SiLU(DWConv2d_3x3(W_in u)) on the h x w grid [D] (the class token bypasses the conv);
    gate: SiLU(W_z u) [D]; selection from u (App. F.4). For each selected scan the patches are permuted, the class
    token is inserted in the middle [D], the bidirectional mixer runs, and the result is scattered back;
    the n scans' outputs are combined by SwitchOfScans.combine. The [D] choices: docs/mambamixer.md, 'Vision backbone'.

    Every per-token step (gate, selection, W_out) commutes with the scan order, so they run on the scanned tokens
    and only u (dim wide) and x̄ are permuted, and W_out's output is put back in token order. The projections of
    the same input share one matmul (their weights concatenated per call; the state_dict keeps the Linear layers).
    Every tensor stays token-major (batch, L, channels): the matmuls run on all tokens at once, the depthwise conv
    channels-last, the permutations copy whole rows, and both selective_scan directions (the second with
    reverse=True) read x̄ and write their output through (batch, E, L) transposed views; qs_mix reads that layout.
    """

    def __init__(self, dim: int, token_mixer: str = "s6_bi", **kwargs):
        choice("token_mixer", token_mixer, ("s6_bi", "qs") + LTI_KINDS)
        super().__init__(dim, token_mixer=token_mixer, causal=False, gate_kernels=(1,), **kwargs)

    def _build_branches(self, d_conv, gate_kernels):
        """A 3x3 depthwise conv on the grid and a linear gate, in place of the 1-D mixer's convolutions."""
        self.conv2d = nn.Conv2d(self.inner, self.inner, 3, padding=1, groups=self.inner, bias=True)
        self.gate_proj = nn.Linear(self.dim, self.inner, bias=False)

    def forward(self, u, grid_size, sos, orders, inverses, gates):
        u = u.contiguous()
        perms, invs = scan_sequences(orders, inverses)
        mix = {"qs": self._mix_qs, "s6_bi": self._mix_s6_bi}.get(self.token_mixer, self._mix_lti)
        xbar = self._xbar(u, grid_size)
        outputs = [_take_tokens(mix(u, xbar, perms[:, j]), invs[:, j]) for j in range(perms.shape[1])]
        return sos.combine(u, outputs, gates)

    def _scanned_projections(self, u_scan):
        """gate_proj and both directions' x_proj of the scanned u in one matmul: (batch, L, E + 2S)."""
        return F.linear(u_scan, torch.cat([self.gate_proj.weight, self.fwd.x_proj.weight, self.bwd.x_proj.weight]))

    def _xbar(self, u, grid_size):
        """x̄ token-major (batch, 1 + h*w, E), class token first; the conv runs channels-last on W_in u's rows
        (oneDNN's depthwise 3x3 is ~20x faster on NHWC than on NCHW at one thread)."""
        height, width = grid_size
        xin = self.in_proj(u)
        patches = xin[:, 1:].unflatten(1, (height, width)).permute(0, 3, 1, 2)
        patches = self.conv2d(patches.contiguous(memory_format=torch.channels_last))
        return F.silu(torch.cat([xin[:, :1], patches.permute(0, 2, 3, 1).flatten(1, 2)], dim=1), inplace=_no_grad())

    # ---- 's6_bi' (ViM2) ----------------------------------------------------------------------------------------

    def _mix_s6_bi(self, u, xbar, perm):
        """Forward + backward S6 along the scan ``perm`` (batch, L); returns W_out's output (batch, L, dim) in
        scan order."""
        proj = self._scanned_projections(_take_tokens(u, perm))
        # one split, not slices: its backward is one cat, where each slice's is a zero-filled full-size gradient
        sizes = [self.fwd.dt_rank, self.d_state, self.d_state]
        gate, *sel = proj.split([self.inner] + sizes + sizes, dim=-1)
        gate = F.silu(gate, inplace=_no_grad())
        x_scan = _take_tokens(xbar, perm).transpose(1, 2)  # x̄ in the scan order, read by both directions

        # transpose(-1, -2), not .mT: torch.onnx's TorchScript exporter has no aten::mT
        def scan(direction, dt_low, B, C, D, reverse):  # Δ low rank: dt_proj applied per row inside the scan
            return ops.selective_scan(x_scan, dt_low.transpose(-1, -2), -torch.exp(direction.A_log),
                                      B.transpose(-1, -2), C.transpose(-1, -2), D,
                                      delta_bias=direction.dt_bias, delta_softplus=True,
                                      delta_proj=direction.dt_proj.weight, reverse=reverse)

        # the scans' outputs have x_scan's layout: y^T below is token-major (batch, L, E), no copy
        y = scan(self.fwd, *sel[:3], self.D, False).transpose(-1, -2)
        y_rev = scan(self.bwd, *sel[3:], None, True).transpose(-1, -2)
        if _no_grad():  # in place: every (batch, L, E) temporary is memory the allocator may have to fault in again
            y = y.add_(y_rev).mul_(gate)
        else:
            y = (y + y_rev) * gate
        return self.out_proj(y)

    # ---- 'qs' (ViQS) -------------------------------------------------------------------------------------------

    def _mix_qs(self, u, xbar, perm):
        """Scalar-A QS mixing along the scan ``perm``; W_out's output (batch, L, dim) in scan order."""
        batch, length, _ = u.shape
        heads, n_state = self.fwd.heads, self.d_state
        proj = self._scanned_projections(_take_tokens(u, perm))
        gate, dt, B, C, dt_r, B_r, C_r = proj.split([self.inner] + [heads, n_state, n_state] * 2, dim=-1)
        x_scan = _take_tokens(xbar, perm)
        gamma = self.gamma_bias + self.gamma_proj(x_scan)
        y = ops.qs_mix(x_scan.view(batch, length, heads, self.headdim), dt, -torch.exp(self.fwd.A_log), B, C,
                       dt_r, -torch.exp(self.bwd.A_log), B_r, C_r, gamma, dt_bias=self.fwd.dt_bias,
                       dt_bias_rev=self.bwd.dt_bias, dt_softplus=True, qs_shift=self.qs_shift)
        return self.out_proj(y.view(batch, length, self.inner) * F.silu(gate))

    # ---- 's4' / 'hippo' (Table 3's token mixers) ----------------------------------------------------------------

    def _mix_lti(self, u, xbar, perm):
        """The bidirectional LTI SSM (S4D or HiPPO, no selection) along the scan ``perm``; W_out's output in scan
        order."""
        gate = F.silu(self.gate_proj(_take_tokens(u, perm)))
        x_scan = _take_tokens(xbar, perm)
        return self.out_proj((self.lti(x_scan) + x_scan * self.D) * gate)


@register_notrace_module  # per-sample scan orders, loops over the selected scans
class VisionMixerBlock(nn.Module):
    """Pre-norm residual VisionTokenMixer then channel mixer (paper Sec. 2.1/2.2), DropPath on both branches.
    Channel mixer: 'qs' (the paper's), 'fb' (naive forward + backward S6 blocks, Table 4 "w/ f+b"), 'mlp'
    (Table 3) or 'none'."""

    def __init__(self, dim: int, token_grid: Tuple[int, int], token_mixer: str, d_state: int, expand: int,
                 headdim: int, drop_path: float, norm: str, channel_mixer: bool, channel_qs_param: str):
        super().__init__()
        self.drop_path_prob = float(drop_path)
        self.norm1 = make_mixer_norm(norm, dim)
        self.token_mixer = VisionTokenMixer(dim, token_mixer=token_mixer, d_state=d_state, expand=expand,
                                            headdim=headdim)
        self.channel_kind = {True: "qs", False: "none"}.get(channel_mixer, channel_mixer)
        if self.channel_kind not in ("qs", "fb", "mlp", "none"):
            raise ValueError(f"channel_mixer must be True/'qs', 'fb', 'mlp' or False/'none', got {channel_mixer!r}")
        self.norm2 = make_mixer_norm(norm, dim) if self.channel_kind != "none" else None
        if self.channel_kind == "qs":
            self.channel_mixer = SelectiveChannelMixer(dim, 1 + token_grid[0] * token_grid[1], d_state=d_state,
                                                       channel_qs_param=channel_qs_param, token_grid=token_grid,
                                                       num_prefix_tokens=1)
        elif self.channel_kind == "fb":
            self.channel_mixer = ForwardBackwardChannelMixer(dim, 1 + token_grid[0] * token_grid[1], d_state=d_state,
                                                             token_grid=token_grid, num_prefix_tokens=1)
        elif self.channel_kind == "mlp":  # Table 3 "ViM2 (MLP channel mixer)": ratio 4, GELU [D]
            self.channel_mixer = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        else:
            self.channel_mixer = None

    @property
    def no_weight_decay_names(self):
        names = [f"token_mixer.{n}" for n in self.token_mixer.no_weight_decay_names]
        if self.channel_kind in ("qs", "fb"):
            names += [f"channel_mixer.{n}" for n in self.channel_mixer.no_weight_decay_names]
        return tuple(names)

    def forward(self, x, grid_size, sos, orders, inverses, gates):
        y = self.token_mixer(self.norm1(x), grid_size, sos, orders, inverses, gates)
        x = x + drop_path(y, self.drop_path_prob, self.training)
        if self.channel_kind in ("qs", "fb"):
            x = x + drop_path(self.channel_mixer(self.norm2(x), grid_size), self.drop_path_prob, self.training)
        elif self.channel_kind == "mlp":
            x = x + drop_path(self.channel_mixer(self.norm2(x)), self.drop_path_prob, self.training)
        return x


class VisionMambaMixer(nn.Module):
    """ViM2 (token_mixer='s6_bi') / ViQS (token_mixer='qs'), paper Sec. 3, Fig. 2, App. E.

    Args ([D] = a default of ours, docs/mambamixer.md, exposed here with its default):
        img_size [224], patch_size [16], in_chans [3], num_classes [1000], embed_dim, depth,
        token_mixer: 's6_bi' (ViM2), 'qs' (ViQS), or Table 3's input-independent 's4' (S4D-Lin) / 'hippo'
            (HiPPO-LegS) bidirectional SSMs in ViM2's block (layers/lti.py); d_state [16]; expand [2]; headdim [64];
        drop_path_rate: linear stochastic-depth schedule; norm: 'layernorm' | 'rmsnorm' [D: layernorm],
        channel_mixer: True/'qs', 'fb' (naive forward + backward S6 blocks, '*_fb', Table 4 "w/ f+b"), 'mlp'
            ('*_mlp', Table 3) or False/'none' ('*_noqs') [True]; channel_qs_param [D: 'scalar'],
        scan_mode: 'sos' or 'fixed' (the four cross-scans C1-C4 summed, "w/o SoS") [D: 'sos'],
        fixed_scans: a fixed scan set instead of the router (implies scan_mode='fixed'): a SCAN_SETS name of
            Table 12 ('cross1', 'cross2', 'cross4', 'zigzag1', 'zigzag2', 'zigzag4', 'local', 'local_global') or
            a sequence of scan names ('C1', 'Z5', ...) / ids; their outputs are summed [None: 'cross4' when
            scan_mode='fixed'],
        sos_top_n [P2: 1], sos_num_windows [D: 4], lst_concat [D: True], sos_gate [D: 'st'],
        cross_scan_attn: softmax attention over the n ≥ 2 routed scans' outputs; False sums them ('*_noattn',
            Table 4 "w/o Attn"; with the top-1 routing of the registered models it changes nothing) [D: True],
        conv_branch [True; False = '*_noconv'], n_interactions [D: 2, see
        _VARIANTS], conv_kernels [D: (3, 5), App. I.2], spm_inplanes [D: 16], mrfp_ratio: MRFP hidden width / D
        [D: 0.25], global_pool: 'token' | 'avg' [D: 'token'],
        dense_outputs: build the dense pyramid (docs/mambamixer.md 'Dense outputs'; ConvT 2x2 + 4 BatchNorms; set
            automatically by features_only when there is a conv branch): ``forward_intermediates`` /
            ``feature_info`` are then its 4 levels (strides 4-32); without it they are the blocks' patch-token
            grids (stride 16, as timm's ViTs) [False, so classification parameter counts exclude the pyramid],
        sos_importance_weight: weight of the router's importance loss, stored as ``router_aux_loss`` after each
            forward for the training loop to add [D: 0]. ``last_router_probs`` / ``last_scan_ids`` hold the
            last routing (usage histogram logging).
    Input H and W must be multiples of 32 (patch grid and the 1/16 conv level must coincide).
    """

    def __init__(self, img_size=224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 192, depth: int = 24, token_mixer: str = "s6_bi", d_state: int = 16,
                 expand: int = 2, headdim: int = 64, drop_rate: float = 0.0, drop_path_rate: float = 0.1,
                 norm: str = "layernorm", channel_mixer: bool = True, channel_qs_param: str = "scalar",
                 scan_mode: str = "sos", fixed_scans=None, sos_top_n: int = 1, sos_num_windows: int = 4,
                 lst_concat: bool = True,
                 sos_gate: str = "st", cross_scan_attn: bool = True, conv_branch: bool = True,
                 n_interactions: int = 2, conv_kernels=(3, 5), spm_inplanes: int = 16, mrfp_ratio: float = 0.25,
                 global_pool: str = "token",
                 dense_outputs: bool = False, sos_importance_weight: float = 0.0, device=None, dtype=None):
        super().__init__()
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        if patch_size != 16:
            raise ValueError(f"patch_size must be 16 (the conv branch's 1/16 level is the patch grid), got {patch_size}")
        if img_size[0] % 32 or img_size[1] % 32:
            raise ValueError(f"img_size must be a multiple of 32, got {img_size}")
        if scan_mode not in ("sos", "fixed"):
            raise ValueError(f"scan_mode must be 'sos' or 'fixed', got {scan_mode!r}")
        if fixed_scans is not None:
            scan_mode = "fixed"
        elif scan_mode == "fixed":
            fixed_scans = "cross4"
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg', got {global_pool!r}")
        if conv_branch and (n_interactions < 1 or depth % n_interactions):
            raise ValueError(f"n_interactions ({n_interactions}) must be positive and divide depth ({depth})")
        self.num_classes, self.global_pool = num_classes, global_pool
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.in_chans, self.patch_size, self.scan_mode = in_chans, patch_size, scan_mode
        self.grad_checkpointing = False
        self.sos_importance_weight = float(sos_importance_weight)
        self._last_forward = _LastForward()
        grid = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.grid_size = grid
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(in_chans, embed_dim, patch_size, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + grid[0] * grid[1], embed_dim))
        # "w/o SoS" (Table 4 = Cross-Scan (4) of Table 12): the four cross-scans C1-C4, plain sum, no router;
        # Table 12's other fixed sets through fixed_scans
        self.sos = SwitchOfScans(embed_dim, num_windows=sos_num_windows, top_n=sos_top_n, lst_concat=lst_concat,
                                 sos_gate=sos_gate, cross_scan_attn=cross_scan_attn, fixed_scans=fixed_scans)
        self.fixed_scans = self.sos.fixed_scans  # scan ids, None when routed
        dpr = torch.linspace(0, drop_path_rate, depth, device='cpu').tolist()
        self.blocks = nn.ModuleList(
            VisionMixerBlock(embed_dim, grid, token_mixer, d_state, expand, headdim, dpr[i], norm, channel_mixer,
                             channel_qs_param) for i in range(depth))
        self.conv_branch = conv_branch
        # blocks i*per_interaction ... (i+1)*per_interaction - 1 follow interaction i (fixed when blocks are pruned)
        self.blocks_per_interaction = depth // n_interactions if conv_branch else depth
        if conv_branch:
            self.n_interactions = n_interactions
            # c1 and the last tokens->conv update feed only the dense pyramid: without it they are not built, so
            # every parameter of a classifier gets a gradient (DistributedDataParallel requires it)
            self.spm = SpatialPriorModule(embed_dim, inplanes=spm_inplanes, in_chans=in_chans, with_c1=dense_outputs)
            self.mrfp = nn.ModuleList(MultiResolutionConvGate(embed_dim, conv_kernels, hidden_ratio=mrfp_ratio)
                                      for _ in range(n_interactions))
            self.interactions = nn.ModuleList(
                ConvTokenInteraction(embed_dim, with_to_conv=dense_outputs or i < n_interactions - 1)
                for i in range(n_interactions))
        if dense_outputs and not conv_branch:
            raise ValueError("dense_outputs needs conv_branch=True (the 1/4, 1/8 and 1/32 levels come from it)")
        self.dense_outputs = dense_outputs
        if dense_outputs:
            self.pyramid_up = nn.ConvTranspose2d(embed_dim, embed_dim, 2, 2)
            self.pyramid_norms = nn.ModuleList(nn.BatchNorm2d(embed_dim) for _ in range(4))
        if dense_outputs:
            self.feature_info = [dict(num_chs=embed_dim, reduction=r, module=f"pyramid_norms.{i}")
                                 for i, r in enumerate((4, 8, 16, 32))]
        else:
            self.feature_info = [dict(num_chs=embed_dim, reduction=patch_size, module=f"blocks.{i}")
                                 for i in range(depth)]
        self.norm = make_mixer_norm(norm, embed_dim)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self._init_weights()
        if device is not None or dtype is not None:  # timm's device/dtype arguments (built on CPU, then moved)
            self.to(device=device, dtype=dtype)

    # routing statistics of the last forward (usage histogram, auxiliary loss); None before the first forward
    last_router_probs = property(lambda self: self._last_forward.get("last_router_probs"))
    last_scan_ids = property(lambda self: self._last_forward.get("last_scan_ids"))
    router_aux_loss = property(lambda self: self._last_forward.get("router_aux_loss"))

    def _init_weights(self):
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        if isinstance(self.head, nn.Linear):
            nn.init.trunc_normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return no_weight_decay_names(self, params=("pos_embed", "cls_token"))

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False):
        """Depth order of the parameters for timm's layer-wise lr decay (``layer_decay``): the stem (patch
        embedding, tokens, Switch of Scans, conv stem), then the blocks, each interaction group's conv gate and
        token-conv interaction just before its first block; final norm, pyramid and head last. ``coarse``: one
        group per interaction group of blocks."""
        per_group = self.blocks_per_interaction

        def ordinal(name: str):
            top, _, rest = name.partition(".")
            if top in ("cls_token", "pos_embed", "patch_embed", "sos", "spm"):
                return (0,)
            if top in ("interactions", "mrfp"):  # feeds blocks i*per_group ... (i+1)*per_group - 1
                first = int(rest.split(".")[0]) * per_group
                return (1 + first // per_group,) if coarse else (1 + first, 0)
            if top == "blocks":
                index = int(rest.split(".")[0])
                return (1 + index // per_group,) if coarse else (1 + index, 1)
            return (float("inf"),)  # norm, pyramid, head

        return ordinal

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool=None):
        """A new head (on the model's device and dtype, in its train/eval mode); ``global_pool`` 'token' | 'avg'."""
        if global_pool is not None:
            if global_pool not in ("token", "avg"):
                raise ValueError(f"global_pool must be 'token' or 'avg', got {global_pool!r}")
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = new_head(self.cls_token, self.embed_dim, num_classes, training=self.training)

    def forward_features(self, img):
        return self.norm(self._forward_tokens(img)[0])

    def _forward_tokens(self, img, take_indices=(), stop: Optional[int] = None):
        """(tokens before the final norm, c1, conv-level tokens, level sizes, patch grid, taps): ``taps`` are the
        tokens after the blocks in ``take_indices``; ``stop``: run the first ``stop`` blocks only."""
        img = check_img(img, self.in_chans)
        stop = len(self.blocks) if stop is None else stop
        e = self.patch_embed.proj(img)
        grid = grid_of(e)
        pos = resize_pos_embed_to(self.pos_embed, grid, self.grid_size)
        e = e.flatten(2).transpose(1, 2) + pos[:, 1:]
        e, scan_ids, gates, probs = self.sos(e, grid)  # scan_mode 'fixed': C1-C4 for every image, probs None
        if not (is_fx_symbolic_tracing() or torch.compiler.is_exporting()):  # graphs hold no side effects
            self._last_forward = _LastForward(
                last_router_probs=None if probs is None else probs.detach(), last_scan_ids=scan_ids.detach(),
                router_aux_loss=(e.new_zeros(()) if probs is None
                                 else self.sos_importance_weight * self.sos.importance_loss(probs)))
        orders, inverses = scan_index_of(self.sos, scan_ids, grid)
        x = torch.cat([(self.cls_token + pos[:, :1]).expand(e.shape[0], -1, -1), e], dim=1)
        taps = []

        def run(first, last, x):
            for i in range(first, min(last, stop)):
                x = self._run_block(self.blocks[i], x, grid, orders, inverses, gates)
                if i in take_indices:
                    taps.append(x)
            return x

        if not self.conv_branch:
            return run(0, stop, x), None, None, None, grid, taps
        c1, F_tokens, sizes = self.spm(img)
        per_group = self.blocks_per_interaction
        for i, interaction in enumerate(self.interactions):
            if i * per_group >= stop:
                break
            F_conv = self.mrfp[i](F_tokens, sizes)
            x = interact_to_tokens(interaction, x, F_conv, sizes)
            x = run(i * per_group, (i + 1) * per_group, x)
            if interaction.with_to_conv and (self.dense_outputs or (i + 1) * per_group < stop):
                F_tokens = interact_to_conv(interaction, F_conv, x, sizes)
        return x, c1, F_tokens, sizes, grid, taps

    def _run_block(self, block, x, grid, orders, inverses, gates):
        if self.grad_checkpointing and not torch.jit.is_scripting():
            return checkpoint(block, x, grid, self.sos, orders, inverses, gates)
        return block(x, grid, self.sos, orders, inverses, gates)

    def forward_intermediates(self, x, indices=None, norm: bool = False, stop_early: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """timm's intermediate features. Built with ``dense_outputs`` (features_only): the dense pyramid
        (ViT-CoMer) f1 = BN(ConvT(F1) + c1 + up4 x) at 1/4, f2 = BN(F1 + up2 x), f3 = BN(F2 + x),
        f4 = BN(F3 + maxpool2 x) [D down-sampling], x = final patch tokens as a grid; ``indices`` are levels 0..3
        (``norm`` / ``stop_early`` accepted for the interface: the levels are always BatchNorm-ed and the whole
        depth runs). Otherwise (a classifier): the patch tokens after the blocks ``indices`` as (B, D, H/16, W/16)
        grids ('NCHW') or (B, H/16 * W/16, D) ('NLC'), through the final norm when ``norm``, as timm's ViTs."""
        if not self.dense_outputs:
            return self._block_intermediates(x, indices, norm, stop_early, output_fmt, intermediates_only)
        if output_fmt != "NCHW":
            raise ValueError(f"output_fmt must be 'NCHW', got {output_fmt!r}")
        indices = _pyramid_levels(indices)
        tokens, c1, F_tokens, sizes, grid, _ = self._forward_tokens(x)
        x_grid = tokens_to_grid(tokens, grid)
        levels = levels_to_grids(F_tokens, sizes)
        level = {0: lambda: self.pyramid_up(levels[0]) + c1 + resize_like(x_grid, c1),
                 1: lambda: levels[0] + resize_like(x_grid, levels[0]), 2: lambda: levels[1] + x_grid,
                 3: lambda: levels[2] + F.max_pool2d(x_grid, 2)}
        intermediates = [self.pyramid_norms[i](level[i]()) for i in indices]  # only the levels asked for
        if intermediates_only:
            return intermediates
        return self.norm(tokens), intermediates

    def _block_intermediates(self, x, indices, norm, stop_early, output_fmt, intermediates_only):
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        stop = max_index + 1 if stop_early and not torch.jit.is_scripting() else None
        tokens, _, _, _, grid, taps = self._forward_tokens(x, take_indices, stop)
        taps = [self.norm(t) if norm else t for t in taps]
        intermediates = [tokens_to_grid(t, grid) if output_fmt == "NCHW" else t[:, 1:] for t in taps]
        if intermediates_only:
            return intermediates
        return self.norm(tokens), intermediates

    def prune_intermediate_layers(self, indices=None, prune_norm: bool = False, prune_head: bool = True):
        """Drop what ``forward_intermediates(indices)`` does not use (timm's features_only calls this), so every
        remaining parameter gets a gradient (DistributedDataParallel). With the pyramid: the 1/4 level's ConvT,
        c1 projection and BatchNorm unless level 0 is kept and the other levels' BatchNorms. A classifier: the
        blocks after the last index, with the conv-branch interactions and gates that only fed them. Both: the
        head (``prune_head``) and the final norm (``prune_norm``)."""
        if self.dense_outputs:
            indices = _pyramid_levels(indices)
            for i in range(4):
                if i not in indices:
                    self.pyramid_norms[i] = nn.Identity()
            if 0 not in indices:
                self.pyramid_up = self.spm.proj_c1 = None
        else:
            indices, max_index = feature_take_indices(len(self.blocks), indices)
            self.blocks = self.blocks[:max_index + 1]
            if self.conv_branch:
                groups = max_index // self.blocks_per_interaction + 1
                self.mrfp, self.interactions = self.mrfp[:groups], self.interactions[:groups]
                last = self.interactions[-1]
                if last.with_to_conv:  # its tokens->conv update fed only the pruned groups
                    last.with_to_conv = False
                    del last.norm_c, last.proj_c
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0)
        return indices

    def forward_head(self, x, pre_logits: bool = False):
        x = x[:, 0] if self.global_pool == "token" else x[:, 1:].mean(1)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, img):
        if self.dense_outputs and is_fx_symbolic_tracing():
            # features_only with feature_cls='fx' returns the nodes named in feature_info ('pyramid_norms.<i>'):
            # the traced graph computes the pyramid, which the eager forward (a classifier's) never needs
            tokens, _ = self.forward_intermediates(img)
            return self.forward_head(tokens)
        return self.forward_head(self.forward_features(img))


def resample_token_grid(weight, prefix, size):
    """The channel-mixer rule (``resample_token_axis``) for a (rows, prefix + h0*w0) checkpoint tensor of a square
    h0 = w0 grid: its columns after ``prefix`` resized to ``size`` and rescaled by h0*w0/(h*w)."""
    side = math.isqrt(weight.shape[1] - prefix)
    if side * side != weight.shape[1] - prefix:
        raise ValueError(f"cannot resample a token axis of {weight.shape[1]} (not {prefix} + a square grid)")
    return resample_token_axis(weight, (side, side), prefix, tuple(size))


def resample_pos_embed(pos, prefix, size):
    """Bicubic resampling of a (1, prefix + side², D) position embedding (square checkpoint grid) to ``size``."""
    side = math.isqrt(pos.shape[1] - prefix)
    maps = pos[:, prefix:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
    maps = F.interpolate(maps, size=tuple(size), mode="bicubic", align_corners=False)
    return torch.cat([pos[:, :prefix], maps.flatten(2).transpose(1, 2)], dim=1)


_DENSE_ONLY = ("spm.proj_c1.", "pyramid_")


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: VisionMambaMixer) -> Dict[str, torch.Tensor]:
    """Adapt a checkpoint trained at another (square) resolution: pos_embed is interpolated (bicubic) and the
    channel mixers' token-axis weights resampled with area rescaling (docs/mambamixer.md, 'Channel mixer at other
    token counts')."""
    out = {}
    grid = model.grid_size
    for key, value in state_dict.items():
        if key == "pos_embed" and value.shape != model.pos_embed.shape:
            value = resample_pos_embed(value, 1, grid)
        elif key.endswith("x_proj.weight") and ".channel_mixer." in key and value.shape[1] != 1 + grid[0] * grid[1]:
            value = resample_token_grid(value, 1, grid)
        if key.startswith(("sos.router.", "sos.lst_norm.")) and key not in model.state_dict():
            continue  # a routed checkpoint loaded into a scan_mode='fixed' model, which has no router
        out[key] = value
    # A classifier's checkpoint lacks the dense-only weights (c1 projection, last tokens->conv update, pyramid):
    # keep the model's fresh ones, so a detection/segmentation backbone loads it.
    for key, value in model.state_dict().items():
        module = key.rpartition(".")[0].rpartition(".")[2]  # '' for a top-level tensor (pos_embed, cls_token)
        if key not in out and (key.startswith(_DENSE_ONLY) or module in ("norm_c", "proj_c")):
            out[key] = value
    return out


def _create(variant: str, pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    if kwargs.get("features_only") and kwargs.get("conv_branch", True):
        kwargs.setdefault("dense_outputs", True)
    # the 4 pyramid levels, or without the pyramid (the *_noconv ablations) the last 4 blocks
    out_indices = kwargs.pop("out_indices", (0, 1, 2, 3) if kwargs.get("dense_outputs") else 4)
    return build_model_with_cfg(VisionMambaMixer, variant, pretrained, pretrained_filter_fn=checkpoint_filter_fn,
                                feature_cfg=dict(out_indices=out_indices, feature_cls="getter"), **kwargs)


def _cfg(**kwargs) -> Dict[str, Any]:
    return local_weights_cfg(first_conv="patch_embed.proj", crop_pct=0.875,
                             paper_name="MambaMixer: Efficient Selective State Space Models with Dual Token and "
                                        "Channel Selection (v2)", **kwargs)


# Table 3/4 ablations at Tiny scale (docs/mambamixer.md 'Variant sizes'): flag overrides per suffix. 'fb': Table 4
# "w/ f+b" (the naive forward + backward channel mixer); 'noattn': "w/o Attn" (sum instead of cross-scan attention),
# the same network as the full model under the top-1 routing (the paper's ViQS rows agree: 10.1M, 1172 img/s,
# 81.7 both).
_ABLATIONS = {"noqs": dict(channel_mixer=False), "mlp": dict(channel_mixer="mlp"), "fb": dict(channel_mixer="fb"),
              "nolst": dict(lst_concat=False), "noconv": dict(conv_branch=False), "nosos": dict(scan_mode="fixed"),
              "noattn": dict(cross_scan_attn=False)}

default_cfgs = generate_default_cfgs({name: _cfg() for name in (
    "vim2_t", "viqs_t", "vim2_s", "viqs_s", "vim2_b", "viqs_b", "vim2_l",
    *(f"{base}_{suffix}" for base in ("vim2_t", "viqs_t") for suffix in _ABLATIONS))})

# (embed_dim, depth) fitted to Table 15 [D] (module docstring; measured with benchmarks/models_vim2.py):
#   name     D    depth  params M (paper)   GMACs (paper)
_VARIANTS = {
    "vim2_t": (192, 36),  # 12.1 (13.2) -8%    2.91 (2.1) +39%: params matched, FLOPs unreachable (see above)
    "viqs_t": (192, 30),  #  9.5 (10.1) -6%    2.28 (1.9) +20%: idem
    "vim2_s": (320, 30),  # 26.0 (28)   -7%    6.04 (5.3) +14%
    "viqs_s": (320, 26),  # 21.5 (23)   -7%    4.98 (4.7)  +6%
    "vim2_b": (768, 16),  # 77.1 (74)   +4%   17.85 (17.9) -0%
    "viqs_b": (576, 16),  # 42.2 (45)   -6%    9.85 (9.0)  +9%
    "vim2_l": (768, 24),  # 113 (122)   -7%   25.3 (23.2)  +9%
}
# stochastic depth per size [D] (DeiT/VMamba practice; docs/mambamixer.md 'Variant sizes')
_DROP_PATH = {"t": 0.1, "s": 0.3, "b": 0.4, "l": 0.5}


def _model(variant, token_mixer, base, pretrained, kwargs):
    dim, depth = _VARIANTS[base]
    args = dict(embed_dim=dim, depth=depth, drop_path_rate=_DROP_PATH[base[-1]], token_mixer=token_mixer,
                n_interactions=2, spm_inplanes=16, mrfp_ratio=0.25)
    return _create(variant, pretrained, **dict(args, **kwargs))


@register_model
def vim2_t(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-Tiny: D 192, depth 36 [D, fitted to Table 15]; paper 13.2M params / 2.1 GFLOPs."""
    return _model("vim2_t", "s6_bi", "vim2_t", pretrained, kwargs)


@register_model
def viqs_t(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-Tiny: D 192, depth 30 [D, fitted to Table 15]; paper 10.1M / 1.9 GFLOPs."""
    return _model("viqs_t", "qs", "viqs_t", pretrained, kwargs)


@register_model
def vim2_s(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-Small: D 320, depth 30 [D, fitted to Table 15]; paper 28M / 5.3 GFLOPs."""
    return _model("vim2_s", "s6_bi", "vim2_s", pretrained, kwargs)


@register_model
def viqs_s(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-Small: D 320, depth 26 [D, fitted to Table 15]; paper 23M / 4.7 GFLOPs."""
    return _model("viqs_s", "qs", "viqs_s", pretrained, kwargs)


@register_model
def vim2_b(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-Base: D 768, depth 16 [D, fitted to Table 15]; paper 74M / 17.9 GFLOPs."""
    return _model("vim2_b", "s6_bi", "vim2_b", pretrained, kwargs)


@register_model
def viqs_b(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-Base: D 576, depth 16 [D, fitted to Table 15]; paper 45M / 9.0 GFLOPs."""
    return _model("viqs_b", "qs", "viqs_b", pretrained, kwargs)


@register_model
def vim2_l(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-Large: D 768, depth 24 [D, fitted to Table 15]; paper 122M / 23.2 GFLOPs."""
    return _model("vim2_l", "s6_bi", "vim2_l", pretrained, kwargs)


# Table 3 / 4 ablations of the Tiny sizes: the base model with the _ABLATIONS flags of the suffix
@register_model
def vim2_t_noqs(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, no channel mixer (Table 4 'w/o QS')."""
    return _model("vim2_t_noqs", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["noqs"], **kwargs))


@register_model
def vim2_t_mlp(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, MLP channel mixer (Table 3)."""
    return _model("vim2_t_mlp", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["mlp"], **kwargs))


@register_model
def vim2_t_fb(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, forward + backward S6 channel mixers (Table 4 'w/ f+b')."""
    return _model("vim2_t_fb", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["fb"], **kwargs))


@register_model
def vim2_t_nolst(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, no LST concatenation (Table 4 'w/o LST')."""
    return _model("vim2_t_nolst", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["nolst"], **kwargs))


@register_model
def vim2_t_noconv(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, no multi-resolution conv branch (Table 4 'w/o Conv')."""
    return _model("vim2_t_noconv", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["noconv"], **kwargs))


@register_model
def vim2_t_nosos(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, the four cross-scans instead of Switch of Scans (Table 4 'w/o SoS')."""
    return _model("vim2_t_nosos", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["nosos"], **kwargs))


@register_model
def vim2_t_noattn(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViM2-T, no cross-scan attention (Table 4 'w/o Attn')."""
    return _model("vim2_t_noattn", "s6_bi", "vim2_t", pretrained, dict(_ABLATIONS["noattn"], **kwargs))


@register_model
def viqs_t_noqs(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, no channel mixer (Table 4 'w/o QS')."""
    return _model("viqs_t_noqs", "qs", "viqs_t", pretrained, dict(_ABLATIONS["noqs"], **kwargs))


@register_model
def viqs_t_mlp(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, MLP channel mixer (Table 3)."""
    return _model("viqs_t_mlp", "qs", "viqs_t", pretrained, dict(_ABLATIONS["mlp"], **kwargs))


@register_model
def viqs_t_fb(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, forward + backward S6 channel mixers (Table 4 'w/ f+b')."""
    return _model("viqs_t_fb", "qs", "viqs_t", pretrained, dict(_ABLATIONS["fb"], **kwargs))


@register_model
def viqs_t_nolst(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, no LST concatenation (Table 4 'w/o LST')."""
    return _model("viqs_t_nolst", "qs", "viqs_t", pretrained, dict(_ABLATIONS["nolst"], **kwargs))


@register_model
def viqs_t_noconv(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, no multi-resolution conv branch (Table 4 'w/o Conv')."""
    return _model("viqs_t_noconv", "qs", "viqs_t", pretrained, dict(_ABLATIONS["noconv"], **kwargs))


@register_model
def viqs_t_nosos(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, the four cross-scans instead of Switch of Scans (Table 4 'w/o SoS')."""
    return _model("viqs_t_nosos", "qs", "viqs_t", pretrained, dict(_ABLATIONS["nosos"], **kwargs))


@register_model
def viqs_t_noattn(pretrained: bool = False, **kwargs) -> VisionMambaMixer:
    """ViQS-T, no cross-scan attention (Table 4 'w/o Attn')."""
    return _model("viqs_t_noattn", "qs", "viqs_t", pretrained, dict(_ABLATIONS["noattn"], **kwargs))
