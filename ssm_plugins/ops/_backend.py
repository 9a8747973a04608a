"""Which implementation runs an op: the compiled kernel (CPU or CUDA) or the pure-PyTorch reference.

The compiled kernels are used whenever the extension is importable and has a kernel for the input's
device. The reference runs only when the extension is missing (one warning, naming why) or when forced
with ``SSM_PLUGINS_BACKEND=reference`` (for debugging). ``SSM_PLUGINS_QS`` picks qs_mix's algorithm for
scalar A (``qs_algorithm``): the chunked matmul form on CUDA (auto), or the scan kernels everywhere.
"""
from __future__ import annotations

import contextlib
import os
import warnings

import torch

_BACKEND_ENV = "SSM_PLUGINS_BACKEND"
_CHOICES = ("auto", "reference")
_QS_ENV = "SSM_PLUGINS_QS"
_QS_CHOICES = ("auto", "scan", "chunked")

try:
    from ssm_plugins import _C  # noqa: F401  (importing registers torch.ops.ssm_plugins.*)

    _EXTENSION_ERROR: str | None = None
except ImportError as exc:  # a source checkout without a build, or a broken build
    _EXTENSION_ERROR = f"{type(exc).__name__}: {exc}"

_warned = False


def _in_torchscript_onnx_export() -> bool:
    """True while ``torch.onnx.export(..., dynamo=False)`` traces the model: its TorchScript exporter has no
    translation for our ops, so the trace records the references' aten ops instead (the dynamo exporter decomposes
    the ops itself: ssm_plugins._onnx). mmengine's FLOP counter traces too, but not inside an ONNX export."""
    return torch.jit.is_tracing() and torch.onnx.is_in_onnx_export()


def reference_forced() -> bool:
    """True when ``SSM_PLUGINS_BACKEND=reference`` asks for the pure-PyTorch references."""
    choice = os.environ.get(_BACKEND_ENV, "auto").lower()
    if choice not in _CHOICES:
        raise ValueError(f"{_BACKEND_ENV} must be one of {_CHOICES}, got {choice!r}")
    return choice == "reference"


def qs_algorithm() -> str:
    """``SSM_PLUGINS_QS``: 'auto' (the chunked form for scalar A on CUDA, ops.qs_mix), 'scan' (the scan kernels
    everywhere) or 'chunked' (the chunked form wherever A is scalar)."""
    choice = os.environ.get(_QS_ENV, "auto").lower()
    if choice not in _QS_CHOICES:
        raise ValueError(f"{_QS_ENV} must be one of {_QS_CHOICES}, got {choice!r}")
    return choice


def _warn_missing_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "ssm_plugins: the compiled extension ssm_plugins._C is not available "
            f"({_EXTENSION_ERROR}); using the slow pure-PyTorch reference kernels. "
            "Rebuild with `pip install --no-build-isolation -e .` (see README).",
            RuntimeWarning,
            stacklevel=3,
        )


def _compiled_kernels() -> frozenset:
    """(op, device type) pairs with a compiled kernel; fixed once the extension has loaded."""
    if _EXTENSION_ERROR is not None:
        return frozenset()
    names = [n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("ssm_plugins::")]
    return frozenset((op, device) for op in names for device, key in (("cpu", "CPU"), ("cuda", "CUDA"))
                     if torch._C._dispatch_has_kernel_for_dispatch_key(f"ssm_plugins::{op}", key))


# A plain set lookup (no dispatcher query per call), which torch.compile traces with fullgraph=True.
_COMPILED = _compiled_kernels()


def has_kernel(op: str, device_type: str) -> bool:
    """True if ``torch.ops.ssm_plugins.<op>`` has a compiled kernel for ``device_type`` ('cpu'/'cuda')."""
    return (op, device_type) in _COMPILED


def use_kernel(op: str, tensor: torch.Tensor) -> bool:
    """Decide, per call, whether ``op`` runs compiled for ``tensor``'s device (else the reference)."""
    if reference_forced() or _in_torchscript_onnx_export():
        return False
    if _EXTENSION_ERROR is not None:
        _warn_missing_once()
        return False
    if has_kernel(op, tensor.device.type):
        return True
    _warn_no_kernel_once(op, tensor.device.type)
    return False


_warned_ops: set = set()


def _warn_no_kernel_once(op: str, device_type: str) -> None:
    # The extension loaded but lacks this kernel: a build older than the Python code, or one made
    # without CUDA. Say so once instead of silently running the slow reference.
    if (op, device_type) in _warned_ops:
        return
    _warned_ops.add((op, device_type))
    warnings.warn(
        f"ssm_plugins: the compiled extension has no {device_type} kernel for {op!r} (a stale build, or one "
        "without CUDA); using the slow pure-PyTorch reference. Rebuild with "
        "`pip install --no-build-isolation -e .` (see README).",
        RuntimeWarning,
        stacklevel=3,
    )


def backend_info() -> dict:
    """What is available: extension status, compiled ops and the devices each has kernels for."""
    ops: dict = {}
    for op, device in sorted(_COMPILED):
        ops.setdefault(op, []).append(device)
    return {
        "extension": _EXTENSION_ERROR is None,
        "extension_error": _EXTENSION_ERROR,
        "forced_reference": reference_forced(),
        "qs_algorithm": qs_algorithm(),  # SSM_PLUGINS_QS: qs_mix for scalar A (auto: chunked form on CUDA)
        "ops": ops,
        "cuda_device": torch.cuda.is_available(),
    }


def no_autocast(device_type: str):
    """A region that runs in the inputs' own precision (the kernels' fp32 state): autocast disabled where the
    device has autocast; on the meta device (timm's low-memory builds, shape checks) a no-op, since
    ``torch.autocast('meta')`` raises."""
    if device_type == "meta":  # a string test, not torch.amp.is_autocast_available: dynamo traces it
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def normal_tensors():
    """A region whose tensors autograd may save: inference mode off for eager code. A cache filled under
    ``torch.inference_mode`` with inference tensors would break every later forward that autograd records (they
    cannot be saved for backward); under torch.compile a no-op (the trace keeps no tensor)."""
    if not torch.compiler.is_compiling() and torch.is_inference_mode_enabled():
        return torch.inference_mode(False)
    return contextlib.nullcontext()
