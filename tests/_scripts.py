"""Scripts that are not modules of a package (a recipe's train.py, scripts/*.py) loaded for their tests."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` executed as a module named ``name`` (also put in ``sys.modules``: dataclasses and
    pickling look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
