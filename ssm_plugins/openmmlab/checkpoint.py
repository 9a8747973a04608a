"""mmengine checkpoints under ``torch.load``'s default ``weights_only=True`` (torch >= 2.6): the few non-tensor
classes an mmengine Runner checkpoint pickles, allowlisted by :func:`allow_mmengine_checkpoints`."""
from __future__ import annotations

import inspect
import pickle

import numpy as np
import torch

__all__ = ["allow_mmengine_checkpoints"]


def _history_buffer_method(owner, name: str):
    """Stands in for ``getattr`` while unpickling (under the name ``builtins.getattr``): mmengine pickles the
    statistics methods its HistoryBuffers keep (``HistoryBuffer.mean`` ...) as ``getattr(HistoryBuffer, 'mean')``.
    Only public methods of HistoryBuffer are handed out, so the allowlist does not grow a general getattr."""
    from mmengine.logging.history_buffer import HistoryBuffer

    if owner is HistoryBuffer and isinstance(name, str) and not name.startswith("_") \
            and callable(inspect.getattr_static(HistoryBuffer, name, None)):
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(f"weights_only load: getattr({owner!r}, {name!r}) is not allowed (ssm_plugins "
                                 f"allows only HistoryBuffer methods, for mmengine checkpoints)")


def _mmengine_checkpoint_globals() -> list:
    """What an mmengine Runner checkpoint pickles besides tensors (found by saving one and reading it with
    ``torch.serialization.get_unsafe_globals_in_checkpoint``, then loading): the message hub's HistoryBuffers with
    their statistics methods, and the numpy arrays / scalars / dtypes they log."""
    import numpy.core.multiarray as multiarray  # the name numpy pickles under (numpy 2 keeps it as an alias)
    from mmengine.logging.history_buffer import HistoryBuffer

    dtype_classes = [type(np.dtype(t)) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                                 "uint32", "uint64", "float16", "float32", "float64")]
    # numpy 1 pickles these as numpy.core.multiarray.*, numpy 2 as numpy._core.multiarray.*: accept both names
    numpy_functions = [(f, f"numpy.{core}.multiarray.{f.__name__}")
                       for f in (multiarray._reconstruct, multiarray.scalar) for core in ("core", "_core")]
    return [HistoryBuffer, np.ndarray, np.dtype, *dtype_classes, *numpy_functions,
            (_history_buffer_method, "builtins.getattr")]


def allow_mmengine_checkpoints() -> None:
    """Let ``torch.load`` with its default ``weights_only=True`` (torch >= 2.6) load the checkpoints mmengine
    writes (``mim test``, ``resume``, ``load_from``). Only these classes are allowlisted; any other
    non-tensor object in a file is still refused, and ``weights_only`` itself is left alone."""
    torch.serialization.add_safe_globals(_mmengine_checkpoint_globals())
