"""What every model family shares: the timm pretrained_cfg of a model with no published weights."""
from __future__ import annotations

from typing import Any, Dict

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD


def local_weights_cfg(**kwargs) -> Dict[str, Any]:
    """A timm pretrained_cfg with no url and no hf_hub_id, so nothing is ever fetched; local checkpoints
    load through ``timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=path))``."""
    return {
        'url': '',
        'hf_hub_id': None,
        'num_classes': 1000,
        'input_size': (3, 224, 224),
        'pool_size': None,
        'crop_pct': .875,
        'interpolation': 'bicubic',
        'fixed_input_size': False,
        'mean': IMAGENET_DEFAULT_MEAN,
        'std': IMAGENET_DEFAULT_STD,
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }
