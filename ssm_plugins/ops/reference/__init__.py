"""Pure-PyTorch oracles, written to read like the papers' equations: 2-D SSM (arXiv 2306.06635), eSSM
(arXiv 2402.15290), MambaMixer (arXiv 2403.19888 v2) and Myosotis (arXiv 2509.20503), with what those leave open
taken from our notes (docs/2d-ssm.md, essm.md, mambamixer.md, myosotis.md; each module names its sections).
Slow; used by the tests, as the fallback when the compiled extension is missing, and with
``SSM_PLUGINS_BACKEND=reference``."""
from .essm import essm_conv, essm_dense, essm_discretize, essm_recurrent, essm_state_kernel
from .myo import myo_solve, myo_solve_general, myo_solve_levels, myo_solve_pyramid, myo_solve_pyramid2d
from .qs_mix import qs_matrix, qs_mix
from .selective_scan import low_rank_delta, selective_scan
from .ssm2d import fft_conv2d, ssm2d_kernel

__all__ = ["selective_scan", "low_rank_delta", "qs_mix", "qs_matrix", "ssm2d_kernel", "fft_conv2d",
           "essm_conv", "essm_dense", "essm_discretize", "essm_recurrent", "essm_state_kernel", "myo_solve",
           "myo_solve_general", "myo_solve_levels", "myo_solve_pyramid", "myo_solve_pyramid2d"]
