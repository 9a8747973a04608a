"""Multi-label classification of a timm model (CelebA's 40 attributes): :class:`TimmMultiLabelClassifier`."""
from __future__ import annotations

from typing import Optional

import torch
from mmpretrain.models import TimmClassifier
from mmpretrain.registry import MODELS

__all__ = ["TimmMultiLabelClassifier"]


@MODELS.register_module()
class TimmMultiLabelClassifier(TimmClassifier):
    """MMPretrain's ``TimmClassifier`` for multi-label targets: a sigmoid per label instead of a softmax.

    Trains on the multi-hot ``gt_score`` that ``ClsDataPreprocessor(to_onehot=True)`` makes from ``gt_label``
    (Mixup/CutMix mix those multi-hot vectors); the default loss is BCE with logits. Predictions: ``pred_score`` =
    sigmoid(logits), ``pred_label`` = the labels with score >= ``thr``."""

    def __init__(self, *args, loss=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 thr: float = 0.5, data_preprocessor: Optional[dict] = None, **kwargs):
        if not 0.0 < thr < 1.0:
            raise ValueError(f'thr must be in (0, 1), got {thr}')
        data_preprocessor = dict(data_preprocessor or {})
        if 'num_classes' in kwargs:
            data_preprocessor.setdefault('num_classes', kwargs['num_classes'])
        data_preprocessor['to_onehot'] = True
        super().__init__(*args, loss=loss, data_preprocessor=data_preprocessor, **kwargs)
        self.thr = thr

    def _get_loss(self, cls_score, data_samples, **kwargs):
        if 'gt_score' not in data_samples[0]:
            raise ValueError('TimmMultiLabelClassifier needs multi-hot gt_score targets: the data preprocessor must '
                             'have to_onehot=True and num_classes')
        return super()._get_loss(cls_score, data_samples, **kwargs)

    def _get_predictions(self, cls_score, data_samples=None):
        scores = torch.sigmoid(cls_score)
        if data_samples is None:
            from mmpretrain.structures import DataSample
            data_samples = [DataSample() for _ in range(len(scores))]
        for data_sample, score in zip(data_samples, scores):
            data_sample.set_pred_score(score).set_pred_label(torch.where(score >= self.thr)[0])
        return data_samples
