"""mmengine's FLOP counter (``get_model_complexity_info``, the counter of MMDetection's ``get_flops.py``) counts our ops.

mmengine traces the model with ``torch.jit.trace`` and counts each graph node by a handle of its op name. It has
none for ``ssm_plugins::*`` or torch's FFT ops and would skip them ("Unsupported operator ..."), leaving a 2-D SSM
or ViM2 model with its linear layers only. Every op of ours registers a FLOP formula with torch's
``torch.utils.flop_counter`` (``ssm_plugins.ops``); the handles here evaluate those same formulas on meta tensors of
the traced shapes, so both counters agree. mmengine counts a multiply-add as one FLOP (fvcore's convention) where
torch counts two: the handles halve torch's count.

Importing ``ssm_plugins.openmmlab`` (any of our configs' ``custom_imports``) installs them.
"""
from __future__ import annotations

import torch
from torch.utils.flop_counter import flop_registry

__all__ = ["install", "jit_flop_handle"]

# torch's FFT ops, as a trace records them (FlopCounterMode sees their decompositions _fft_r2c / _fft_c2r / _fft_c2c,
# whose formulas are ssm_plugins/ops/_flops.py): name -> (kind, default dims); kind r2c counts on the real input,
# c2r on the real output, c2c on the output
_ATEN_FFT = {"fft_rfft": ("r2c", (-1,)), "fft_irfft": ("c2r", (-1,)), "fft_fft": ("c2c", (-1,)),
             "fft_ifft": ("c2c", (-1,)), "fft_rfft2": ("r2c", (-2, -1)), "fft_irfft2": ("c2r", (-2, -1)),
             "fft_fft2": ("c2c", (-2, -1)), "fft_ifft2": ("c2c", (-2, -1)), "fft_rfftn": ("r2c", None),
             "fft_irfftn": ("c2r", None), "fft_fftn": ("c2c", None), "fft_ifftn": ("c2c", None)}

def _constant(value):
    """The Python value of a traced non-tensor input: a constant, a list of them, or a size read off a tensor
    (``aten::Int`` of ``prim::NumToTensor`` of ``aten::size``), which the trace recorded with its example value."""
    ivalue = value.toIValue()
    if ivalue is not None or value.node().kind() == "prim::Constant":
        return ivalue
    node = value.node()
    if node.kind() == "prim::ListConstruct":
        return [_constant(v) for v in node.inputs()]
    if node.kind() in ("aten::Int", "aten::Float", "prim::NumToTensor", "aten::ScalarImplicit"):
        return _constant(next(node.inputs()))
    if node.kind() == "aten::size":
        tensor, dim = node.inputs()
        return tensor.type().sizes()[_constant(dim)]
    raise ValueError(f"cannot read the traced value of {value.debugName()} ({node.kind()}) for a FLOP count")


def _example(value):
    """A meta tensor of a traced tensor input's shape and dtype, else the input's Python value."""
    kind = value.type()
    if isinstance(kind, torch._C.TensorType):
        sizes, dtype = kind.sizes(), kind.dtype()
        if sizes is None or dtype is None:
            raise ValueError(f"the trace has no shape or dtype for {value.debugName()}: cannot count its FLOPs")
        return torch.empty(sizes, dtype=dtype, device="meta")
    return _constant(value)  # None for an absent optional tensor


def jit_flop_handle(op: torch._ops.OpOverload):
    """An mmengine FLOP handle (``handle(inputs, outputs) -> int``) for ``op``: torch's registered formula for it,
    halved (multiply-adds)."""
    formula = flop_registry[op.overloadpacket]
    schema = op._schema

    def handle(inputs, outputs) -> int:
        args, kwargs = [], {}
        for argument, value in zip(schema.arguments, inputs):
            if argument.kwarg_only:
                kwargs[argument.name] = _example(value)
            else:
                args.append(_example(value))
        outs = [_example(v) for v in outputs]
        return int(formula(*args, **kwargs, out_val=outs[0] if len(outs) == 1 else tuple(outs))) // 2

    return handle


def _fft_handle(kind: str, default_dim):
    """An mmengine FLOP handle for one of torch's FFT ops (``_ATEN_FFT``), counted as ``ops._flops.fft_flops``."""
    from ..ops._flops import fft_flops

    def handle(inputs, outputs) -> int:
        size, dim = _constant(inputs[1]), _constant(inputs[2])  # (n or s, dim) in every torch.fft signature
        out_shape = outputs[0].type().sizes()
        if dim is None:  # the 2-dim forms: their last two; the n-dim forms: the last len(s) dims, or every dim
            dim = default_dim if default_dim is not None else \
                tuple(range(-len(size), 0)) if size is not None else tuple(range(len(out_shape)))
        dim = (dim,) if isinstance(dim, int) else tuple(dim)
        if kind == "r2c":  # the real input, at the transform lengths when n / s pads or cuts it
            shape = list(inputs[0].type().sizes())
            for d, n in zip(dim, [size] if isinstance(size, int) else (size or ())):
                shape[d] = n if n not in (None, -1) else shape[d]
        else:
            shape = out_shape
        return fft_flops(shape, dim, real=kind != "c2c") // 2

    return handle


def _handles() -> dict:
    """Op name as the trace writes it (``ssm_plugins::selective_scan_fwd``) -> handle: every op of ours with a
    registered formula, and torch's FFT ops."""
    handles = {f"aten::{name}": _fft_handle(*spec) for name, spec in _ATEN_FFT.items()}
    for name in dir(torch.ops.ssm_plugins):
        packet = getattr(torch.ops.ssm_plugins, name)
        if isinstance(packet, torch._ops.OpOverloadPacket) and packet in flop_registry:
            handles[f"ssm_plugins::{name}"] = jit_flop_handle(packet.default)
    return handles


def install() -> None:
    """Adds the handles to mmengine's default FLOP handles (``FlopAnalyzer`` copies them when it is built)."""
    import ssm_plugins.ops  # noqa: F401  (registers our ops and their formulas)
    from mmengine.analysis import complexity_analysis

    complexity_analysis._DEFAULT_SUPPORTED_FLOP_OPS.update(_handles())
