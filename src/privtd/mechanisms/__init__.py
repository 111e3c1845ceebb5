"""The worker's side: local mechanisms that perturb answers before they leave the device.

Each mechanism is a small immutable object built from its natural parameter, with its
``guarantee`` (epsilon, delta and the unit protected) and ``from_epsilon`` to calibrate.
``perturb_worker`` is the record-local form a client runs; ``perturb`` the batch form for
simulation; with the same integer seed both give the same output.
"""

import inspect as _inspect
from collections.abc import Callable as _Callable
from typing import Any as _Any

from ..errors import ValidationError as _ValidationError
from ._base import Accountant, Budget, Guarantee, Mechanism
from .accounting import format_release_figures, release_figures, worker_totals
from .exp_gaussian import ExpGaussian, gaussian_delta
from .matrix_factorization import MFPerturbation, task_profiles
from .null_aware import KRRNull, LaplaceNull, TwoLayerNull
from .randomized_response import BinaryRR, OneLayerRR, TwoLayerRR, flip_epsilon, flip_for_epsilon

__all__ = [
    "Mechanism",
    "Guarantee",
    "Budget",
    "Accountant",
    "OneLayerRR",
    "TwoLayerRR",
    "BinaryRR",
    "ExpGaussian",
    "KRRNull",
    "LaplaceNull",
    "TwoLayerNull",
    "MFPerturbation",
    "task_profiles",
    "gaussian_delta",
    "MECHANISMS",
    "make_mechanism",
    "worker_totals",
    "release_figures",
    "format_release_figures",
    "flip_epsilon",
    "flip_for_epsilon",
]

MECHANISMS: dict[str, type[Mechanism]] = {
    "one-layer": OneLayerRR,
    "two-layer": TwoLayerRR,
    "binary-rr": BinaryRR,
    "exp-gaussian": ExpGaussian,
    "krr-null": KRRNull,
    "laplace": LaplaceNull,
    "two-layer-null": TwoLayerNull,
    "mf": MFPerturbation,
}


def make_mechanism(name: str, epsilon: float | None = None, **params: _Any) -> Mechanism:
    """Build a mechanism by name, from ``epsilon`` (calibrated) or from its natural parameters."""
    try:
        cls = MECHANISMS[name]
    except KeyError:
        raise _ValidationError(
            f"Unknown mechanism {name!r}. Choose one of {', '.join(MECHANISMS)}."
        ) from None
    build: _Callable[..., Mechanism] = cls if epsilon is None else cls.from_epsilon
    given = () if epsilon is None else (epsilon,)
    try:
        return build(*given, **params)
    except TypeError as exc:
        if "'low'" in str(exc) or "'high'" in str(exc):
            raise _ValidationError(
                f"The {name} mechanism needs the declared answer range, which its guarantee "
                "rests on: pass low and high.",
                param=("low", "high"),
            ) from None
        # Say which parameters the constructor takes, not Python's account of the call.
        sig = _inspect.signature(build).parameters.values()
        named = [p for p in sig if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD]
        required = [p.name for p in named if p.default is p.empty and p.name != "epsilon"]
        # allow_uninformative is a consent, not a parameter of the release: left unlisted.
        listed = [p.name for p in named if p.name not in ("epsilon", "allow_uninformative")]
        accepted = ", ".join(listed) or "none"
        unknown = sorted(set(params) - {p.name for p in named})
        if unknown:
            what = f"takes no parameter {', '.join(map(repr, unknown))}"
        elif missing := [r for r in required if r not in params]:
            what = f"needs {', '.join(missing)}" + (" or an epsilon" if epsilon is None else "")
        else:
            what = str(exc)
        raise _ValidationError(
            f"Bad parameter for mechanism {name!r}: it {what} (its parameters: {accepted}).",
            param=("epsilon", "mechanism_params"),
        ) from None
