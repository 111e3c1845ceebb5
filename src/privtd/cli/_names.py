"""The names the CLI offers as choices, without importing the estimators or the mechanisms, so
that ``privtd --help`` stays fast.

The method names come from :mod:`privtd.inference`'s table, which lists them without importing
any estimator. The mechanism names are spelt out: tests/test_cli_fast.py checks them against
:data:`privtd.mechanisms.MECHANISMS`, so a new mechanism is added here too, in its order.
"""

from __future__ import annotations

from ..inference import METHODS, RELEASE_METHODS

#: ``privtd infer --method``: every name of ``METHODS``, then of ``RELEASE_METHODS``.
METHOD_NAMES = (*METHODS, *RELEASE_METHODS)

#: ``--mechanism`` of infer, perturb, epsilon, audit and attack: the names of ``MECHANISMS``.
MECHANISM_NAMES = (
    "one-layer",
    "two-layer",
    "binary-rr",
    "exp-gaussian",
    "krr-null",
    "laplace",
    "two-layer-null",
    "mf",
)

#: ``--format`` of the commands that read answers: ``auto`` and :data:`privtd.io.FORMATS`.
FORMAT_NAMES = ("auto", "long", "toloka", "mturk", "label-studio", "appen")
