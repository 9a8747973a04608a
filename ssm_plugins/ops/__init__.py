"""Kernels: one public function per op, dispatching to the compiled CPU/CUDA kernel or the reference.

Public API (names and contracts fixed; other code and tests rely on them):
    selective_scan   S6 scan with mamba_ssm.selective_scan_fn semantics
    essm_conv        eSSM fast tensor convolution (causal/bidirectional, block-diagonal heads)
    backend_info     what the extension provides on this machine
"""
from . import reference
from ._backend import backend_info
from .selective_scan import selective_scan
from .essm import essm_conv

__all__ = ["selective_scan", "essm_conv", "backend_info", "reference"]
