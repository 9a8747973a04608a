"""Switch of Scans (Behrouz et al. 2024, "MambaMixer", arXiv:2403.19888 v2, Sec. 3, App. G; our choices where the
paper is silent: docs/mambamixer.md, 'Switch of Scans'): the 16 scan orders of a patch grid, Table 12's fixed scan
sets, and the router that picks each image's scans and combines their outputs.

    scan_orders     the 16 orders (C1-C4 cross-scans, Z1-Z8 zigzags, L1-L4 local scans) and their inverses.
    resolve_scans   a fixed scan set (a SCAN_SETS name, or scan names / ids) -> scan ids.
    SwitchOfScans   local summary tokens, the router over the 16 scans, top-n selection and the combination.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..ops._backend import normal_tensors
from ._common import check_tokens, choice, is_positive_int, positive_int

__all__ = ["SCAN_NAMES", "SCAN_SETS", "scan_orders", "resolve_scans", "gather_tokens", "SwitchOfScans"]


SCAN_NAMES = ("C1", "C2", "C3", "C4", "Z1", "Z2", "Z3", "Z4", "Z5", "Z6", "Z7", "Z8", "L1", "L2", "L3", "L4")
_INDEX_CACHE = {}  # (key, device) -> tuple of index tensors on that device


def _cached_on(device, build, *args):
    """``build(*args)``'s tuple of CPU tensors, made once per (build, args) and copied to ``device`` once per device:
    an index built on the host and copied in every forward is a host-to-device copy that waits for the stream (three
    per vim2_t step on a GPU) and keeps the step out of a CUDA graph. The cache outlives any trace: it is filled with
    real tensors, never with the fake ones of a torch.export trace or a meta default device (they would poison every
    later eager call), nor with inference tensors (they would break every later forward autograd records). ``build`` is
    a module-level function and ``args`` constants, as torch.compile needs."""
    key, device = (build.__name__, args), torch.device(device)
    if (key, device) not in _INDEX_CACHE:
        with unset_fake_temporarily(), normal_tensors():
            on_cpu = (key, torch.device("cpu"))
            if on_cpu not in _INDEX_CACHE:
                _INDEX_CACHE[on_cpu] = tuple(build(*args))
            _INDEX_CACHE[(key, device)] = tuple(t.to(device) for t in _INDEX_CACHE[on_cpu])
    return _INDEX_CACHE[(key, device)]


# A torch.compile trace calls _cached_on eagerly and keeps its tensors as constants (at a grid never run eagerly
# it would otherwise meet unset_fake_temporarily, which dynamo does not trace): what torch.compiler.
# assume_constant_result sets, without the torch._dynamo import that decorator costs `import ssm_plugins` (0.3 s).
_cached_on._dynamo_marked_constant = True


def _window_ids(height: int, width: int, side: int, num_windows: int, dtype: torch.dtype):
    """(window id of every row-major token (L,), the window means' weights (L, side²) in ``dtype``: one_hot / count)
    for a side x side grid of windows over a (height x width) token grid."""
    splits = [[torch.full((len(part),), i, device="cpu")
               for i, part in enumerate(torch.arange(n, device="cpu").tensor_split(side))] for n in (height, width)]
    rows, cols = torch.cat(splits[0]), torch.cat(splits[1])
    window = (rows[:, None] * side + cols[None, :]).reshape(-1)
    one_hot = F.one_hot(window, num_windows).to(dtype)
    return window, one_hot / one_hot.sum(0)


def _scan_ids(scans: Tuple[int, ...]):
    return (torch.tensor(scans, device="cpu"),)


def _snake(grid):
    """Boustrophedon over the rows of an index grid: even rows left->right, odd rows right->left."""
    rows = [row.flip(0) if r % 2 else row for r, row in enumerate(grid)]
    return torch.cat(rows)


def _local(grid, window):
    """LocalMamba local scan: window x window tiles row-major, row-major inside each (edge tiles partial)."""
    height, width = grid.shape
    parts = [grid[r:r + window, c:c + window].reshape(-1)
             for r in range(0, height, window) for c in range(0, width, window)]
    return torch.cat(parts)


def scan_orders(height: int, width: int, local_windows: Sequence[int] = (2, 7), device="cpu"):
    """The 16 scan orders of SoS over a (height x width) patch grid (App. G; Z and L lists are [D] reconstructions).

    Returns (orders, inverses), LongTensors (16, height*width): ``x[:, orders[s]]`` is the scan-s sequence of
    row-major tokens x and ``y[:, inverses[s]]`` puts a scan-ordered y back in row-major order. Rows follow
    ``SCAN_NAMES``: C1 row-major, C2 column-major, C3/C4 their reverses; Z1..Z8 = {row, column}-snake x
    {identity, horizontal flip, vertical flip, 180° rotation}; L1/L2 = local(w1) and its reverse, L3/L4 =
    local(w2) and its reverse. Cached per (height, width, local_windows) and ``device``.
    """
    positive_int("height", height)
    positive_int("width", width)
    local_windows = tuple(local_windows)
    if len(local_windows) != 2 or not all(is_positive_int(w) for w in local_windows):
        raise ValueError(f"local_windows must be two positive ints, got {local_windows!r}")
    return _cached_on(device, _build_scan_orders, height, width, local_windows)


def _build_scan_orders(height: int, width: int, local_windows: Tuple[int, int]):
    grid = torch.arange(height * width, device="cpu").view(height, width)
    row, col = grid.reshape(-1), grid.t().reshape(-1)
    orders = [row, col, row.flip(0), col.flip(0)]
    transforms = (lambda g: g, lambda g: g.flip(1), lambda g: g.flip(0), lambda g: g.flip(0).flip(1))
    orders += [_snake(t(grid)) for t in transforms]
    orders += [_snake(t(grid).t()) for t in transforms]
    for window in local_windows:
        local = _local(grid, window)
        orders += [local, local.flip(0)]
    orders = torch.stack(orders)
    return orders, orders.argsort(dim=1)


# Table 12's fixed scan choices (App. I.1), by name [D: which members; every scan runs bidirectionally]:
# Cross-Scan (n) = VMamba's row-major, column-major and their reverses; Zigzag (n) = the row and column snakes and,
# for 4, their 180° rotations (the zigzag counterpart of the four cross-scans); Local = LocalMamba's four local
# candidates; Local + Global = those plus the four cross-scans (LocalMamba's whole 8-scan search space).
SCAN_SETS = {
    "cross1": ("C1",), "cross2": ("C1", "C2"), "cross4": ("C1", "C2", "C3", "C4"),
    "zigzag1": ("Z1",), "zigzag2": ("Z1", "Z5"), "zigzag4": ("Z1", "Z4", "Z5", "Z8"),
    "local": ("L1", "L2", "L3", "L4"), "local_global": ("L1", "L2", "L3", "L4", "C1", "C2", "C3", "C4"),
}


def resolve_scans(scans) -> tuple:
    """Scan ids (indices of SCAN_NAMES) of a fixed scan set: a SCAN_SETS name ('zigzag2'), or a sequence of scan
    names ('C1', 'Z5') and/or ids."""
    if isinstance(scans, str):
        if scans not in SCAN_SETS:
            raise ValueError(f"fixed_scans must be one of {sorted(SCAN_SETS)} or a sequence of scan names/ids, "
                             f"got {scans!r}")
        scans = SCAN_SETS[scans]
    try:
        scans = tuple(scans)
    except TypeError:
        raise ValueError(f"fixed_scans must be a scan set name or a sequence of scan names/ids, "
                         f"got {scans!r}") from None
    ids = []
    for scan in scans:
        if isinstance(scan, str) and scan in SCAN_NAMES:
            ids.append(SCAN_NAMES.index(scan))
        elif not isinstance(scan, bool) and isinstance(scan, int) and 0 <= scan < len(SCAN_NAMES):
            ids.append(scan)
        else:
            raise ValueError(f"fixed_scans entries must be scan names {SCAN_NAMES} or ids in [0, {len(SCAN_NAMES)}), "
                             f"got {scan!r} in {scans!r}")
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"fixed_scans must name at least one scan, each once, got {scans!r}")
    return tuple(ids)


def gather_tokens(x, index):
    """x (batch, L, C), index (batch, L) -> x[b, index[b]] (per-sample permutation)."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


class SwitchOfScans(nn.Module):
    """Switch of Scans (paper Sec. 3): local summary tokens, a router over the 16 scans, top-n selection and the
    combination of the n scanned outputs.

    ``forward(e, grid_size)`` with patch embeddings e (batch, h*w, dim) (row-major, no class token) returns
    (e', scan_ids (batch, n), gates (batch, n), probs (batch, 16)): e' has the LSTs concatenated and projected
    (``lst_concat``), gates are g/sg(g) (value 1, gradient to the router; ``sos_gate='st'``) or the raw
    probabilities (``sos_gate='vmoe'``). ``scan_index(scan_ids, grid_size)`` gives the per-sample (orders,
    inverses) (batch, n, h*w); ``combine(u, ys, gates)`` mixes the n scans' outputs (n = 1: y·gate; n ≥ 2:
    cross-scan attention or, with ``cross_scan_attn=False``, the plain gated sum). With ``fixed_scans`` every
    image gets those scans, gates 1 and probs None.

    Args:
        dim: width D.
        num_windows: ℓ², 4 or 9 [D: 4]. top_n: scans selected per image [P2: 1].
        lst_concat: e_p <- W_lst[e_p ‖ S_w(p)] with W_lst = [I, 0] at init [D: True].
        sos_gate: 'st' (straight-through, [D]) or 'vmoe' (y·g).
        cross_scan_attn: softmax attention over the n outputs per token (n ≥ 2) [D: True].
        local_windows: window sizes of the L1-L4 scans [D: (2, 7)].
        fixed_scans: the scans every image uses, with no router, their outputs summed: a SCAN_SETS name
            (Table 12: 'cross1' ... 'local_global'; 'cross4' = "w/o SoS" of Table 4) or a sequence of scan names /
            ids (``resolve_scans``); None = routed [None]. Without a router nothing unused is built, so every
            parameter gets a gradient (DistributedDataParallel with find_unused_parameters=False).
    Parameter names: ``lst_norm`` (when the summaries are used), ``lst_proj`` (Linear 2D -> D), ``router``
    (Linear ℓ²D -> 16, not with ``fixed_scans``), ``attn_q``/``attn_k`` (Linear D -> D, only for top_n ≥ 2 with
    attention).
    """

    def __init__(self, dim: int, num_windows: int = 4, top_n: int = 1, lst_concat: bool = True,
                 sos_gate: str = "st", cross_scan_attn: bool = True, local_windows: Sequence[int] = (2, 7),
                 fixed_scans: Optional[Sequence[int]] = None):
        super().__init__()
        positive_int("dim", dim)
        if num_windows not in (1, 4, 9, 16):
            raise ValueError(f"num_windows must be a square (1, 4, 9 or 16), got {num_windows!r}")
        if fixed_scans is not None:
            fixed_scans = resolve_scans(fixed_scans)
            top_n = len(fixed_scans)
        self.fixed_scans = fixed_scans
        positive_int("top_n", top_n)
        if top_n > len(SCAN_NAMES):
            raise ValueError(f"top_n must be <= {len(SCAN_NAMES)}, got {top_n}")
        choice("sos_gate", sos_gate, ("st", "vmoe"))
        self.dim, self.num_windows, self.top_n = dim, num_windows, top_n
        self.side = int(round(math.sqrt(num_windows)))
        self.sos_gate, self.local_windows = sos_gate, tuple(local_windows)
        scan_orders(2, 2, self.local_windows)  # validate local_windows early
        # the summaries feed the router and/or the LST concatenation; with neither they are not built
        self.lst_norm = nn.LayerNorm(dim, eps=1e-6) if lst_concat or fixed_scans is None else None
        if lst_concat:
            self.lst_proj = nn.Linear(2 * dim, dim, bias=False)
            with torch.no_grad():
                self.lst_proj.weight.zero_()
                self.lst_proj.weight[:, :dim].copy_(torch.eye(dim))
        else:
            self.lst_proj = None
        if fixed_scans is None:
            self.router = nn.Linear(num_windows * dim, len(SCAN_NAMES))
            nn.init.trunc_normal_(self.router.weight, std=0.02)
            nn.init.zeros_(self.router.bias)
        else:
            self.router = None
        if top_n >= 2 and cross_scan_attn and fixed_scans is None:
            self.attn_q = nn.Linear(dim, dim, bias=False)
            self.attn_k = nn.Linear(dim, dim, bias=False)
        else:
            self.attn_q = self.attn_k = None

    def extra_repr(self):
        return (f"dim={self.dim}, num_windows={self.num_windows}, top_n={self.top_n}, sos_gate={self.sos_gate!r}, "
                f"cross_scan_attn={self.attn_q is not None}, fixed_scans={self.fixed_scans}")

    def forward(self, e, grid_size):
        height, width = grid_size
        check_tokens("e", e, self.dim, height * width, f" = h*w of grid_size {tuple(grid_size)}")
        if height < self.side or width < self.side:
            raise ValueError(f"grid_size {tuple(grid_size)} must be at least {self.side}x{self.side} "
                             f"for num_windows={self.num_windows}")
        if self.lst_norm is not None:
            window, mean = _cached_on(e.device, _window_ids, height, width, self.side, self.num_windows, e.dtype)
            summary = self.lst_norm(torch.einsum("lw,bld->bwd", mean, e))  # S_i = LN(mean)
            if self.lst_proj is not None:
                e = self.lst_proj(torch.cat([e, summary[:, window]], dim=-1))
        if self.router is None:
            scan_ids = _cached_on(e.device, _scan_ids, tuple(self.fixed_scans))[0].expand(e.shape[0], -1)
            return e, scan_ids, torch.ones(scan_ids.shape, device=e.device, dtype=e.dtype), None
        probs = torch.softmax(self.router(summary.flatten(1)), dim=-1)
        top_probs, scan_ids = probs.topk(self.top_n, dim=-1)
        gates = top_probs / top_probs.detach() if self.sos_gate == "st" else top_probs
        return e, scan_ids, gates, probs

    @staticmethod
    def importance_loss(probs):
        """V-MoE importance auxiliary loss (load balancing, which the paper omits: [D] weight 0 by default): the squared
        coefficient of variation of the per-scan probability mass over the batch, probs (batch, 16) -> scalar."""
        importance = probs.sum(0)
        return importance.var(unbiased=False) / importance.mean().square().clamp_min(1e-12)

    def scan_index(self, scan_ids, grid_size):
        """scan_ids (batch, n) -> per-sample (orders, inverses), each (batch, n, h*w) on scan_ids' device."""
        orders, inverses = scan_orders(*grid_size, self.local_windows, device=scan_ids.device)
        return orders[scan_ids], inverses[scan_ids]

    def combine(self, u, ys, gates):
        """u (batch, L, D) the mixer input (attention queries); ys (batch, n, L, D) the n scans' outputs in
        row-major order, or a sequence of the n (batch, L, D) outputs; gates (batch, n). Returns (batch, L, D)."""
        if not torch.is_tensor(ys):
            if len(ys) == 1:  # one scan selected: its output gated, without stacking a copy of it
                return ys[0] * gates[:, :1, None].to(ys[0].dtype)
            ys = torch.stack(list(ys), dim=1)
        ys = ys * gates[:, :, None, None].to(ys.dtype)
        if ys.shape[1] == 1:
            return ys[:, 0]
        if self.attn_q is None:
            return ys.sum(1)
        scores = torch.einsum("bld,bnld->bln", self.attn_q(u), self.attn_k(ys)) / math.sqrt(self.dim)
        return torch.einsum("bln,bnld->bld", torch.softmax(scores, dim=-1), ys)
