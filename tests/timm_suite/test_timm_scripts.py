"""timm's own command-line scripts on our models, through ``python -m ssm_plugins SCRIPT ...``.

PyPI's timm distributions ship the library only: the sdist holds ``timm/`` and ``tests/`` but not the repository's
scripts (``benchmark.py``, ``validate.py``, ``onnx_export.py``, ``train.py``). These tests run the scripts of a
checkout of pytorch-image-models named by ``TIMM_SCRIPTS`` (the folder that holds ``benchmark.py``), and skip,
saying so, without one.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = os.environ.get("TIMM_SCRIPTS", "")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (SCRIPTS and (Path(SCRIPTS) / "benchmark.py").is_file()),
                       reason="TIMM_SCRIPTS is not set to a pytorch-image-models checkout (timm's scripts are not "
                              "in its PyPI distributions)"),
]
# vim2_t at a CPU size: 32 px, 64 wide, 4 blocks
KWARGS = ["embed_dim=64", "depth=4", "img_size=32"]


def _run(*args, cwd=None, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, *args], cwd=cwd or SCRIPTS, env=env, capture_output=True, text=True,
                          timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_a_plain_python_run_of_the_script_does_not_know_our_models():
    proc = _run("benchmark.py", "--model", "vim2_t", "--device", "cpu", check=False)
    assert "Unknown model (vim2_t)" in proc.stdout + proc.stderr  # benchmark.py reports it and exits 0


def _param_millions(**kwargs):
    import timm

    import ssm_plugins  # noqa: F401  (registers vim2_t)

    return sum(p.numel() for p in timm.create_model("vim2_t", **kwargs).parameters()) / 1e6


def test_benchmark_py_inference_and_train(tmp_path):
    results = tmp_path / "bench.json"
    _run("-m", "ssm_plugins", "benchmark.py", "--model", "vim2_t", "--model-kwargs", *KWARGS, "--img-size", "32",
         "--bench", "both", "--device", "cpu", "-b", "2", "--num-warm-iter", "1", "--num-bench-iter", "5",
         "--results-file", str(results), "--results-format", "json")
    row = json.loads(results.read_text())  # one model: one object
    assert row["model"] == "vim2_t" and "error" not in row, row
    assert row["infer_samples_per_sec"] > 0 and row["train_samples_per_sec"] > 0
    assert row["param_count"] == pytest.approx(_param_millions(embed_dim=64, depth=4, img_size=32), abs=0.01)


def test_validate_py_on_an_image_folder_with_our_checkpoint(tmp_path):
    import timm

    from ssm_plugins.data.imagenet_digits import imagenet_digits

    data = imagenet_digits(tmp_path / "data") / "train"
    torch.manual_seed(0)
    model = timm.create_model("vim2_t", num_classes=10, img_size=32, embed_dim=64, depth=4)
    checkpoint = tmp_path / "vim2_t.pth"
    torch.save({"state_dict": model.state_dict()}, checkpoint)  # as timm's train.py saves one
    results = tmp_path / "val.json"
    _run("-m", "ssm_plugins", "validate.py", str(data), "--model", "vim2_t", "--model-kwargs", *KWARGS,
         "--img-size", "32", "--num-classes", "10", "--checkpoint", str(checkpoint), "--device", "cpu", "-b", "50",
         "-j", "0", "--results-file", str(results), "--results-format", "json")
    result = json.loads(results.read_text())
    assert result["model"] == "vim2_t" and 0 <= result["top1"] <= 100
    assert result["param_count"] == pytest.approx(_param_millions(num_classes=10, embed_dim=64, depth=4, img_size=32),
                                                  abs=0.01)


def test_onnx_export_py_dynamo_matches_pytorch_in_onnxruntime(tmp_path):
    """onnx_export.py has no --model-kwargs, so it exports a registered model at its own size: the 2-D SSM ViT of
    the main job (32 px), whose ops (the 2-D SSM kernel and FFT convolution) the dynamo exporter must translate."""
    onnxruntime = pytest.importorskip("onnxruntime")
    import timm

    name = "vit_cifar_patch4_32_ssm2d"
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).eval()
    checkpoint = tmp_path / f"{name}.pth"
    torch.save(model.state_dict(), checkpoint)
    out = tmp_path / f"{name}.onnx"
    _run("-m", "ssm_plugins", "onnx_export.py", str(out), "--model", name, "--num-classes", "10",
         "--checkpoint", str(checkpoint), "--dynamo", "--check-forward")
    x = torch.randn(1, 3, 32, 32)
    session = onnxruntime.InferenceSession(str(out))
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    assert abs(got - want).max() <= 1e-4 * max(1.0, abs(want).max())
