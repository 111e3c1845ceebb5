"""The names the CLI offers as choices, spelt out so that ``privtd --help`` needs no import of
the estimators or the mechanisms.

tests/test_cli_fast.py checks them against the registries (:data:`privtd.inference.METHODS`
with :data:`~privtd.inference.RELEASE_METHODS`, and :data:`privtd.mechanisms.MECHANISMS`): a new
method or mechanism is added here too, in the registry's order.
"""

from __future__ import annotations

#: ``privtd infer --method``: every name of ``METHODS``, then of ``RELEASE_METHODS``.
METHOD_NAMES = (
    "mv",
    "wv",
    "crh",
    "catd",
    "gtm",
    "ds",
    "one-coin-ds",
    "aware-one-coin",
    "aware-ds",
    "aware-select",
    "aware-gaussian",
    "lc",
    "raykar",
    "sigma",
    "mean",
    "median",
    "private-ds",
    "wawa",
    "zbs",
    "kos",
    "mmsr",
    "glad",
    "aware-glad",
    "mace",
    "aware-mace",
    "zencrowd",
    "aware-zencrowd",
    "minimax",
    "aware-null",
)

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
