"""2-D SSM layer of "2-D SSM: A General Spatial Layer for Visual Transformers" (Baron, Zimerman, Wolf 2023,
arXiv:2306.06635): Sec. 3, App. D-E. Readings of the official code and our defaults: docs/2d-ssm.md (markers
[D], code-v1 are explained there).

A depthwise global 2-D convolution whose kernels are the normalised impulse responses of diagonal Roesser
state-space systems, one parameter set per scan direction and channel group:

    y = Σ_d F_d( K_d (*)_causal F_d(x) ) + D ⊙ x          (then an optional LayerNorm over channels)

with F_d the flips of the scan directions. The kernels come from ``ssm_plugins.ops.ssm2d_kernel`` and the
convolution from ``ssm_plugins.ops.fft_conv2d``; by default the directions are fused into one non-causal
kernel and applied with a single FFT convolution (exactly equal to the per-direction sum).
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch
import torch.nn as nn

from .. import ops
from ..ops._backend import normal_tensors
from ..ops.ssm2d import DIRECTION_FLIPS
from ._common import choice, positive_int, shape_or_type

__all__ = ["SSM2D"]

_COMPLEX_PARAMS = {"cartesian": "complex", "polar": "complex_polar"}
_INPUT_FMTS = ("NCHW", "NHWC")



def grid_to_nchw(x: torch.Tensor, dim: int, input_fmt: str) -> torch.Tensor:
    """A (B, dim, H, W) view of a layer's token-grid input given in ``input_fmt`` ('NCHW' or 'NHWC'), or a
    ValueError naming the expected shape (shared by the 2-D layers: SSM2D, S4ND)."""
    channel_dim = 1 if input_fmt == "NCHW" else 3
    grid_dims = (2, 3) if input_fmt == "NCHW" else (1, 2)
    if (not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[channel_dim] != dim
            or min(x.shape[d] for d in grid_dims) < 1):
        what = "(B, dim, H, W)" if input_fmt == "NCHW" else "(B, H, W, dim)"
        got = shape_or_type(x)
        raise ValueError(f"x must have shape {what} with dim={dim} ({input_fmt}) and H, W >= 1, got {got}")
    return x.permute(0, 3, 1, 2) if input_fmt == "NHWC" else x

class SSM2D(nn.Module):
    """2-D state-space layer over a (height x width) feature map.

    Args:
        dim: number of channels.
        d_state: N, the state size per axis [D: 16, paper App. F].
        n_ssm: distinct kernels per direction; channel c uses kernel c mod n_ssm [D: 8, paper App. F].
        directions: 4 (none, flip rows, flip cols, flip both) or 2 (none, flip both) [D: 4, code-v1].
        complex: complex A, B, C with output Re(K) [D: False, real is the paper's default].
        complex_param: "cartesian" (official code: B = σ(re) + iσ(im), C = re + i im) or "polar"
            (paper text) [D: "cartesian", the official code; docs/2d-ssm.md, 'Parameterisation']. Only used
            when ``complex``.
        layernorm: LayerNorm over channels after the layer [D: False, code-v1 default].
        fused: apply the directions as one fused (2H-1)x(2W-1) kernel with a single FFT convolution; False
            runs one causal FFT convolution per direction. Both are exact [D: True].
        input_fmt: "NCHW" (B, dim, H, W) or "NHWC" (B, H, W, dim); the output has the same layout.

    Parameters (S = directions * n_ssm): real ``A_logit`` (4, S, N), ``B_logit`` (2, S, N), ``C`` (2, S, N);
    complex ``A_logit`` (4, S, N, 2) = (radius logit, angle logit), ``B_logit`` (2, S, N, 2), ``C`` (2, S, N, 2);
    ``D`` (dim,). ``no_weight_decay_names`` lists A_logit, B_logit and C (paper App. E.2; D is decayed as in
    code-v1).

    In eval mode the kernel is cached per (H, W) unless gradients are being recorded for the SSM parameters;
    the cache is dropped by ``train()``, ``load_state_dict``, ``.to()`` and any in-place change of the
    parameters (tracked through their version counters; writes through ``param.data`` bypass the counters,
    call :meth:`clear_kernel_cache` after those).
    """

    no_weight_decay_names = ("A_logit", "B_logit", "C")

    def __init__(
            self,
            dim: int,
            d_state: int = 16,
            n_ssm: int = 8,
            directions: int = 4,
            complex: bool = False,
            complex_param: str = "cartesian",
            layernorm: bool = False,
            fused: bool = True,
            input_fmt: str = "NCHW",
            device=None,
            dtype=None,
    ):
        super().__init__()
        for name, value in (("dim", dim), ("d_state", d_state), ("n_ssm", n_ssm)):
            positive_int(name, value)
        if directions not in DIRECTION_FLIPS:
            raise ValueError(f"directions must be 2 or 4, got {directions!r}")
        if complex_param not in _COMPLEX_PARAMS:
            raise ValueError(f"complex_param must be one of {tuple(_COMPLEX_PARAMS)}, got {complex_param!r}")
        choice("input_fmt", input_fmt, _INPUT_FMTS)
        dd = {"device": device, "dtype": dtype}
        self.dim = dim
        self.d_state = d_state
        self.n_ssm = n_ssm
        self.directions = directions
        self.complex = bool(complex)
        self.complex_param = complex_param
        self.fused = bool(fused)
        self.input_fmt = input_fmt
        self.parameterisation = _COMPLEX_PARAMS[complex_param] if self.complex else "real"

        n_sets = directions * n_ssm
        pair = (2,) if self.complex else ()
        self.A_logit = nn.Parameter(torch.empty(4, n_sets, d_state, *pair, **dd))
        self.B_logit = nn.Parameter(torch.empty(2, n_sets, d_state, *pair, **dd))
        self.C = nn.Parameter(torch.empty(2, n_sets, d_state, *pair, **dd))
        self.D = nn.Parameter(torch.empty(dim, **dd))
        self.norm = nn.LayerNorm(dim, **dd) if layernorm else nn.Identity()
        self._kernel_cache: Dict[Tuple[int, int], Tuple[tuple, torch.Tensor]] = {}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialisation of code-v1 (docs/2d-ssm.md, 'Initialisation'; the paper gives none)."""
        with torch.no_grad():
            if self.complex:
                self.A_logit.uniform_(0.5, 3.0)  # radius in (0.62, 0.95), angle in (3.9, 6.0) rad
            else:
                self.A_logit.normal_(0.0, 0.2)  # A = sigmoid(.) ≈ 0.5
            self.B_logit.normal_(0.0, 0.2)
            self.C.normal_(0.0, 1.0)  # scaled by 1/sqrt(N) inside the kernel op
            self.D.normal_(0.0, 1.0)
        if isinstance(self.norm, nn.LayerNorm):
            self.norm.reset_parameters()
        self._kernel_cache.clear()

    def extra_repr(self) -> str:
        return (f"{self.dim}, d_state={self.d_state}, n_ssm={self.n_ssm}, directions={self.directions}, "
                f"complex={self.complex}" + (f", complex_param={self.complex_param!r}" if self.complex else "")
                + f", fused={self.fused}, input_fmt={self.input_fmt!r}")

    # ---- kernel and its eval-mode cache --------------------------------------------------------------------

    def compute_kernel(self, height: int, width: int) -> torch.Tensor:
        """The layer's kernels at a (height, width) grid, always freshly computed.

        Returns (n_ssm, 2*height-1, 2*width-1) fused kernels when ``fused``, else the per-direction causal
        kernels (directions, n_ssm, height, width); float32 (float64 for float64 parameters).
        """
        return ops.ssm2d_kernel(self.A_logit, self.B_logit, self.C, height, width, directions=self.directions,
                                parameterisation=self.parameterisation, fused=self.fused)

    def kernel(self, height: int, width: int) -> torch.Tensor:
        """:meth:`compute_kernel`, served from the per-(H, W) cache in eval mode when no gradient is needed."""
        params = (self.A_logit, self.B_logit, self.C)
        recording = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        if self.training or recording or torch.compiler.is_compiling():  # compiled graphs recompute it
            return self.compute_kernel(height, width)
        # the version counters move on every in-place update (optimiser step, copy_), so stale entries miss
        stamp = (self.A_logit.device, self.A_logit.dtype) + tuple(p._version for p in params)
        cached = self._kernel_cache.get((height, width))
        if cached is None or cached[0] != stamp:
            with torch.no_grad(), normal_tensors():  # an inference tensor would fail a later input-gradient call
                cached = (stamp, self.compute_kernel(height, width))
            self._kernel_cache[(height, width)] = cached
        return cached[1]

    def clear_kernel_cache(self) -> None:
        self._kernel_cache.clear()

    def train(self, mode: bool = True):
        self._kernel_cache.clear()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self._kernel_cache.clear()
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        self._kernel_cache.clear()
        return super()._load_from_state_dict(*args, **kwargs)

    # ---- forward -----------------------------------------------------------------------------------------

    def _conv(self, x: torch.Tensor, kernels: torch.Tensor, origin: Tuple[int, int]) -> torch.Tensor:
        """Depthwise FFT convolution of x (B, dim, H, W) where channel c uses kernels[c mod n_ssm]."""
        batch, dim, height, width = x.shape
        if dim % self.n_ssm == 0:
            # group the channels as (dim / n_ssm, n_ssm): the n_ssm kernels broadcast, one FFT each
            grouped = x.reshape(batch, dim // self.n_ssm, self.n_ssm, height, width)
            return ops.fft_conv2d(grouped, kernels, origin=origin).reshape(batch, dim, height, width)
        index = torch.arange(dim, device=kernels.device) % self.n_ssm
        return ops.fft_conv2d(x, kernels[index], origin=origin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = grid_to_nchw(x, self.dim, self.input_fmt)
        height, width = x.shape[-2:]
        kernels = self.kernel(height, width)
        if self.fused:
            y = self._conv(x, kernels, origin=(height - 1, width - 1))
        else:
            y = 0
            for kernel, flips in zip(kernels, DIRECTION_FLIPS[self.directions]):
                x_d = x.flip(flips) if flips else x
                y_d = self._conv(x_d, kernel, origin=(0, 0))
                y = y + (y_d.flip(flips) if flips else y_d)
        y = y + self.D.to(y.dtype)[:, None, None] * x
        y = y.permute(0, 2, 3, 1)  # LayerNorm over channels, channels last
        y = self.norm(y)
        return y if self.input_fmt == "NHWC" else y.permute(0, 3, 1, 2)
