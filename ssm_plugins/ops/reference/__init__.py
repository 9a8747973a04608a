"""Pure-PyTorch oracles, written to read like the specs' equations. Slow; used by the tests, as the
fallback when the compiled extension is missing, and with ``SSM_PLUGINS_BACKEND=reference``."""
from .essm import essm_conv, essm_dense, essm_discretize, essm_recurrent, essm_state_kernel
from .myo import myo_solve, myo_solve_general, myo_solve_levels, myo_solve_pyramid, myo_solve_pyramid2d
from .qs_mix import qs_matrix, qs_mix
from .selective_scan import low_rank_delta, selective_scan
from .ssm2d import fft_conv2d, ssm2d_kernel

__all__ = ["selective_scan", "low_rank_delta", "qs_mix", "qs_matrix", "ssm2d_kernel", "fft_conv2d",
           "essm_conv", "essm_dense", "essm_discretize", "essm_recurrent", "essm_state_kernel", "myo_solve",
           "myo_solve_general", "myo_solve_levels", "myo_solve_pyramid", "myo_solve_pyramid2d"]
