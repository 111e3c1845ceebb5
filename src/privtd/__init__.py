"""privtd: privacy-preserving truth discovery for crowdsourcing.

Answers come in (:class:`Answers`, :mod:`privtd.datasets`), are aggregated on the server's side
(:mod:`privtd.inference`) and are measured (:func:`evaluate`).
"""

from __future__ import annotations

from . import datasets, inference
from .answers import Answers, as_answers
from .errors import (
    BudgetExceededError,
    ConvergenceWarning,
    NotFittedError,
    PrivacyLeakWarning,
    SchemaError,
    ValidationError,
)
from .evaluation import evaluate
from .inference import METHODS, make_estimator

__version__ = "0.1.0"

__all__ = [
    "Answers",
    "as_answers",
    "datasets",
    "inference",
    "evaluate",
    "METHODS",
    "make_estimator",
    "SchemaError",
    "ValidationError",
    "NotFittedError",
    "BudgetExceededError",
    "ConvergenceWarning",
    "PrivacyLeakWarning",
    "__version__",
]
