"""The README's main job learns: top-1 on held-out digits ends far above chance (10 %)."""
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "main.py"


def test_main_job_learns_digits():
    spec = importlib.util.spec_from_file_location("ssm_plugins_main_job", SCRIPT)
    main_job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(main_job)
    result = main_job.main(["--epochs", "5"])
    assert result["top1_before"] < 30.0
    assert result["top1_after"] > 60.0, result
