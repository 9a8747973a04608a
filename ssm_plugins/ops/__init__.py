"""Kernels: one public function per op, dispatching to the compiled CPU/CUDA kernel or the reference.

Public API (names and contracts fixed; other code and tests rely on them):
    selective_scan   S6 scan with mamba_ssm.selective_scan_fn semantics
    qs_mix           quasi-separable non-causal mixing y = Q x (MambaMixer QS, scalar or diagonal A)
    ssm2d_kernel, fft_conv2d, fuse_directions   2-D SSM kernels (Baron et al.) and zero-padded FFT convolution
    essm_conv        eSSM fast tensor convolution (causal/bidirectional, block-diagonal heads)
    myo_solve        Myosotis tree solve x = T⁻¹u (per-node and level-shared pyramid forms);
                     trees: myo_tree (k-ary 1-D), myo_quadtree (2-D), myo_tree_from_parent, MyoTree
    backend_info     what the extension provides on this machine
Every op registers a FLOP formula for torch.utils.flop_counter.FlopCounterMode, and so do torch's FFT ops
(``_flops``), which torch leaves uncounted. Importing the ops adds a digest of their sources to torch.compile's
cache key tag (``_compile_cache``: a warm cache must not replay graphs traced with older fake kernels or formulas).
"""
from . import _compile_cache, _flops, reference  # noqa: F401  (_flops: FLOP formulas for torch's FFT ops)
from ._backend import backend_info
from .essm import essm_conv
from .myo import MyoTree, myo_quadtree, myo_solve, myo_tree, myo_tree_from_parent
from .qs_mix import qs_mix
from .selective_scan import selective_scan
from .ssm2d import fft_conv2d, fuse_directions, ssm2d_kernel

__all__ = ["selective_scan", "qs_mix", "ssm2d_kernel", "fft_conv2d", "fuse_directions", "essm_conv", "myo_solve",
           "myo_tree", "myo_quadtree", "myo_tree_from_parent", "MyoTree", "backend_info", "reference"]

_compile_cache.tag_compile_caches()
