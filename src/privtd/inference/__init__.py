"""The server's side: truth inference on (possibly perturbed) answers.

Every estimator follows one contract (``fit(answers, *, gold=None) -> self``, results in
attributes ending in ``_``); :data:`METHODS` maps the CLI's method names to them.
"""

from typing import Any as _Any

from ..errors import ValidationError as _ValidationError
from ._base import Estimator
from .aware_dawid_skene import AwareDawidSkene
from .aware_gaussian import AwareGaussian
from .aware_null import AwareNull
from .catd import CATD
from .crh import CRH
from .dawid_skene import DawidSkene
from .distributed import DISTRIBUTED_METHODS, fit_distributed
from .gtm import GTM
from .latent_class import LatentClass
from .majority_vote import MajorityVote
from .mean_median import Mean, Median
from .one_coin_dawid_skene import OneCoinDawidSkene
from .perturbation_aware import AwareOneCoin
from .private_dawid_skene import PrivateDawidSkene
from .raykar import Raykar
from .weighted_average import WeightedAverage
from .weighted_vote import WeightedVote

__all__ = [
    "Estimator",
    "MajorityVote",
    "WeightedVote",
    "CRH",
    "CATD",
    "GTM",
    "DawidSkene",
    "OneCoinDawidSkene",
    "AwareOneCoin",
    "AwareDawidSkene",
    "AwareGaussian",
    "AwareNull",
    "LatentClass",
    "Raykar",
    "WeightedAverage",
    "Mean",
    "Median",
    "PrivateDawidSkene",
    "METHODS",
    "RELEASE_METHODS",
    "AWARE_METHOD",
    "AWARE_METHODS",
    "NO_AWARE_METHOD",
    "aware_method",
    "make_estimator",
    "fit_distributed",
    "DISTRIBUTED_METHODS",
]

METHODS: dict[str, type[Estimator]] = {
    "mv": MajorityVote,
    "wv": WeightedVote,
    "crh": CRH,
    "catd": CATD,
    "gtm": GTM,
    "ds": DawidSkene,
    "one-coin-ds": OneCoinDawidSkene,
    "aware-one-coin": AwareOneCoin,
    "aware-ds": AwareDawidSkene,
    "aware-gaussian": AwareGaussian,
    "lc": LatentClass,
    "raykar": Raykar,
    "sigma": WeightedAverage,
    "mean": Mean,
    "median": Median,
    "private-ds": PrivateDawidSkene,
}


#: The perturbation-aware estimator for each mechanism that has one: what ``privtd infer
#: --mechanism NAME`` and the service pick when no method is given. Randomized response over two
#: labels gets the Dawid-Skene model (two coins per worker: on Duchenne and sentiment it beats
#: the one-coin model at most epsilons); over more labels the one-coin model, whose single
#: accuracy per worker stays well estimated through a noisy channel where a full K x K confusion
#: does not (docs/inference.md).
AWARE_METHOD: dict[str, str] = {
    "one-layer": "aware-one-coin",
    "two-layer": "aware-one-coin",
    "binary-rr": "aware-ds",
    "exp-gaussian": "aware-gaussian",
    "krr-null": "aware-null",
    "two-layer-null": "aware-null",
}

#: Why the mechanisms without a perturbation-aware estimator have none (docs/reproduction.md,
#: bigdata18), for the error that asks for --method instead.
NO_AWARE_METHOD: dict[str, str] = {
    "laplace": (
        "it fills a NULL cell with a uniformly drawn score before adding the noise, so a NULL's "
        "report has the law of an answer and no estimator can take the fills out"
    ),
    "mf": "it perturbs each worker's factor profile, not each answer, so there is no per-answer "
    "channel to model",
}

#: The estimators that take the mechanism as their first parameter.
AWARE_METHODS = frozenset({"aware-one-coin", "aware-ds", "aware-gaussian", "aware-null"})


def aware_method(mechanism: _Any) -> str | None:
    """The perturbation-aware estimator for a mechanism (see :data:`AWARE_METHOD`), or None."""
    method = AWARE_METHOD.get(getattr(mechanism, "name", ""))
    if method == "aware-one-coin" and getattr(mechanism, "n_labels", 0) == 2:
        return "aware-ds"
    return method


#: Estimators that only read a mechanism's release of whole rows (every (worker, task) cell
#: reported, NULL included), so they need the mechanism and are kept out of ``METHODS``,
#: whose members fit any answers of their kind.
RELEASE_METHODS: dict[str, type[Estimator]] = {"aware-null": AwareNull}


def make_estimator(method: str, **params: _Any) -> Estimator:
    """Build the estimator for a method name, passing ``params`` to its constructor."""
    cls = METHODS.get(method) or RELEASE_METHODS.get(method)
    if cls is None:
        raise _ValidationError(
            f"Unknown method {method!r}. Choose one of {', '.join([*METHODS, *RELEASE_METHODS])}."
        )
    try:
        return cls(**params)
    except TypeError as exc:
        raise _ValidationError(f"Bad parameter for method {method!r}: {exc}.") from None
