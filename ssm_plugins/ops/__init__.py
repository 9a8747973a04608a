"""Kernels: one public function per op, dispatching to the compiled CPU/CUDA kernel or the reference.

Public API (names and contracts fixed; other code and tests rely on them):
    selective_scan   S6 scan with mamba_ssm.selective_scan_fn semantics
    myo_solve        Myosotis tree solve x = T⁻¹u (per-node and level-shared pyramid forms); myo_tree
    backend_info     what the extension provides on this machine
"""
from . import reference
from ._backend import backend_info
from .selective_scan import selective_scan
from .myo import myo_solve, myo_tree

__all__ = ["selective_scan", "myo_solve", "myo_tree", "backend_info", "reference"]
