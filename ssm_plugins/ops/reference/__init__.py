"""Pure-PyTorch oracles, written to read like the specs' equations. Slow; used by the tests, as the
fallback when the compiled extension is missing, and with ``SSM_PLUGINS_BACKEND=reference``."""
from .qs_mix import qs_matrix, qs_mix, qs_mix_chunked
from .selective_scan import selective_scan

__all__ = ["selective_scan", "qs_mix", "qs_matrix", "qs_mix_chunked"]
