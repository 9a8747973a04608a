"""Kernels: one public function per op, dispatching to the compiled CPU/CUDA kernel or the reference.

Public API (names and contracts fixed; other code and tests rely on them):
    selective_scan   S6 scan with mamba_ssm.selective_scan_fn semantics
    qs_mix           quasi-separable non-causal mixing y = Q x (MambaMixer QS, scalar or diagonal A)
    backend_info     what the extension provides on this machine
"""
from . import reference
from ._backend import backend_info
from .qs_mix import qs_mix
from .selective_scan import selective_scan

__all__ = ["selective_scan", "qs_mix", "backend_info", "reference"]
