"""Real crowdsourcing datasets shipped with privtd, and seeded synthetic generators.

Each real dataset is a folder under ``data/`` with ``answers.csv.gz`` (worker, task, answer),
``truth.csv.gz`` (task, truth) and ``SOURCE.md`` (provenance, licence as far as stated, and the
conversion notes). ``load(name)`` returns the coded answers and the truths.
"""

from ._catalog import DATASETS, Dataset, export, list_datasets, load
from .synthetic import make_categorical, make_numeric

__all__ = [
    "Dataset",
    "DATASETS",
    "load",
    "list_datasets",
    "export",
    "make_categorical",
    "make_numeric",
]
