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


def hparams_blocks(folder: Path, names, key: str = "block") -> dict:
    """``{name: value of key}`` of a recipe's hparams files, after checking that they differ in nothing else
    (comments, ``model_name`` and ``output_folder`` aside)."""
    texts = {name: (folder / name).read_text().splitlines() for name in names}
    skip = ("#", "model_name:", f"{key}:", "output_folder:")
    bodies = [[line for line in lines if not line.startswith(skip)] for lines in texts.values()]
    assert all(body == bodies[0] for body in bodies), "the hparams files differ in more than their block"
    return {name: next(line for line in lines if line.startswith(f"{key}:")).split("#")[0].split(":", 1)[1].strip()
            for name, lines in texts.items()}
