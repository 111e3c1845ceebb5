"""The server's side: truth inference on (possibly perturbed) answers.

Every estimator follows one contract (``fit(answers, *, gold=None) -> self``, results in
attributes ending in ``_``); :data:`METHODS` maps the CLI's method names to them.
"""

from __future__ import annotations

from typing import Any

from ..errors import ValidationError
from ._base import Estimator
from .aware_gaussian import AwareGaussian
from .aware_null import AwareNull
from .catd import CATD
from .crh import CRH
from .dawid_skene import DawidSkene
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
    "make_estimator",
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
    "aware-gaussian": AwareGaussian,
    "lc": LatentClass,
    "raykar": Raykar,
    "sigma": WeightedAverage,
    "mean": Mean,
    "median": Median,
    "private-ds": PrivateDawidSkene,
}


#: The perturbation-aware estimator for each mechanism that has one: what ``privtd infer
#: --mechanism NAME`` picks when no method is given.
AWARE_METHOD: dict[str, str] = {
    "one-layer": "aware-one-coin",
    "two-layer": "aware-one-coin",
    "binary-rr": "aware-one-coin",
    "exp-gaussian": "aware-gaussian",
    "krr-null": "aware-null",
    "two-layer-null": "aware-null",
}

#: Estimators that only read a mechanism's release of whole rows (every (worker, task) cell
#: reported, NULL included), so they need the mechanism and are kept out of ``METHODS``,
#: whose members fit any answers of their kind.
RELEASE_METHODS: dict[str, type[Estimator]] = {"aware-null": AwareNull}


def make_estimator(method: str, **params: Any) -> Estimator:
    """Build the estimator for a method name, passing ``params`` to its constructor."""
    cls = METHODS.get(method) or RELEASE_METHODS.get(method)
    if cls is None:
        raise ValidationError(
            f"Unknown method {method!r}. Choose one of {', '.join([*METHODS, *RELEASE_METHODS])}."
        )
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValidationError(f"Bad parameter for method {method!r}: {exc}.") from None
