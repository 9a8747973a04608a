"""Mixed precision (issue 13): every registered model, forward + backward under ``torch.autocast('cpu', bfloat16)``.

Per model (the reduced sizes of test_contract's FAMILIES, same classes and code paths): the logits and every
parameter gradient are finite, and both stay within a stated relative error of the float32 run (same weights,
same input, eval mode so dropout and drop path are off): ||y_bf16 - y_fp32|| / ||y_fp32|| <= OUT_BOUND and, over all parameters,
||g_bf16 - g_fp32|| / ||g_fp32|| <= GRAD_BOUND. bfloat16 keeps 8 mantissa bits (relative rounding 2^-9 = 0.2 %
per operation); the kernels keep float32 state, so the error is the matmuls' and norms'. Measured 2026-11-25 (CPU,
reduced sizes, random init; ``python tests/models/test_autocast.py`` prints the per-model table): 0.2-2.7 % on the
logits and 0.1-5.4 % on the gradients for every model except the ViQS token mixer without Switch of Scans or conv
branch (viqs_t_nosos 8.8 % / 18 %, viqs_t_noconv 4.4 % / 11 %; with VisionTokenMixer in float32 it is 0.8 % /
2.1 %, spread over its projections, not one op), hence the bounds.
"""
import re

import pytest
import torch

from test_contract import IMAGE_MODELS, _input, family, sweep

OUT_BOUND = 0.10
GRAD_BOUND = 0.20

# families whose bf16 path is still being fixed by their owners (issue 13): {regex: reason}, xfailed
_PENDING = {}




def forward_backward(model, x, autocast=False, call=None):
    """Logits and parameter gradients (float32, on the CPU) of ``model`` on x's device, run through ``call`` (e.g.
    its compiled form) if given, under bf16 autocast if ``autocast``."""
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        out = (model if call is None else call)(x)  # not `call or model`: a compiled module has no len()
    out.float().logsumexp(-1).sum().backward()
    grads = {n: p.grad.detach().float().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach().float().cpu(), grads


def relative(got, want):
    """(output error, gradient error over all parameters) of two forward_backward results, ||got - want|| / ||want||."""
    (out, grads), (ref_out, ref_grads) = got, want
    assert grads.keys() == ref_grads.keys() and len(ref_grads) > 0
    diff = torch.cat([(grads[n] - ref_grads[n]).flatten() for n in ref_grads])
    ref = torch.cat([ref_grads[n].flatten() for n in ref_grads])
    return ((out - ref_out).norm() / ref_out.norm()).item(), (diff.norm() / ref.norm()).item()


def relative_errors(name):
    """(output relative error, gradient relative error) of bf16 autocast vs float32."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name, **family(name).small).eval()  # deterministic: no dropout / drop path
    x = _input(model, family(name).sizes[0], batch=4)
    ref = forward_backward(model, x)
    out, grads = low = forward_backward(model, x, autocast=True)
    assert torch.isfinite(out).all(), f'{name}: non-finite bf16 output'
    for n, g in grads.items():
        assert torch.isfinite(g).all(), f'{name}: non-finite bf16 gradient of {n}'
    return relative(low, ref)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize('name', sweep(IMAGE_MODELS))
def test_bf16_autocast_forward_backward(name):
    for pattern, reason in _PENDING.items():
        if re.search(pattern, name):
            pytest.xfail(reason)
    out_err, grad_err = relative_errors(name)
    assert out_err <= OUT_BOUND, f'{name}: bf16 output relative error {out_err:.3g} > {OUT_BOUND}'
    assert grad_err <= GRAD_BOUND, f'{name}: bf16 gradient relative error {grad_err:.3g} > {GRAD_BOUND}'


if __name__ == '__main__':  # the measured table
    torch.set_num_threads(1)
    print('| model | output rel. error | gradient rel. error |\n|---|---|---|')
    for model_name in IMAGE_MODELS:
        try:
            o, g = relative_errors(model_name)
            print(f'| {model_name} | {o:.2e} | {g:.2e} |', flush=True)
        except Exception as exc:  # noqa: BLE001  (the table records failures too)
            print(f'| {model_name} | FAIL {type(exc).__name__}: {str(exc)[:80]} | |', flush=True)
