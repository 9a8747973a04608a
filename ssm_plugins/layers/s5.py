"""S5, the baseline of the Myosotis paper's Tables 2 / 4 (Smith, Warrington & Linderman, *Simplified State Space
Layers for Sequence Modeling*, ICLR 2023, arXiv 2208.04933; code lindermanlab/S5 ``s5/ssm.py``, ``s5/layers.py``).

``S5SSM`` has :class:`~ssm_plugins.layers.myo.MyoSSM`'s parameters and initialisation (the Myo layer is S5 with the
linear recurrence replaced by a tree solve, docs/myosotis.md) and runs S5's recurrence over the sequence:

    Λ̄ = exp(ΛΔ),  B̄ = (Λ̄ - 1)/Λ ⊙ B̃ (zero-order hold),  x_k = Λ̄ ⊙ x_{k-1} + B̄ u_k,  y_k = 2 Re(C̃ x_k) + D ⊙ u_k

(``conj_sym``: P_c = P/2 complex states and the factor 2; ``bidirectional``: S5's second, time-reversed scan with
its own C̃, summed). The scan is chunked (``s5_recurrence``: Toeplitz products with the powers of Λ̄ inside a chunk,
the state carried between chunks), in real arithmetic on (real, imaginary) pairs, so torch.export and ONNX take
it; checked against the step-by-step recurrence in tests/layers/test_s5.py. Plain torch: S5 is a baseline, not one
of our ops.
``S5Block`` is S5's pre-norm SequenceLayer around it (``MyoBlock`` with GELU, S5's activation).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops._backend import no_autocast
from ._common import shape_or_type
from .myo import MyoBlock, MyoSSM, hippo_n_init

__all__ = ["S5SSM", "S5Block", "s5_recurrence"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)  # run the scan in float32


def s5_recurrence(v_re: torch.Tensor, v_im: torch.Tensor, a_re: torch.Tensor, a_im: torch.Tensor,
                  reverse: bool = False, chunk: int = 32):
    """x_k = a ⊙ x_{k-1} + v_k over dim 1 (x_0 = v_0; ``reverse``: from the last step back), complex numbers as
    (real, imaginary) pairs: v (B, L, P), a (P,) -> (x_re, x_im) (B, L, P).

    Chunked: within each chunk of ``chunk`` steps x is a lower-triangular Toeplitz product with the powers a^d
    (batched matmuls), and the state at a chunk's end carries into the next one, one step per chunk; O(B L chunk P).
    """
    if reverse:
        v_re, v_im = v_re.flip(1), v_im.flip(1)
    batch, length, states = v_re.shape
    size = min(chunk, length)
    chunks = -(-length // size)
    pad = chunks * size - length
    if pad:
        v_re, v_im = F.pad(v_re, (0, 0, 0, pad)), F.pad(v_im, (0, 0, 0, pad))
    # powers of a in polar form, each computed from its exponent (slicing one table of powers for the carries below
    # made inductor's CPU backward write out of bounds, torch 2.11)
    log_mag = 0.5 * torch.log(a_re * a_re + a_im * a_im)
    angle = torch.atan2(a_im, a_re)

    def power(exponent: torch.Tensor):
        mag = torch.exp(exponent * log_mag)
        return mag * torch.cos(exponent * angle), mag * torch.sin(exponent * angle)

    positions = torch.arange(size, device=v_re.device)
    lag = (positions[:, None] - positions[None, :])[..., None]  # (size, size, 1): t - s
    causal = (lag >= 0).to(v_re.dtype)
    m_re, m_im = power(lag.clamp(min=0).to(v_re.dtype))  # (size, size, P): a^(t - s) for s <= t, else 0
    m_re, m_im = m_re * causal, m_im * causal
    last_re, last_im = power(torch.tensor(float(size), device=v_re.device, dtype=v_re.dtype))  # a^size
    carry_re, carry_im = power((positions + 1).to(v_re.dtype)[:, None])  # a^(t + 1): the entering state's weight
    v_re = v_re.reshape(batch, chunks, size, states)
    v_im = v_im.reshape(batch, chunks, size, states)

    def toeplitz(m, v):
        return torch.einsum("tsp,bcsp->bctp", m, v)

    x_re = toeplitz(m_re, v_re) - toeplitz(m_im, v_im)
    x_im = toeplitz(m_re, v_im) + toeplitz(m_im, v_re)
    # the state entering each chunk: h_c = x_local[c, -1] + a^size h_(c-1)
    h_re, h_im = x_re.new_zeros(batch, states), x_re.new_zeros(batch, states)
    entering_re, entering_im = [h_re], [h_im]
    for c in range(chunks - 1):
        h_re, h_im = (x_re[:, c, -1] + last_re * h_re - last_im * h_im,
                      x_im[:, c, -1] + last_re * h_im + last_im * h_re)
        entering_re.append(h_re)
        entering_im.append(h_im)
    h_re, h_im = torch.stack(entering_re, 1)[:, :, None], torch.stack(entering_im, 1)[:, :, None]  # (B, C, 1, P)
    x_re = x_re + carry_re * h_re - carry_im * h_im
    x_im = x_im + carry_re * h_im + carry_im * h_re
    x_re = x_re.reshape(batch, chunks * size, states)[:, :length]
    x_im = x_im.reshape(batch, chunks * size, states)[:, :length]
    return (x_re.flip(1), x_im.flip(1)) if reverse else (x_re, x_im)


class S5SSM(MyoSSM):
    """S5's SSM on sequences (B, L, dim): MyoSSM's parameters and S5 initialisation, S5's ZOH recurrence.

    Args:
        dim, state_size, blocks, C_init, dt_min, dt_max, conj_sym: as :class:`MyoSSM` (S5's H, P, J, ...).
        bidirectional: S5's ``bidirectional``: a second scan from the last step back, read by its own C̃ (``C_reverse``,
            drawn as C̃), added to the forward one [S5: False].
        clip_eigs: S5's ``clip_eigs``: Re λ = min(Λ^re, -1e-4) in the forward [S5: False].

    Parameters: MyoSSM's (``Lambda_re``, ``Lambda_im``, ``log_step`` (P_c,), ``B`` (P_c, dim, 2), ``C`` (dim, P_c, 2),
    ``D`` (dim,)), and ``C_reverse`` (dim, P_c, 2) when bidirectional. ``forward(u, padding_mask=None)``: padded
    steps (True) are zeroed before the scan, so they never reach a valid step's state.
    """

    def __init__(self, dim: int, state_size: int = 64, blocks: int = 1, C_init: str = "trunc_standard_normal",
                 dt_min: float = 1e-3, dt_max: float = 1e-1, conj_sym: bool = True, bidirectional: bool = False,
                 clip_eigs: bool = False, device=None, dtype=None):
        self.bidirectional = bool(bidirectional)
        self.clip_eigs = bool(clip_eigs)
        super().__init__(dim, state_size, blocks, C_init=C_init, dt_min=dt_min, dt_max=dt_max, conj_sym=conj_sym,
                         device=device, dtype=dtype)
        self.C_reverse = None
        if self.bidirectional:
            self.C_reverse = nn.Parameter(torch.empty_like(self.C))
            if self.C.device.type != "meta":
                self._reset_reverse_readout()

    def reset_parameters(self) -> None:
        """MyoSSM's (S5's) initialisation; the reverse scan's C̃ is drawn as the forward one (S5's ``init_CV``)."""
        super().reset_parameters()
        if getattr(self, "C_reverse", None) is not None:  # None while MyoSSM.__init__ runs
            self._reset_reverse_readout()

    @torch.no_grad()
    def _reset_reverse_readout(self) -> None:
        _, v_full, _ = hippo_n_init(self.state_size // self.blocks, self.blocks, self.conj_sym)
        self.C_reverse.copy_(torch.view_as_real(self._draw_readout(v_full)))

    def extra_repr(self) -> str:
        return (f"{self.dim}, state_size={self.state_size}, heads={self.num_heads}, blocks={self.blocks}, "
                f"conj_sym={self.conj_sym}, bidirectional={self.bidirectional}, clip_eigs={self.clip_eigs}")

    def discretize(self, dtype: torch.dtype):
        """S5's ``discretize_zoh`` in real arithmetic: Λ̄ = exp(ΛΔ) and B̄ = (Λ̄ - 1)/Λ ⊙ B̃ as (real, imaginary)
        pairs, (P_c,) and (P_c, dim)."""
        lam_re, lam_im = self.Lambda_re.to(dtype), self.Lambda_im.to(dtype)
        if self.clip_eigs:
            lam_re = lam_re.clamp(max=-1e-4)
        step = self.log_step.to(dtype).exp()
        decay = torch.exp(lam_re * step)
        a_re, a_im = decay * torch.cos(lam_im * step), decay * torch.sin(lam_im * step)
        norm = lam_re * lam_re + lam_im * lam_im
        g_re = ((a_re - 1) * lam_re + a_im * lam_im) / norm  # (Λ̄ - 1) conj(Λ) / |Λ|²
        g_im = (a_im * lam_re - (a_re - 1) * lam_im) / norm
        b_re, b_im = self.B[..., 0].to(dtype), self.B[..., 1].to(dtype)
        return (a_re, a_im), (g_re[:, None] * b_re - g_im[:, None] * b_im, g_re[:, None] * b_im + g_im[:, None] * b_re)

    def forward(self, u: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not isinstance(u, torch.Tensor) or u.dim() != 3 or u.shape[-1] != self.dim:
            raise ValueError(f"u must have shape (B, L, dim) with dim={self.dim}, got {shape_or_type(u)}")
        if u.is_complex():
            raise ValueError(f"u must be real (float16/bfloat16/float32/float64), got {u.dtype}")
        out_dtype = u.dtype
        with no_autocast(u.device.type):
            x_in = u.float() if u.dtype in _LOW_PRECISION else u
            (a_re, a_im), (b_re, b_im) = self.discretize(x_in.dtype)
            v_re, v_im = x_in @ b_re.transpose(0, 1), x_in @ b_im.transpose(0, 1)  # B̄ u_k, (B, L, P_c)
            if padding_mask is not None:
                keep = (~padding_mask)[..., None].to(x_in.dtype)
                v_re, v_im = v_re * keep, v_im * keep
            y = self._readout(*s5_recurrence(v_re, v_im, a_re, a_im), self.C)
            if self.C_reverse is not None:
                y = y + self._readout(*s5_recurrence(v_re, v_im, a_re, a_im, reverse=True), self.C_reverse)
            y = y + self.D.to(x_in.dtype) * x_in
        return y.to(out_dtype)

    def _readout(self, x_re: torch.Tensor, x_im: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        c = c.to(x_re.dtype)
        y = x_re @ c[..., 0].transpose(0, 1) - x_im @ c[..., 1].transpose(0, 1)  # Re(C̃ x)
        return 2 * y if self.conj_sym else y


class S5Block(MyoBlock):
    """S5's pre-norm SequenceLayer (``s5/layers.py``) on (B, L, dim) sequences:

        z = Norm(x);  y = S5SSM(z);  y = Dropout(GELU(y));  y = y ⊙ σ(W y + c)  (half_glu1);  x + Dropout(y)

    Args: as :class:`MyoBlock` (norm "batch" [S5], bn_momentum, glu, dropout); ``**ssm_kwargs`` go to
    :class:`S5SSM` (``bidirectional``, ``clip_eigs``, ``C_init``, ``dt_min``, ``dt_max``, ``conj_sym``).
    """

    ssm_class = S5SSM
    activation = staticmethod(F.gelu)  # S5's (the Myo paper's blocks use SiLU)

    def forward(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._residual(x, self.ssm(self._norm(x), padding_mask=padding_mask))
