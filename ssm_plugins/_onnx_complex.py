"""ONNX functions for complex-valued ATen ops that onnxscript's torchlib has no complex overload of, on its
representation of a complex tensor: a real one with a trailing (re, im) dimension. Importing this module registers
them (``ssm_plugins._onnx`` does, on the first ONNX export); a torchlib with its own overload keeps it."""
from onnxscript.function_libs.torch_lib.registration import torch_op
from onnxscript.onnx_opset import opset18 as op
from onnxscript.onnx_types import INT64


@torch_op("aten::exp", complex=True, trace_only=True)
def ssm_plugins_complex_exp(self):
    """exp(a + ib) = e^a (cos b + i sin b)"""
    re, im = op.Slice(self, [0], [1], [-1]), op.Slice(self, [1], [2], [-1])
    magnitude = op.Exp(re)
    return op.Concat(op.Mul(magnitude, op.Cos(im)), op.Mul(magnitude, op.Sin(im)), axis=-1)


@torch_op("aten::new_zeros", complex=True, trace_only=True)
def ssm_plugins_complex_new_zeros(self, size: INT64, dtype: int = -1, layout: str = "", device: str = "",
                                  pin_memory: bool = False):
    """Zeros of ``size`` (a list of ints and symbolic sizes, or a shape tensor) in self's dtype."""
    if isinstance(size, (list, tuple)):
        size = op.Concat(*[op.Constant(value_ints=[d]) if isinstance(d, int) else op.Reshape(d, [-1])
                           for d in size], axis=0) if size else op.Constant(value_ints=[])
    return op.CastLike(op.ConstantOfShape(op.Concat(size, op.Constant(value_ints=[2]), axis=0)), self)


@torch_op("aten::unsqueeze", complex=True, trace_only=True)
def ssm_plugins_complex_unsqueeze(self, dim: int):
    return op.Unsqueeze(self, [dim - 1 if dim < 0 else dim])  # dim -1 comes before (re, im)
