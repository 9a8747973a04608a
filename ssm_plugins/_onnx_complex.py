"""ONNX functions for complex-valued ATen ops that onnxscript's torchlib has no complex overload of, on its
representation of a complex tensor: a real one with a trailing (re, im) dimension. Importing this module registers
them (``ssm_plugins._onnx`` does, on the first ONNX export); a torchlib with its own overload keeps it."""
import itertools
from typing import Optional, Sequence, Union

from onnxscript.function_libs.torch_lib.ops.core import aten_index
from onnxscript.function_libs.torch_lib.registration import torch_op
from onnxscript.function_libs.torch_lib.tensor_typing import TReal
from onnxscript.onnx_opset import opset18 as op
from onnxscript.onnx_types import BOOL, INT64, TensorType


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


@torch_op(("aten::index.Tensor", "aten::_unsafe_index.Tensor"), complex=True, trace_only=True)
def ssm_plugins_complex_index(self: TensorType, indices: Sequence[Optional[Union[INT64, BOOL]]]):
    return aten_index(self, indices)  # indices never reach the trailing (re, im) dimension


@torch_op("aten::einsum", complex=True, trace_only=True)
def ssm_plugins_complex_einsum(equation: str, tensors: Sequence[TReal], path: Optional[int] = None):
    """The sum over each operand's real or imaginary part (real operands: their only part) of the real einsums,
    each times i^(number of imaginary parts). An operand is complex when it has one more dimension than its term."""
    terms = equation.replace(" ", "").split("->")[0].split(",")
    parts = []
    for term, tensor in zip(terms, tensors):
        if "..." in term or len(tensor.shape) == len(term) + 1:
            parts.append([op.Squeeze(op.Slice(tensor, [k], [k + 1], [-1]), [-1]) for k in (0, 1)])
        else:
            parts.append([tensor])
    sums = [None, None]  # real, imaginary
    for choice in itertools.product(*[range(len(p)) for p in parts]):
        value = op.Einsum(*[p[c] for p, c in zip(parts, choice)], equation=equation)
        power = sum(choice) % 4  # i^power: 1, i, -1, -i
        value = op.Neg(value) if power >= 2 else value
        sums[power % 2] = value if sums[power % 2] is None else op.Add(sums[power % 2], value)
    return op.Concat(*[op.Unsqueeze(v, [-1]) for v in sums], axis=-1)
