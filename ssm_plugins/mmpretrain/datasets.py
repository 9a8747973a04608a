"""The 2-D SSM paper's data sets as released: CIFAR-100 (python pickles), Tiny-ImageNet (its own folder layout),
CelebA (the aligned images, ``list_attr_celeba.txt``, ``list_eval_partition.txt``); configs: configs_mmpretrain/ssm2d/.

Readers of the official on-disk layouts, on MMPretrain's base classes (``ssm_plugins.data.{cifar,tiny_imagenet,
celeba}_digits`` generate the same layouts offline for the tests).
"""
from __future__ import annotations

import os
import pickle
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from mmengine.dataset import BaseDataset as MMEngineBaseDataset
from mmengine.fileio import exists, get, get_text, join_path, list_dir_or_file
from mmpretrain.datasets import CIFAR100, BaseDataset, MultiLabelDataset
from mmpretrain.registry import DATASETS

__all__ = ["LocalCIFAR100", "TinyImageNet", "CelebA", "CELEBA_ATTRIBUTES", "read_celeba_attributes",
           "read_celeba_partition", "TrainingFraction", "fraction_indices"]

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif')


def _text_lines(path: str, what: str) -> List[str]:
    if not exists(path):
        raise FileNotFoundError(f'{what} {path} not found')
    return get_text(path).splitlines()


@DATASETS.register_module()
class LocalCIFAR100(CIFAR100):
    """MMPretrain's ``CIFAR100`` reader for a local copy of ``cifar-100-python/{train,test,meta}``.

    ``CIFAR100`` accepts only the official files: it compares their md5 sums with the official ones and, on a
    mismatch, downloads the archive (or fails with ``download=False``). This subclass reads the same pickles
    through the same code without the md5 check and never downloads: the official files, a re-pickled or
    subsetted copy, or ``ssm_plugins.data.cifar_digits``. Class names come from ``meta[b'fine_label_names']``.
    """

    train_list = [['train', None]]  # md5 None: CIFAR10._check_integrity then only checks that the file exists
    test_list = [['test', None]]
    meta = {'filename': 'meta', 'key': 'fine_label_names', 'md5': None}
    METAINFO = {}  # no built-in class names: _load_meta reads them from the meta file

    def __init__(self, data_root: str = '', split: str = 'train', metainfo: Optional[dict] = None,
                 download: bool = False, **kwargs):
        if download:
            raise ValueError('download must be False: LocalCIFAR100 reads a local copy only (use CIFAR100 to '
                             'download the official archive)')
        super().__init__(data_root=data_root, split=split, metainfo=metainfo, download=False, **kwargs)

    def load_data_list(self):
        root = self.data_prefix['root']
        for name in ('train', 'test', self.meta['filename']):
            path = join_path(root, self.base_folder, name)
            if not exists(path):
                raise FileNotFoundError(f'CIFAR-100 file {path} not found: data_root must hold '
                                        f'{self.base_folder}/{{train,test,meta}} (the unpacked official archive)')
        try:
            return super().load_data_list()
        except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, AttributeError) as error:
            # CIFAR10.load_data_list unpickles the files without naming them: find the one that does not read
            for name in (self.split, self.meta['filename']):
                path = join_path(root, self.base_folder, name)
                try:
                    entry = pickle.loads(get(path), encoding='latin1')
                    if not isinstance(entry, dict):
                        raise TypeError(f'a pickled {type(entry).__name__}')
                except Exception as cause:  # noqa: BLE001 (any unreadable content: report the file)
                    raise ValueError(f'CIFAR-100 file {path} is not an official CIFAR-100 python pickle (a dict): '
                                     f'{type(cause).__name__}: {cause}') from error
            raise


@DATASETS.register_module()
class TinyImageNet(BaseDataset):
    """Tiny-ImageNet-200 in its official layout (``wnids.txt``, ``train/<wnid>/images/*.JPEG``,
    ``val/images/*.JPEG`` + ``val/val_annotations.txt``).

    The official ``val/`` folder is flat (not one folder per class), so the labels of ``split='val'`` come from
    ``val_annotations.txt`` ("<file>\\t<wnid>\\t<box>"). Label ``i`` is the ``i``-th wnid in sorted order, as
    ImageFolder (torchvision, timm) numbers the training folders; class names are the wnids.
    """

    SPLITS = ('train', 'val')

    def __init__(self, data_root: str = '', split: str = 'train', **kwargs):
        if split not in self.SPLITS:
            raise ValueError(f'split must be one of {self.SPLITS} (the official test set has no labels), '
                             f'got {split!r}')
        if not data_root:
            raise ValueError('data_root must be the tiny-imagenet-200 folder (holding wnids.txt, train/, val/)')
        self.split = split
        super().__init__(ann_file='', data_root=data_root, **kwargs)

    def _wnids(self) -> List[str]:
        path = join_path(self.data_root, 'wnids.txt')
        wnids = [line.strip() for line in _text_lines(path, 'Tiny-ImageNet class list') if line.strip()]
        if not wnids or len(set(wnids)) != len(wnids) or any(len(w.split()) != 1 for w in wnids):
            raise ValueError(f'{path} must list distinct class ids (wnids), one per line')
        return sorted(wnids)

    def load_data_list(self) -> List[dict]:
        wnids = self._wnids()
        self._metainfo.setdefault('classes', tuple(wnids))
        if len(self.CLASSES) != len(wnids):
            raise ValueError(f'metainfo.classes has {len(self.CLASSES)} names but wnids.txt lists {len(wnids)} '
                             f'classes in {self.data_root}')
        label_of = {wnid: label for label, wnid in enumerate(wnids)}
        data_list = []
        if self.split == 'train':
            for wnid in wnids:
                folder = join_path(self.data_root, 'train', wnid, 'images')
                if not exists(folder):
                    raise FileNotFoundError(f'Tiny-ImageNet training folder {folder} not found (wnids.txt lists '
                                            f'{wnid})')
                for name in sorted(list_dir_or_file(folder, list_dir=False)):
                    if not name.lower().endswith(IMAGE_EXTENSIONS):  # the official files are *.JPEG
                        continue
                    data_list.append({'img_path': join_path(folder, name), 'gt_label': label_of[wnid]})
            return data_list
        path = join_path(self.data_root, 'val', 'val_annotations.txt')
        for number, line in enumerate(_text_lines(path, 'Tiny-ImageNet validation annotations'), 1):
            if not line.strip():
                continue
            fields = line.split('\t')
            if len(fields) != 6 or fields[1] not in label_of:
                raise ValueError(f'{path} line {number}: expected "<file>\\t<wnid of wnids.txt>\\t<x0>\\t<y0>\\t<x1>'
                                 f'\\t<y1>", got {line!r}')
            data_list.append({'img_path': join_path(self.data_root, 'val', 'images', fields[0]),
                              'gt_label': label_of[fields[1]]})
        return data_list


CELEBA_ATTRIBUTES = (
    '5_o_Clock_Shadow', 'Arched_Eyebrows', 'Attractive', 'Bags_Under_Eyes', 'Bald', 'Bangs', 'Big_Lips', 'Big_Nose',
    'Black_Hair', 'Blond_Hair', 'Blurry', 'Brown_Hair', 'Bushy_Eyebrows', 'Chubby', 'Double_Chin', 'Eyeglasses',
    'Goatee', 'Gray_Hair', 'Heavy_Makeup', 'High_Cheekbones', 'Male', 'Mouth_Slightly_Open', 'Mustache',
    'Narrow_Eyes', 'No_Beard', 'Oval_Face', 'Pale_Skin', 'Pointy_Nose', 'Receding_Hairline', 'Rosy_Cheeks',
    'Sideburns', 'Smiling', 'Straight_Hair', 'Wavy_Hair', 'Wearing_Earrings', 'Wearing_Hat', 'Wearing_Lipstick',
    'Wearing_Necklace', 'Wearing_Necktie', 'Young')


def read_celeba_attributes(path: str) -> Tuple[Tuple[str, ...], Dict[str, List[int]]]:
    """(attribute names, {file: [values of 1 / -1]}) of a ``list_attr_celeba.txt``: the image count, the names,
    then "<file> <values>" per image. Raises ValueError naming the file and line when it is malformed."""
    lines = [(number, line) for number, line in enumerate(_text_lines(path, 'CelebA attribute file'), 1)
             if line.strip()]
    if len(lines) < 2 or not lines[0][1].strip().isdigit():
        raise ValueError(f'{path} line 1: expected the number of images, then a line of attribute names')
    names = tuple(lines[1][1].split())
    rows: Dict[str, List[int]] = {}
    for number, line in lines[2:]:
        fields = line.split()
        if len(fields) != 1 + len(names) or any(v not in ('1', '-1') for v in fields[1:]):
            raise ValueError(f'{path} line {number}: expected "<file>" and {len(names)} values of 1 or -1, '
                             f'got {line!r}')
        rows[fields[0]] = [int(v) for v in fields[1:]]
    if int(lines[0][1]) != len(rows):
        raise ValueError(f'{path} line {lines[0][0]}: says {int(lines[0][1])} images, the file lists {len(rows)}')
    return names, rows


def read_celeba_partition(path: str) -> Dict[str, int]:
    """{file: 0 (train) | 1 (val) | 2 (test)} of a ``list_eval_partition.txt``."""
    partition = {}
    for number, line in enumerate(_text_lines(path, 'CelebA partition file'), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or fields[1] not in ('0', '1', '2'):
            raise ValueError(f'{path} line {number}: expected "<file> <0|1|2>", got {line!r}')
        partition[fields[0]] = int(fields[1])
    return partition


@DATASETS.register_module()
class CelebA(MultiLabelDataset):
    """CelebA's 40 binary attributes as a multi-label set, in the official layout under ``data_root``:
    ``img_align_celeba/`` (images), ``list_attr_celeba.txt`` (attributes, 1 / -1) and ``list_eval_partition.txt``
    (0 train, 1 val, 2 test). ``gt_label`` lists the attributes that are 1."""

    METAINFO = {'classes': CELEBA_ATTRIBUTES}
    SPLITS = {'train': 0, 'val': 1, 'test': 2}

    def __init__(self, data_root: str = '', split: str = 'train', attr_file: str = 'list_attr_celeba.txt',
                 partition_file: str = 'list_eval_partition.txt', data_prefix: str = 'img_align_celeba', **kwargs):
        if split not in self.SPLITS:
            raise ValueError(f'split must be one of {tuple(self.SPLITS)}, got {split!r}')
        self.split = split
        self.partition_file = partition_file
        super().__init__(ann_file=attr_file, data_root=data_root, data_prefix=data_prefix, **kwargs)

    def load_data_list(self) -> List[dict]:
        names, rows = read_celeba_attributes(self.ann_file)
        if names != tuple(self.CLASSES):
            raise ValueError(f'{self.ann_file} line 2 names the attributes {names}; expected {tuple(self.CLASSES)} '
                             f'(metainfo.classes)')
        partition_path = self.partition_file
        if self.data_root and not os.path.isabs(partition_path):
            partition_path = join_path(self.data_root, partition_path)
        partition = read_celeba_partition(partition_path)
        missing = [name for name in rows if name not in partition]
        if missing:
            raise ValueError(f'{partition_path} has no partition for {len(missing)} images of {self.ann_file}, '
                             f'e.g. {missing[0]!r}')
        wanted = self.SPLITS[self.split]
        return [{'img_path': join_path(self.data_prefix['img_path'], name),
                 'gt_label': [i for i, v in enumerate(values) if v == 1]}
                for name, values in rows.items() if partition[name] == wanted]


# ---- training-set fractions (the paper's Figure 3) ------------------------------------------------------------


def fraction_indices(labels: List[Union[int, List[int]]], fraction: float, seed: int = 0) -> List[int]:
    """Sorted indices of a seeded random ``fraction`` of a dataset: per class for single-label data (each class
    keeps round(fraction * its size), at least one), over all samples for multi-label data (CelebA). The draws
    are nested: for one seed, a smaller fraction keeps a subset of what a larger one keeps, so the points of a
    training-set-size curve differ only by the images added."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
        raise ValueError(f'fraction must be a number in (0, 1], got {fraction!r}')
    rng = np.random.default_rng(seed)
    if not labels:
        return []
    if all(isinstance(label, (int, np.integer)) for label in labels):
        labels = np.asarray(labels)
        keep = []
        for label in np.unique(labels):
            members = np.flatnonzero(labels == label)
            keep.append(rng.permutation(members)[:max(1, round(fraction * len(members)))])
        return sorted(int(i) for i in np.concatenate(keep))
    return sorted(int(i) for i in rng.permutation(len(labels))[:max(1, round(fraction * len(labels)))])


@DATASETS.register_module()
def TrainingFraction(dataset: Union[dict, MMEngineBaseDataset], fraction: float,  # noqa: N802 (a dataset type)
                     seed: int = 0) -> MMEngineBaseDataset:
    """The 2-D SSM paper's training-set-size experiment (Figure 3; its code's ``--dataset_percentage``): ``dataset``
    (a config or a built dataset) cut to a seeded random ``fraction`` of its samples, stratified by class where
    each sample has one label (``fraction_indices``).

    Registered as a builder, like a dataset type (``dict(type='TrainingFraction', dataset=..., fraction=0.1)``); it
    returns the dataset itself, cut in place (``BaseDataset.get_subset_``), so its class, metainfo and evaluation stay
    those of the full set. MMEngine's own ``indices`` keeps the first N samples, which for Tiny-ImageNet's
    class-ordered folders would be the first classes only."""
    if isinstance(dataset, dict):
        dataset = DATASETS.build(dataset)
    if not isinstance(dataset, MMEngineBaseDataset):
        raise TypeError(f'TrainingFraction: dataset must be an MMEngine BaseDataset or its config, got {type(dataset).__name__}')
    dataset.full_init()
    labels = [dataset.get_data_info(i)['gt_label'] for i in range(len(dataset))]
    labels = [label if isinstance(label, (int, np.integer)) else list(label) for label in labels]
    dataset.get_subset_(fraction_indices(labels, fraction, seed))
    return dataset
