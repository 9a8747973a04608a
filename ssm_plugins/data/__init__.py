"""Embedded default data: built from data installed packages ship (never downloaded), deterministic.

Dense-prediction sets, written on first use into ``data_home()``: ``ssm_plugins.data.coco_digits.coco_digits()``
(COCO instances) and ``ssm_plugins.data.ade_digits.ade_digits()`` (ADE20K layout); each module is also a CLI.
"""
from ._scenes import DATA_ENV, DIGIT_NAMES, data_home
from .digits import digits_split

__all__ = ["DATA_ENV", "DIGIT_NAMES", "data_home", "digits_split"]
