"""Embedded default data: built from data installed packages ship (never downloaded), deterministic."""
from .digits import digits_split

__all__ = ["digits_split"]
