"""timm adapter: register ssm_plugins' models with timm as soon as timm is imported.

timm has no entry-point discovery, so our ``@register_model`` functions must run in the user's process.
Importing timm (with the torchvision it pulls in) costs about 1.5 s of CPU, which ``import ssm_plugins``
should not pay for users who only want the kernels or layers. So: if timm is already imported, register
now; otherwise register right after the program's first ``import timm``. Either way
``import ssm_plugins; import timm; timm.create_model('<ours>')`` works, in any import order.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys


def _register() -> None:
    importlib.import_module("ssm_plugins.models")


class RegisterAfterExec(importlib.abc.Loader):
    """Wraps timm's own loader: runs it, then registers our models."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register()

    def __getattr__(self, name):  # resource readers and the like stay timm's
        return getattr(self._loader, name)


class _TimmImportHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "timm":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps the lookup below from finding this hook again
        spec = importlib.util.find_spec("timm")
        if spec is not None and spec.loader is not None:
            spec.loader = RegisterAfterExec(spec.loader)
        return spec


def install() -> None:
    if "timm" in sys.modules:
        _register()
    elif not any(isinstance(f, _TimmImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TimmImportHook())
