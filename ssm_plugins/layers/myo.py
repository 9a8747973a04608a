"""Myosotis (Myo) layers (Egorov et al., *Myosotis: structured computation for attention like layer*,
arXiv 2509.20503; our choices in docs/myosotis.md).

``MyoSSM`` is the S5 SSM with the linear recurrence replaced by the Myo tree solve x = T⁻¹v (paper Sec. 4):

    v = u B̃ᵀ  (complex, P_c heads),   x = TreeSolve(v, b),   y = 2 Re(x C̃ᵀ) + D ⊙ u

with level-shared Hermitian edge weights b_{n,ℓ} = -exp(λ_n Δ_n s_ℓ)/(k_max + 1) from S5's per-head
parameters (Λ^re, Λ^im, log Δ) and the HiPPO-N / S5 initialisation (paper Sec. 3.5; docs/myosotis.md, 'Edge
weights'). ``MyoBlock`` is S5's pre-norm SequenceLayer around it (docs/myosotis.md, 'Block and GLU'); ``MyoMixer2d``
the gated 2-D token mixer of the backbones (docs/myosotis.md, 'Backbones', [X]).
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ops
from ..ops._backend import no_autocast
from ..ops import MyoTree
from ._common import choice, eigh_fixed_phase, positive_int, shape_or_type

__all__ = ["MyoSSM", "MyoBlock", "MyoMixer2d", "hippo_n_init"]

_C_INITS = ("trunc_standard_normal", "lecun_normal", "complex_normal")
_LEVEL_STEPS = ("span", "none")
_COUPLINGS = ("hermitian", "skew")
_NORMS = ("batch", "layer")
_GLUS = ("half_glu1", "half_glu2", "none")
_LOW_PRECISION = (torch.float16, torch.bfloat16)


@functools.lru_cache(maxsize=16)  # eigh of a (P/J)² matrix: built once per shape
def hippo_n_init(block_size: int, blocks: int, conj_sym: bool = True):
    """S5's block-diagonal HiPPO-N initialisation (S5, arXiv 2208.04933, ``s5/ssm_init.py``), in complex128.

    Returns (Lambda (P_c,), V (P, P_c), Vinv (P_c, P)) with P = block_size * blocks and P_c = P/2 under
    conjugate symmetry (the first half of the eigenpairs of every block), else P. Cached: do not modify them.
    """
    n = torch.arange(block_size, dtype=torch.float64)
    p = torch.sqrt(n + 0.5)
    legs = -torch.sqrt(torch.outer(2 * n + 1, 2 * n + 1))  # HiPPO-LegS, lower triangle
    legs = torch.tril(legs, -1) - torch.diag(n + 1)
    normal = legs + torch.outer(p, p)  # S = A + p pᵀ (normal matrix; its diagonal is -1/2)
    lambda_re = normal.diagonal().mean() * torch.ones(block_size, dtype=torch.float64)
    lambda_im, vectors = eigh_fixed_phase(normal.to(torch.complex128) * -1j)  # the same V on every machine
    keep = block_size // 2 if conj_sym else block_size
    lam = torch.complex(lambda_re, lambda_im)[:keep]
    vectors = vectors[:, :keep]
    lam = lam.repeat(blocks)
    v_full = torch.block_diag(*([vectors] * blocks))
    vinv = torch.block_diag(*([vectors.conj().T] * blocks))
    return lam, v_full, vinv


def _lecun_normal(shape, fan_in: int, generator=None) -> torch.Tensor:
    """Flax's lecun_normal: truncated normal (±2σ) with variance 1/fan_in."""
    std = 1.0 / math.sqrt(fan_in) / 0.87962566103423978  # flax rescales the truncated normal
    out = torch.empty(shape, dtype=torch.float64)
    nn.init.trunc_normal_(out, std=std, a=-2 * std, b=2 * std, generator=generator)
    return out


class MyoSSM(nn.Module):
    """Myo layer with S5 parameters (docs/myosotis.md, 'Edge weights', 'S5 settings') on node features (B, N, dim) of
    a tree.

    Args:
        dim: H, the model width.
        state_size: P, S5's ``ssm_size_base``. With ``conj_sym`` there are P_c = P/2 complex heads and the
            output is 2 Re(·) (docs/myosotis.md, 'Conjugate-symmetric heads').
        blocks: J, number of HiPPO-N blocks on the diagonal; P/J (and P/(2J) with conj_sym) must be ints.
        C_init: "trunc_standard_normal" (S5 default), "lecun_normal" or "complex_normal" (S5's options).
        dt_min, dt_max: log-uniform range of the step Δ [S5: 1e-3, 1e-1].
        conj_sym: conjugate-symmetric heads (P_c = P/2, output 2 Re) [D: True; docs/myosotis.md, 'Conjugate-symmetric
            heads'].
        level_step: "span" (s_ℓ = k^(ℓ-1), the leaves under a level-ℓ node) or "none" (s_ℓ = 1) [D: "span";
            docs/myosotis.md, 'Edge weights'].
        real: real edge weights b = -|ρ|/(k_max+1) and a real solve on (Re, Im) [D: False; docs/myosotis.md,
            'Real mode'].
        coupling: "hermitian" (the paper, C_v = conj(b_v)) or "skew" (ablation; docs/myosotis.md, 'Coupling sign')
            [D: "hermitian"].

    Parameters: ``Lambda_re``, ``Lambda_im``, ``log_step`` (P_c,) (S5's SSM group: no weight decay),
    ``B`` (P_c, dim, 2) and ``C`` (dim, P_c, 2) (real views of the complex B̃, C̃), ``D`` (dim,).
    """

    no_weight_decay_names = ("Lambda_re", "Lambda_im", "log_step")

    def __init__(
            self,
            dim: int,
            state_size: int = 64,
            blocks: int = 1,
            C_init: str = "trunc_standard_normal",
            dt_min: float = 1e-3,
            dt_max: float = 1e-1,
            conj_sym: bool = True,
            level_step: str = "span",
            real: bool = False,
            coupling: str = "hermitian",
            device=None,
            dtype=None,
    ):
        super().__init__()
        for name, value in (("dim", dim), ("state_size", state_size), ("blocks", blocks)):
            positive_int(name, value)
        per_block = 2 * blocks if conj_sym else blocks
        if state_size % per_block:
            raise ValueError(f"state_size must be a multiple of {per_block} (blocks={blocks}, conj_sym={conj_sym}),"
                             f" got {state_size}")
        choice("C_init", C_init, _C_INITS)
        choice("level_step", level_step, _LEVEL_STEPS)
        choice("coupling", coupling, _COUPLINGS)
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"dt_min and dt_max must satisfy 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
        dd = {"device": device, "dtype": dtype}
        self.dim = dim
        self.state_size = state_size
        self.blocks = blocks
        self.num_heads = state_size // 2 if conj_sym else state_size
        self.C_init = C_init
        self.dt_min, self.dt_max = dt_min, dt_max
        self.conj_sym = bool(conj_sym)
        self.level_step = level_step
        self.real = bool(real)
        self.coupling = coupling

        heads = self.num_heads
        self.Lambda_re = nn.Parameter(torch.empty(heads, **dd))
        self.Lambda_im = nn.Parameter(torch.empty(heads, **dd))
        self.log_step = nn.Parameter(torch.empty(heads, **dd))
        self.B = nn.Parameter(torch.empty(heads, dim, 2, **dd))
        self.C = nn.Parameter(torch.empty(dim, heads, 2, **dd))
        self.D = nn.Parameter(torch.empty(dim, **dd))
        if self.Lambda_re.device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """HiPPO-N Λ, B̃ = V⁻¹B₀, C̃ per C_init, D ~ N(0, 1), log Δ ~ U[log dt_min, log dt_max] (S5's init)."""
        lam, v_full, vinv = hippo_n_init(self.state_size // self.blocks, self.blocks, self.conj_sym)
        # S5 (jax lecun_normal, fan_in = shape[-2] x the receptive field): B₀ (P, H) has fan_in P
        b0 = _lecun_normal((self.state_size, self.dim), fan_in=self.state_size)
        b_tilde = vinv @ b0.to(torch.complex128)
        c_tilde = self._draw_readout(v_full)
        with torch.no_grad():
            self.Lambda_re.copy_(lam.real)
            self.Lambda_im.copy_(lam.imag)
            self.log_step.uniform_(math.log(self.dt_min), math.log(self.dt_max))
            self.B.copy_(torch.view_as_real(b_tilde))
            self.C.copy_(torch.view_as_real(c_tilde))
            self.D.normal_(0.0, 1.0)

    def _draw_readout(self, v_full: torch.Tensor) -> torch.Tensor:
        """C̃ (dim, P_c) complex128 per ``C_init`` (S5's ``init_CV``)."""
        if self.C_init == "complex_normal":
            return torch.complex(torch.randn(self.dim, self.num_heads, dtype=torch.float64),
                                 torch.randn(self.dim, self.num_heads, dtype=torch.float64)) * math.sqrt(0.5)
        # a complex (H, P) matrix, times V; lecun_normal draws (H, P, 2) at once, trunc_standard_normal by row
        fan_in = self.state_size * (self.dim if self.C_init == "lecun_normal" else 1)
        c_pair = _lecun_normal((self.dim, self.state_size, 2), fan_in=fan_in)
        return torch.complex(c_pair[..., 0], c_pair[..., 1]) @ v_full

    def extra_repr(self) -> str:
        return (f"{self.dim}, state_size={self.state_size}, heads={self.num_heads}, blocks={self.blocks}, "
                f"conj_sym={self.conj_sym}, level_step={self.level_step!r}, real={self.real}, "
                f"coupling={self.coupling!r}")

    def edge_weights(self, depth: int, arity: int) -> torch.Tensor:
        """b (P_c, depth-1): b_{n,ℓ} = -exp(λ_n Δ_n s_ℓ)/(k_max+1), Re λ clipped to <= -1e-4
        (docs/myosotis.md, 'Edge weights').

        Complex64 (complex128 for a float64 model), or real -|ρ|/(k_max+1) when ``real``. Every
        |b| < 1/(k_max+1): T is strictly diagonally dominant for any parameter values.
        """
        # float32 (float64 for a double model) whatever the parameters' dtype: the solve never runs in bf16/fp16
        dtype = torch.float64 if self.log_step.dtype == torch.float64 else torch.float32
        lam_re, lam_im = self.Lambda_re.to(dtype).clamp(max=-1e-4), self.Lambda_im.to(dtype)
        step = self.log_step.to(dtype).exp()
        levels = torch.arange(depth - 1, device=step.device, dtype=step.dtype)
        span = arity ** levels if self.level_step == "span" else torch.ones_like(levels)
        scaled = step[:, None] * span[None, :]  # Δ_n s_ℓ
        if self.real:
            return -torch.exp(lam_re[:, None] * scaled) / (arity + 1)  # |ρ| = exp(Re λ Δ s)
        rho = torch.exp(torch.complex(lam_re[:, None] * scaled, lam_im[:, None] * scaled))
        return -rho / (arity + 1)

    def forward(self, u: torch.Tensor, tree: MyoTree, node_mask: Optional[torch.Tensor] = None,
                virtual: str = "persistent") -> torch.Tensor:
        """u: (B, N, dim) on all N tree nodes (``virtual="persistent"``) or (B, L, dim) on the leaves only
        (``"transient"``); tree: a ``MyoTree`` (``ops.myo_quadtree`` / ``myo_tree`` / ``myo_tree_from_parent``);
        node_mask: see ``ops.myo_solve``. Returns u's shape and dtype; the solve runs in complex64 / float32
        (complex128 / float64 for double input), also under autocast (docs/myosotis.md, 'Numerical stability')."""
        if not isinstance(u, torch.Tensor) or u.dim() != 3 or u.shape[-1] != self.dim:
            got = shape_or_type(u)
            raise ValueError(f"u must have shape (B, N, dim) with dim={self.dim}, got {got}")
        if not isinstance(tree, MyoTree):
            raise ValueError(f"tree must be a MyoTree (ops.myo_quadtree / myo_tree), got {type(tree).__name__}")
        out_dtype = u.dtype
        with no_autocast(u.device.type):
            x_in = u.float() if u.dtype in _LOW_PRECISION else u
            cdtype = torch.complex128 if x_in.dtype == torch.float64 else torch.complex64
            if x_in.is_complex():
                raise ValueError(f"u must be real (float16/bfloat16/float32/float64), got {u.dtype}")
            B, C = self.B.to(x_in.dtype), self.C.to(x_in.dtype)
            # real input times complex B̃ as two real matmuls; no ZOH input factor in tree mode
            # (docs/myosotis.md, 'Input gain')
            v = torch.complex(x_in @ B[..., 0].transpose(0, 1), x_in @ B[..., 1].transpose(0, 1))  # (B, N, P_c)
            b = self.edge_weights(len(tree.level_sizes), tree.arity)
            if self.real:  # real b: solve Re and Im as separate real channels
                batch, nodes, heads = v.shape
                b = b.to(x_in.dtype).repeat_interleave(2, dim=0)
                x = ops.myo_solve(torch.view_as_real(v).reshape(batch, nodes, 2 * heads), b, tree,
                                  node_mask=node_mask, coupling=self.coupling, virtual=virtual)
                x = torch.view_as_complex(x.reshape(batch, nodes, heads, 2).contiguous())
            else:
                x = ops.myo_solve(v, b.to(cdtype), tree, node_mask=node_mask, coupling=self.coupling,
                                  virtual=virtual)
            y = x.real @ C[..., 0].transpose(0, 1) - x.imag @ C[..., 1].transpose(0, 1)  # Re(x C̃ᵀ)
            if self.conj_sym:
                y = 2 * y
            y = y + self.D.to(x_in.dtype) * x_in
        return y.to(out_dtype)


class MyoBlock(nn.Module):
    """S5's pre-norm SequenceLayer (``s5/layers.py``) with Myo in place of the SSM (docs/myosotis.md, 'Block and GLU'):

        z = Norm(x);  y = MyoSSM(z);  y = Dropout(SiLU(y));  y = y ⊙ σ(W y + c)  (half_glu1);  x + Dropout(y)

    Args:
        dim, state_size, blocks, **ssm_kwargs: see :class:`MyoSSM`.
        norm: "batch" (S5 default; statistics over batch × all nodes) or "layer" [D: "batch"].
        bn_momentum: PyTorch BatchNorm momentum (= 1 - flax momentum) [D: 0.05, S5's 0.95].
        glu: "half_glu1", "half_glu2" (y_pre ⊙ σ(W Dropout(SiLU(y_pre)))) or "none" (plain SiLU)
            [D: "half_glu1"; docs/myosotis.md, 'Block and GLU'].
        dropout: channel dropout with one mask per sample shared by all nodes (S5) [D: 0.0].
    Input (B, N, dim) node features, as for MyoSSM.
    """

    ssm_class = MyoSSM  # the SSM between norm and gate (S5Block: S5's recurrence on the same parameters)
    activation = staticmethod(F.silu)  # the paper's SiLU (S5: GELU)

    def __init__(self, dim: int, state_size: int = 64, blocks: int = 1, norm: str = "batch",
                 bn_momentum: float = 0.05, glu: str = "half_glu1", dropout: float = 0.0, device=None, dtype=None,
                 **ssm_kwargs):
        super().__init__()
        choice("norm", norm, _NORMS)
        choice("glu", glu, _GLUS)
        dd = {"device": device, "dtype": dtype}
        self.norm_kind = norm
        self.glu = glu
        self.norm = nn.BatchNorm1d(dim, momentum=bn_momentum, **dd) if norm == "batch" else nn.LayerNorm(dim, **dd)
        self.ssm = self.ssm_class(dim, state_size, blocks, **ssm_kwargs, **dd)
        self.gate = nn.Linear(dim, dim, **dd) if glu != "none" else None
        if self.gate is not None:  # flax Dense: LeCun normal weights, zero bias
            nn.init.trunc_normal_(self.gate.weight, std=1 / math.sqrt(dim) / 0.8796, a=-2 / math.sqrt(dim) / 0.8796,
                                  b=2 / math.sqrt(dim) / 0.8796)
            nn.init.zeros_(self.gate.bias)
        self.drop = nn.Dropout1d(dropout)

    def _dropout(self, y: torch.Tensor) -> torch.Tensor:
        return self.drop(y.transpose(1, 2)).transpose(1, 2)  # one channel mask per sample, all nodes

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        # BatchNorm over (batch x nodes) per channel on a (B*N, dim) view: the same statistics as on (B, dim, N),
        # without the transposes (whose output strides the CPU kernel and its meta function disagree on, which
        # broke torch.compile's aot_eager: "view size is not compatible with input tensor's size and stride")
        return self.norm(x.reshape(-1, x.shape[-1])).reshape(x.shape) if self.norm_kind == "batch" else self.norm(x)

    def _residual(self, x: torch.Tensor, y_pre: torch.Tensor) -> torch.Tensor:
        """x + the activation / gate / dropout path of the SSM output y_pre."""
        y = self._dropout(self.activation(y_pre))
        if self.glu == "half_glu1":
            y = y * torch.sigmoid(self.gate(y))
        elif self.glu == "half_glu2":
            y = y_pre * torch.sigmoid(self.gate(y))
        else:  # plain activation: S5's single-dropout activation path
            return x + y
        return x + self._dropout(y)

    def forward(self, x: torch.Tensor, tree: MyoTree, node_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._residual(x, self.ssm(self._norm(x), tree, node_mask=node_mask))


class MyoMixer2d(nn.Module):
    """Gated Myo token mixer on channels-last maps (B, H, W, dim), docs/myosotis.md 'Backbones' [X]:

        z = W_z x;  x' = DWConv3x3(x);  y = 2 Re(C̃ T⁻¹ B̃ x') + D ⊙ x'  (ceil quadtree, transient virtual nodes);
        out = Linear(y ⊙ SiLU(z))

    Args:
        dim: channels. heads: complex Myo heads P_c [D: dim // 2]; state_size = 2 heads under conj_sym.
        blocks: HiPPO-N blocks [D: 1]. dwconv: the depthwise 3x3 conv before the solve [D: True].
        shift: roll the map by s = 2^(D-3) pixels along H and W before the solve and back after it
            (D = quadtree levels; s = half the span of the root's children, as Swin shifts by half a window),
            so the coarsest block boundaries move [D: False]. Rolling by the root's span 2^(D-1) (our first
            design) or by its children's span 2^(D-2) only permutes siblings on power-of-two maps: a no-op.
        **ssm_kwargs: :class:`MyoSSM` options (C_init, dt_min, dt_max, level_step, real, coupling).
    Any H x W >= 1 works (ceil quadtree).
    """

    def __init__(self, dim: int, heads: Optional[int] = None, blocks: int = 1, dwconv: bool = True,
                 shift: bool = False, device=None, dtype=None, **ssm_kwargs):
        super().__init__()
        dd = {"device": device, "dtype": dtype}
        heads = max(dim // 2, 1) if heads is None else heads
        conj_sym = ssm_kwargs.pop("conj_sym", True)
        self.dim = dim
        self.shift = bool(shift)
        self.dwconv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim, **dd) if dwconv else nn.Identity()
        self.ssm = MyoSSM(dim, 2 * heads if conj_sym else heads, blocks, conj_sym=conj_sym, **ssm_kwargs, **dd)
        self.in_gate = nn.Linear(dim, dim, **dd)
        self.proj = nn.Linear(dim, dim, **dd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[-1] != self.dim:
            got = shape_or_type(x)
            raise ValueError(f"x must have shape (B, H, W, dim) with dim={self.dim}, got {got}")
        batch, height, width, dim = x.shape
        gate = F.silu(self.in_gate(x))
        x = self.dwconv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        tree = ops.myo_quadtree(height, width, device=x.device)  # leaves: pixels in raster order
        roll = 2 ** max(len(tree.level_sizes) - 3, 0) if self.shift else 0
        if roll:
            x = torch.roll(x, (roll, roll), dims=(1, 2))
        y = self.ssm(x.reshape(batch, height * width, dim), tree, virtual="transient").reshape(x.shape)
        if roll:
            y = torch.roll(y, (-roll, -roll), dims=(1, 2))
        return self.proj(y * gate)

    def extra_repr(self) -> str:
        return f"{self.dim}, shift={self.shift}"
