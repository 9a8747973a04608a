"""Kernels: one public function per op, dispatching to the compiled CPU/CUDA kernel or the reference.

Public API (names and contracts fixed; other code and tests rely on them):
    selective_scan   S6 scan with mamba_ssm.selective_scan_fn semantics
    myo_solve        Myosotis tree solve x = T⁻¹u (per-node and level-shared pyramid forms);
                     trees: myo_tree (k-ary 1-D), myo_quadtree (2-D), myo_tree_from_parent, MyoTree
    backend_info     what the extension provides on this machine
"""
from . import reference
from ._backend import backend_info
from .selective_scan import selective_scan
from .myo import MyoTree, myo_quadtree, myo_solve, myo_tree, myo_tree_from_parent

__all__ = ["selective_scan", "myo_solve", "myo_tree", "myo_quadtree", "myo_tree_from_parent", "MyoTree",
           "backend_info", "reference"]
