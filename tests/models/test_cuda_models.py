"""Every registered image model on a CUDA device (marked gpu: skipped without one, never faked).

Per model, at test_contract's reduced sizes (same classes and code paths), eval mode so that dropout and drop path
are off and the function is the same on both devices:

* float32 on the GPU (TF32 off) equals float32 on the CPU, same weights and input: the logits and, over all
  parameters, the gradients within a relative error (||a - b|| / ||b||) of FP32_BOUND. The two runs differ in the
  order of float32 sums (cuBLAS/cuDNN/cuFFT against MKL/oneDNN/pocketfft, our CUDA kernels' block reductions
  against the CPU kernels' loops), nothing else.
* bf16 autocast on the GPU: the logits and every gradient finite, within test_autocast's bounds of the GPU's float32
  run (the bounds measured on the CPU for the same models).

Inductor on the GPU (Triton code generation) compiles the two mixer models whose ops have the largest CUDA kernels,
forward and backward equal to eager.
"""
import contextlib

import pytest
import timm
import torch

from benchmarks import gpu, gpu_profile
from test_autocast import GRAD_BOUND, OUT_BOUND, forward_backward, relative
from test_contract import IMAGE_MODELS, _input, family

pytestmark = pytest.mark.gpu

FP32_BOUND = 1e-4


@contextlib.contextmanager
def no_tf32():
    """True float32 matmuls and convolutions on the GPU (TF32 would round operands to 10 mantissa bits)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_cuda_float32_equals_cpu_and_bf16_autocast_is_finite(name):
    torch.manual_seed(0)
    model = timm.create_model(name, **family(name).small).eval()
    x = _input(model, family(name).sizes[0], batch=2)
    cpu = forward_backward(model, x)
    model.cuda()
    with no_tf32():
        gpu = forward_backward(model, x.cuda())
    out_err, grad_err = relative(gpu, cpu)
    assert out_err <= FP32_BOUND and grad_err <= FP32_BOUND, \
        f"{name}: CUDA float32 vs CPU: output {out_err:.2e}, gradients {grad_err:.2e} (bound {FP32_BOUND})"

    bf16 = forward_backward(model, x.cuda(), autocast=True)
    assert torch.isfinite(bf16[0]).all(), f"{name}: non-finite bf16 output on the GPU"
    bad = [n for n, g in bf16[1].items() if not torch.isfinite(g).all()]
    assert not bad, f"{name}: non-finite bf16 gradients on the GPU: {bad[:5]}"
    out_err, grad_err = relative(bf16, gpu)
    assert out_err <= OUT_BOUND and grad_err <= GRAD_BOUND, \
        f"{name}: CUDA bf16 autocast vs float32: output {out_err:.2e} (bound {OUT_BOUND}), gradients " \
        f"{grad_err:.2e} (bound {GRAD_BOUND})"


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_inductor_on_cuda_matches_eager(name):
    torch.manual_seed(0)
    model = timm.create_model(name, **family(name).small).eval().cuda()
    x = _input(model, family(name).sizes[0], batch=2).cuda()
    with no_tf32():
        eager = forward_backward(model, x)
        torch._dynamo.reset()
        compiled = forward_backward(model, x, call=torch.compile(model, fullgraph=True))
    out_err, grad_err = relative(compiled, eager)
    assert out_err <= FP32_BOUND and grad_err <= 10 * FP32_BOUND, \
        f"{name}: inductor (CUDA) vs eager: output {out_err:.2e}, gradients {grad_err:.2e}"


@pytest.mark.parametrize("name", ["vim2_t", "viqs_t"])
def test_training_step_makes_no_host_device_synchronisation(name):
    """After a first step (it fills Switch of Scans' per-device index caches), an AMP training step never waits for
    the GPU: the eager step's Python and launch time is as long as its GPU time, so a synchronisation empties the
    launch queue (vim2_t made three a step before the caches; test_vim2_models checks the copies on the meta
    device, this the whole step on a real one)."""
    torch.manual_seed(0)
    model = timm.create_model(name, **family(name).small).cuda().train()
    step, _ = gpu.train_step(model, 2, family(name).sizes[0])
    step()
    torch.cuda.synchronize()
    assert gpu_profile.sync_sites(step) == []  # (call site, count) of each synchronising call
