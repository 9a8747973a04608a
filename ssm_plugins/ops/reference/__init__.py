"""Pure-PyTorch oracles, written to read like the specs' equations. Slow; used by the tests, as the
fallback when the compiled extension is missing, and with ``SSM_PLUGINS_BACKEND=reference``."""
from .selective_scan import selective_scan
from .essm import essm_conv, essm_dense, essm_discretize, essm_recurrent, essm_state_kernel

__all__ = ["selective_scan", "essm_conv", "essm_dense", "essm_discretize", "essm_recurrent", "essm_state_kernel"]
