"""CelebA's metric, the mean over the attributes of each one's binary accuracy: :class:`MultiLabelAccuracy`."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
from mmengine.evaluator import BaseMetric
from mmpretrain.registry import METRICS
from mmpretrain.structures import label_to_onehot

__all__ = ["MultiLabelAccuracy"]


@METRICS.register_module()
class MultiLabelAccuracy(BaseMetric):
    """Accuracy of each label's binary decision (score >= ``thr``), averaged over the labels: CelebA's "mean
    accuracy over the 40 attributes". MMPretrain's ``MultiLabelMetric`` gives precision / recall / F1 and
    ``AveragePrecision`` mAP, neither this.

    Keys: ``multi-label/mean_accuracy`` (percent) and, with ``classwise=True``, ``multi-label/accuracy_classwise``
    (percent per label)."""

    default_prefix = 'multi-label'

    def __init__(self, thr: float = 0.5, classwise: bool = False, collect_device: str = 'cpu',
                 prefix: Optional[str] = None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        self.thr = thr
        self.classwise = classwise

    def process(self, data_batch, data_samples: Sequence[dict]):
        for data_sample in data_samples:
            score = data_sample['pred_score'].detach().cpu()
            if 'gt_score' in data_sample:
                target = data_sample['gt_score'].detach().cpu()
            else:
                target = label_to_onehot(data_sample['gt_label'], score.numel())
            self.results.append(((score >= self.thr), target >= 0.5))

    def compute_metrics(self, results: List) -> dict:
        return self.calculate(torch.stack([p for p, _ in results]), torch.stack([t for _, t in results]),
                              classwise=self.classwise)

    @staticmethod
    def calculate(pred: torch.Tensor, target: torch.Tensor, classwise: bool = False) -> dict:
        """``pred``, ``target``: (N, labels) booleans."""
        if pred.shape != target.shape or pred.dim() != 2:
            raise ValueError(f'pred and target must both be (N, labels), got {tuple(pred.shape)} and '
                             f'{tuple(target.shape)}')
        per_label = (pred == target).float().mean(dim=0) * 100
        metrics = {'mean_accuracy': float(per_label.mean())}
        if classwise:
            metrics['accuracy_classwise'] = per_label.tolist()
        return metrics
