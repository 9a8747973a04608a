"""Pure-PyTorch oracles, written to read like the specs' equations. Slow; used by the tests, as the
fallback when the compiled extension is missing, and with ``SSM_PLUGINS_BACKEND=reference``."""
from .selective_scan import selective_scan
from .myo import myo_solve, myo_solve_general, myo_solve_pyramid, myo_solve_pyramid2d

__all__ = ["selective_scan"]
