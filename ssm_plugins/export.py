"""Deploying the models outside PyTorch eager: ``torch.export`` and ONNX (``torch.onnx.export(..., dynamo=True)``).

    from ssm_plugins.export import export_program, export_onnx
    program = export_program(model.eval(), torch.randn(1, 3, 224, 224))        # batch size dynamic
    onnx_program = export_onnx(model.eval(), torch.randn(1, 3, 224, 224), "model.onnx")
    # onnxruntime.InferenceSession("model.onnx").run(None, {"x": image.numpy()})

``torch.export`` keeps our custom ops (``torch.ops.ssm_plugins.*``, with their fake kernels) in the graph, so an
ExportedProgram runs our C++/CUDA kernels wherever ``ssm_plugins`` is imported (AOTInductor included). ONNX has no
such ops: ``export_onnx`` first rewrites each forward op into standard aten ops with ``decompositions()`` (the
package's pure-PyTorch oracles, ``ssm_plugins.ops.reference``, which spell every op with aten ops: the scans'
recurrences unrolled over the sequence, FFT convolutions as rfft/irfft, the eSSM kernel in real arithmetic), then
lets torch's ONNX exporter translate those. The decompositions are used only during export; the exported graph
runs in onnxruntime and matches PyTorch within the tolerances ``tests/test_export.py`` states.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from .ops import reference

__all__ = ["decompositions", "export_program", "export_onnx"]


def _selective_scan_fwd(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    return reference.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state=True)


def _qs_mix_fwd(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias=None, dt_bias_rev=None,
                dt_softplus=False, hydra_shift=False):
    return reference.qs_mix(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev, dt_softplus,
                            "hydra" if hydra_shift else "exact")


def _ssm2d_kernel_fwd(A, B, C, height, width):
    return reference.ssm2d_kernel(A, B, C, height, width)


def _fft_conv2d(x, kernel, origin_h, origin_w):
    return reference.fft_conv2d(x, kernel, (origin_h, origin_w))


def _essm_kernel(g_re, g_im, z_re, z_im, L, n_fft, bidirectional):
    """k_j = Re(g e^{jz}) = e^{j Re z} (Re g cos(j Im z) - Im g sin(j Im z)), packed as the op does (real
    arithmetic: ONNX has no complex tensors)."""
    lags = torch.arange(L, dtype=g_re.dtype, device=g_re.device)
    decay = torch.exp(z_re[..., None] * lags)
    angle = z_im[..., None] * lags
    k = decay * (g_re[..., None] * torch.cos(angle) - g_im[..., None] * torch.sin(angle))
    packed = torch.nn.functional.pad(k, (0, n_fft - L))
    if bidirectional:
        packed = packed + torch.nn.functional.pad(torch.flip(k, (-1,)), (n_fft - L, 0))
    return packed


def _myo_solve_fwd(u, b, parent, b_index=None, skew=False):
    return reference.myo_solve(u, b, parent, b_index, skew)


_FORWARD_OPS = {
    "selective_scan_fwd": _selective_scan_fwd,
    "qs_mix_fwd": _qs_mix_fwd,
    "ssm2d_kernel_fwd": _ssm2d_kernel_fwd,
    "fft_conv2d": _fft_conv2d,
    "essm_kernel": _essm_kernel,
    "myo_solve_fwd": _myo_solve_fwd,
}


def decompositions() -> Dict[torch._ops.OpOverload, Callable]:
    """{torch.ops.ssm_plugins.<forward op>.default: its composition of aten ops}, for
    ``ExportedProgram.run_decompositions`` (every forward op the extension registers; a missing one is skipped)."""
    table = {}
    for name, fn in _FORWARD_OPS.items():
        packet = getattr(torch.ops.ssm_plugins, name, None)
        if packet is not None:
            table[packet.default] = fn
    return table


def _dynamic_batch(example: torch.Tensor, dynamic_batch: bool):
    if not dynamic_batch:
        return None
    return ({0: torch.export.Dim("batch", min=1, max=1024)},)


def export_program(model: torch.nn.Module, example: torch.Tensor, dynamic_batch: bool = True,
                   decompose: bool = False) -> torch.export.ExportedProgram:
    """``torch.export.export`` of an image model (call ``model.eval()`` first) on ``example`` (B, C, H, W), the
    batch dimension dynamic. ``decompose``: replace our custom ops by standard aten ops (``decompositions()``)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example, torch.Tensor) or example.dim() != 4:
        got = tuple(example.shape) if isinstance(example, torch.Tensor) else type(example).__name__
        raise ValueError(f"example must be a (batch, channels, H, W) tensor, got {got}")
    # a batch of 1 would be specialised by torch.export (0/1 specialisation): trace at batch 2
    example = example[:1].expand(2, *example.shape[1:]).contiguous() if example.shape[0] == 1 else example
    program = torch.export.export(model, (example,), dynamic_shapes=_dynamic_batch(example, dynamic_batch))
    return program.run_decompositions(decompositions()) if decompose else program


def export_onnx(model: torch.nn.Module, example: torch.Tensor, path: Optional[str] = None,
                dynamic_batch: bool = True, opset_version: int = 18, optimize: bool = True):
    """ONNX export through torch's dynamo exporter, our custom ops decomposed first (``decompositions()``).
    Returns the ``torch.onnx.ONNXProgram``; saved to ``path`` when given. Input name 'x', output 'logits'."""
    program = export_program(model, example, dynamic_batch, decompose=True)
    onnx_program = torch.onnx.export(program, input_names=["x"], output_names=["logits"], dynamo=True,
                                     opset_version=opset_version, optimize=optimize, verbose=False)
    if path is not None:
        onnx_program.save(str(path))
    return onnx_program
