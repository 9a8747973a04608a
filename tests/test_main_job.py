"""The README's main job learns: every family ends far above chance (10 %) on held-out digits."""
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "main.py"


def _main_job():
    spec = importlib.util.spec_from_file_location("ssm_plugins_main_job", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", ["mambamixer", "ssm2d", "essm", "myo"])
def test_main_job_family_learns_digits(family):
    (result,) = _main_job().main(["--families", family, "--epochs-scale", "0.5"])
    assert result["top1_before"] < 30.0, result
    assert result["top1_after"] > 50.0, result
