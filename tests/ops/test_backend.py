"""The dispatch between compiled kernels and references."""
import warnings

import pytest
import torch

from ssm_plugins.ops import backend_info, selective_scan


def _scan_inputs():
    g = torch.Generator().manual_seed(0)
    b, d, L, n = 2, 4, 9, 3
    u = torch.randn(b, d, L, generator=g, requires_grad=True)
    return u, -torch.rand(d, n, generator=g), torch.randn(b, n, L, generator=g), torch.randn(b, n, L, generator=g)


def test_ops_compile_with_fullgraph():
    # The backend choice is a trace-time constant, so dynamo traces the public op without a graph break.
    u, A, B, C = _scan_inputs()
    fn = lambda x: selective_scan(x, x.abs(), A, B, C, delta_softplus=True)  # noqa: E731
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    y = compiled(u)
    y.sum().backward()
    torch.testing.assert_close(y, fn(u))
    assert u.grad is not None and torch.isfinite(u.grad).all()


def test_unknown_backend_setting_is_an_error(monkeypatch):
    monkeypatch.setenv("SSM_PLUGINS_BACKEND", "fast")
    u, A, B, C = _scan_inputs()
    with pytest.raises(ValueError, match="SSM_PLUGINS_BACKEND"):
        selective_scan(u, u.abs(), A, B, C)


def test_backend_info_lists_every_compiled_op_on_cpu():
    ops = backend_info()["ops"]
    for op in ("selective_scan_fwd", "selective_scan_bwd", "qs_mix_fwd", "qs_mix_bwd", "ssm2d_kernel_fwd",
               "ssm2d_kernel_bwd", "essm_kernel", "essm_kernel_bwd", "myo_solve_fwd", "myo_solve_bwd"):
        assert "cpu" in ops.get(op, []), (op, ops)


def test_backend_info_says_which_qs_algorithm_runs(monkeypatch):
    monkeypatch.delenv("SSM_PLUGINS_QS", raising=False)
    assert backend_info()["qs_algorithm"] == "auto"
    monkeypatch.setenv("SSM_PLUGINS_QS", "Scan")
    assert backend_info()["qs_algorithm"] == "scan"


def test_a_stale_extension_warns_once_and_falls_back_to_the_reference(monkeypatch):
    # An extension built before an op existed loads fine but lacks its kernel: say so, don't stay silent.
    from ssm_plugins.ops import _backend

    monkeypatch.setattr(_backend, "_COMPILED", _backend._COMPILED - {("selective_scan_fwd", "cpu")})
    monkeypatch.setattr(_backend, "_warned_ops", set())
    u, A, B, C = _scan_inputs()
    with pytest.warns(RuntimeWarning, match="no cpu kernel for 'selective_scan_fwd'"):
        assert not _backend.use_kernel("selective_scan_fwd", u)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per op and device
        assert not _backend.use_kernel("selective_scan_fwd", u)
