"""Embedded default data: built from data installed packages ship or generated (never downloaded), deterministic."""
from .digits import digits_split
from .mixtures import generate_mixtures, prepare_wsjmix_csv

__all__ = ["digits_split", "generate_mixtures", "prepare_wsjmix_csv"]
