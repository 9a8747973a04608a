"""Shared by the OpenMMLab config tests: where the configs are, and how to build one without weights."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MMDET_CONFIGS = sorted((REPO / "configs_mmdet").glob("*/*.py"))
MMSEG_CONFIGS = sorted((REPO / "configs_mmseg").glob("*/*.py"))
MMPRETRAIN_CONFIGS = sorted(p for p in (REPO / "configs_mmpretrain").glob("**/*.py") if "_base_" not in p.parts)
TOOLBOX = {"configs_mmdet": "mmdet", "configs_mmseg": "mmseg", "configs_mmpretrain": "mmpretrain"}


def config_id(path: Path) -> str:
    return path.stem


def toolbox_of(path: Path) -> str:
    (toolbox,) = [TOOLBOX[part] for part in path.relative_to(REPO).parts[:1] if part in TOOLBOX]
    return toolbox


def config_strings(node, path=""):
    """(dotted key, value) of every string in a config dict (to find URLs)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from config_strings(value, f"{path}.{key}")
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from config_strings(value, f"{path}.{index}")
    elif isinstance(node, str):
        yield path, node


def load(path: Path):
    """The config as ``mim train`` reads it (custom_imports imported)."""
    from mmengine.config import Config

    return Config.fromfile(str(path))


def build(path: Path):
    """(config, model in eval mode) from the toolbox's registry; the backbone starts from scratch."""
    from mmengine.registry import init_default_scope

    cfg = load(path)
    cfg.model.backbone.init_cfg = None  # the paper configs expect a local ImageNet checkpoint
    init_default_scope(cfg.default_scope)
    if cfg.default_scope == "mmdet":
        from mmdet.registry import MODELS
    else:
        from mmseg.registry import MODELS
    model = MODELS.build(cfg.model)
    model.init_weights()
    return cfg, model.eval()
