"""benchmarks/gpu.py and gpu_profile.py: on a machine without a CUDA device they say so and exit 0; with one, quick
runs produce the op and model tables and the profile's sections (marked gpu: skipped without a device)."""
import pytest
import torch

from benchmarks import gpu, gpu_profile


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path; this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_0(capsys):
    assert gpu.main([]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "nothing measured" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path; this machine has a GPU")
def test_profile_without_a_gpu_says_so_and_exits_0(capsys):
    assert gpu_profile.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.slow
def test_profile_on_a_gpu(capsys):
    assert gpu_profile.main(["--models", "vim2_t", "--batch", "8", "--rows", "5"]) == 0
    out = capsys.readouterr().out
    for section in ("synchronising calls", "forward ms per part", "by GPU time", "selective scan, ms"):
        assert section in out


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
@pytest.mark.exhaustive  # make test: the op rows above run the same script
def test_model_rows_run_on_the_cpu(capsys):
    assert gpu.main(["--device", "cpu", "--only", "models", "--quick", "--batch", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert "train peak GiB" in lines[0] and any("deit_small_patch16_224" in line for line in lines[2:])
    assert {line.count("|") for line in lines} == {len(gpu.MODEL_COLUMNS) + 1}  # every row fills the header


@pytest.mark.slow
@pytest.mark.exhaustive
def test_compiled_model_rows_run_on_the_cpu(monkeypatch):
    """--models / --compile: the compiled row sits beside the eager one, ratios against the peer run the same way
    (aot_eager stands in for inductor, whose C++ build of DeiT-S takes minutes on two cores; DeiT-Ti as its own peer
    stands in for DeiT-S, whose full-size CPU steps took 10 of make test's minutes)."""
    monkeypatch.setattr(gpu, "DEVICE", "cpu")
    monkeypatch.setattr(gpu, "PEERS", ["deit_tiny_patch16_224"])
    rows = gpu.model_rows(2, False, ["deit_tiny_patch16_224"], "default", compile_backend="aot_eager")
    assert [r[0] for r in rows] == ["deit_tiny_patch16_224", "deit_tiny_patch16_224 (compiled, default)"]
    assert all(r[1] > 0 and r[2] > 0 and r[3] == "-" for r in rows)  # no GPU memory peak on the CPU
    assert rows[0][4] == rows[1][4] == "1.00 / 1.00"  # each against the peer run its own way
    with pytest.raises(ValueError, match="--models: not registered"):
        gpu.model_rows(2, False, ["no_such_model"])
