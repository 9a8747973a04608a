"""``torch.onnx.export(model, args, f, dynamo=True)`` on our models with no flag: what ``import ssm_plugins`` registers.

torch's dynamo exporter (torch.onnx._internal.exporter) decomposes every op that has no ONNX translation with
the aten decompositions it finds in ``torch._decomp.decomposition_table``, then translates the rest with
onnxscript's ATen library (torchlib). So the exporter needs two things from us:

1. each forward custom op (``torch.ops.ssm_plugins.*``) in ``torch._decomp.decomposition_table``, as
   ``export.decompositions()`` (the same pure-PyTorch compositions ``export.export_onnx`` uses). The same op
   goes into ``torch._decomp.meta_table`` too: FakeTensor prefers a decomposition-table entry to the op's
   fake kernel on symbolic shapes unless the op has a meta entry, and our ops keep their fake kernels;
2. ONNX functions for the complex-valued ATen ops torchlib has no complex overload of (``exp``, ``new_zeros``,
   ``unsqueeze``, ``index``, ``einsum``): the eSSM discretisation, the S4ND kernel and the Myo edge weights are
   complex arithmetic on the weights, which the exporter holds as real pairs (a trailing dimension of 2,
   torchlib's convention) and its optimizer folds into constants (``ssm_plugins._onnx_complex``).

Both are registered when torchlib's op registry loads, i.e. on the first ONNX export, so ``import ssm_plugins``
imports neither onnx nor onnxscript (``install``: at once if torchlib is already loaded, else on its import).
The Myo solve needs no entry: under ``torch.export`` it is traced as aten ops (``ops.myo.myo_solve``).
"""
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from .timm import RegisterAfterExec

_TORCHLIB = "onnxscript.function_libs.torch_lib.ops"  # importing it fills onnxscript's ATen registry
_registered = False


def register() -> None:
    """Make the decompositions and complex ONNX functions visible to torch.onnx's exporter (idempotent)."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        _register_decompositions()
        _register_complex_functions()
    except Exception as exc:  # noqa: BLE001  (torch.onnx must keep working for other models)
        warnings.warn(f"ssm_plugins: torch.onnx.export cannot translate our ops ({type(exc).__name__}: {exc})",
                      RuntimeWarning, stacklevel=2)


def _register_decompositions() -> None:
    from torch._decomp import global_decomposition_table

    from .export import decompositions

    for op, fn in decompositions().items():
        global_decomposition_table["post_autograd"].setdefault(op, fn)
        global_decomposition_table["meta"].setdefault(op, fn)  # FakeTensor keeps the op's fake kernel


def _register_complex_functions() -> None:
    with warnings.catch_warnings():  # a torchlib that has its own complex overload keeps it (and warns)
        warnings.simplefilter("ignore")
        importlib.import_module("._onnx_complex", __package__)


class _RegisterAfterTorchlib(RegisterAfterExec):
    """Wraps torchlib's loader: runs it, then registers ours (the timm hook's loader, another callback)."""

    def exec_module(self, module):
        self._loader.exec_module(module)
        register()


class _TorchlibImportHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TORCHLIB:
            return None
        sys.meta_path.remove(self)  # one shot
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterTorchlib(spec.loader)
        return spec


def install() -> None:
    if _TORCHLIB in sys.modules:
        register()
    elif not any(isinstance(f, _TorchlibImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchlibImportHook())
