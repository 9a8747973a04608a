"""Parameters of every configs_mmdet / configs_mmseg detector and segmentor vs the paper's #Param column.

    .venv/bin/python -m benchmarks.params_mm

Each model is built from its config through the toolbox registry, without weights (backbone init_cfg=None).
Paper columns: Table 17 (COCO Mask R-CNN) and Table 16 (ADE20K UperNet) of MambaMixer (arXiv:2403.19888 v2,
App. I.6); the 2-D SSM Swin-T has no row there ("–"). The ms-3x configs hold the same model as their 1x config
and are not repeated.
"""
from __future__ import annotations

from pathlib import Path

from ._common import table

REPO = Path(__file__).resolve().parents[1]
# (config under the repo, paper params M or None)
PAPER = [
    ("configs_mmdet/vim2/mask-rcnn_vim2-t_fpn_1x_coco.py", 48),
    ("configs_mmdet/vim2/mask-rcnn_vim2-s_fpn_1x_coco.py", 80),
    ("configs_mmdet/viqs/mask-rcnn_viqs-t_fpn_1x_coco.py", 40),
    ("configs_mmdet/viqs/mask-rcnn_viqs-s_fpn_1x_coco.py", 68),
    ("configs_mmdet/ssm2d/mask-rcnn_swin-t-p4-w7-ssm2d_fpn_1x_coco.py", None),
    ("configs_mmseg/vim2/upernet_vim2-t_4xb4-160k_ade20k-512x512.py", 51),
    ("configs_mmseg/vim2/upernet_vim2-s_4xb4-160k_ade20k-512x512.py", 74),
    ("configs_mmseg/viqs/upernet_viqs-t_4xb4-160k_ade20k-512x512.py", 51),
    ("configs_mmseg/viqs/upernet_viqs-s_4xb4-160k_ade20k-512x512.py", 68),
    ("configs_mmseg/ssm2d/upernet_swin-t-p4-w7-ssm2d_4xb4-160k_ade20k-512x512.py", None),
]


def build(config: Path):
    """The model of ``config`` from its toolbox's registry, backbone from scratch."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    cfg = Config.fromfile(str(config))
    cfg.model.backbone.init_cfg = None
    init_default_scope(cfg.default_scope)
    if cfg.default_scope == "mmdet":
        from mmdet.registry import MODELS
    else:
        from mmseg.registry import MODELS
    return MODELS.build(cfg.model)


def millions(module) -> float:
    return sum(p.numel() for p in module.parameters()) / 1e6


def rows():
    for config, paper in PAPER:
        model = build(REPO / config)
        total, backbone = millions(model), millions(model.backbone)
        yield [Path(config).stem, round(backbone, 1), round(total, 1), paper if paper is not None else "–",
               f"{total / paper:.2f}" if paper else "–"]


def main() -> str:
    text = table(["config", "backbone M", "ours M", "paper M", "ours / paper"], list(rows()))
    print(text)
    return text


if __name__ == "__main__":
    import argparse

    from ._common import add_write_readme, readme_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_readme(parser)
    with readme_section("benchmarks.params_mm", parser.parse_args().write_readme):
        main()
