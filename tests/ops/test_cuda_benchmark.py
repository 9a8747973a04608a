"""benchmarks/gpu.py: on a machine without a CUDA device it says so and exits 0; with one, a quick run
produces the op and model tables (marked gpu: skipped without a device)."""
import pytest
import torch

from benchmarks import gpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path; this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_0(capsys):
    assert gpu.main([]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "nothing measured" in out


@pytest.mark.gpu
@pytest.mark.slow
def test_quick_run_on_a_gpu(capsys):
    assert gpu.main(["--quick", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    for op in ("selective_scan", "qs_mix", "ssm2d_kernel", "essm_conv", "myo_solve", "deit_small_patch16_224"):
        assert op in out


def test_op_cases_run_on_the_cpu(capsys):
    """Every op case of the GPU benchmark (quick sizes) runs through the public ops, compiled and reference, so
    the first GPU run does not stop on a wrong call."""
    assert gpu.main(["--device", "cpu", "--only", "ops", "--quick"]) == 0
    out = capsys.readouterr().out
    for op in ("selective_scan", "qs_mix", "ssm2d_kernel", "essm_conv", "myo_solve"):
        assert f"| {op}" in out


@pytest.mark.slow
def test_model_rows_run_on_the_cpu(capsys):
    assert gpu.main(["--device", "cpu", "--only", "models", "--quick", "--batch", "2"]) == 0
    assert "deit_small_patch16_224" in capsys.readouterr().out
