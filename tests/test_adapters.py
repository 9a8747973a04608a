"""Each toolbox adapter imports its toolbox (and only its own), so configs and recipes can load it."""
import subprocess
import sys

import pytest

# mmpretrain.models itself imports mmdet when it is installed (mmpretrain/models/utils/res_layer_extra_norm.py), so
# the mmpretrain adapter cannot keep mmdet out
OTHERS = {"mmdet": ("mmseg", "mmpretrain", "speechbrain"), "mmseg": ("mmdet", "mmpretrain", "speechbrain"),
          "mmpretrain": ("mmseg", "speechbrain"), "speechbrain": ("mmdet", "mmseg", "mmpretrain")}


@pytest.mark.parametrize("adapter", sorted(OTHERS))
def test_adapter_imports_only_its_toolbox(adapter):
    code = (f"import sys, ssm_plugins.{adapter}; "
            f"print({adapter!r} in sys.modules, sorted(m for m in {OTHERS[adapter]!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "True []"
