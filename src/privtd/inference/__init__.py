"""The server's side: truth inference on (possibly perturbed) answers.

Every estimator follows one contract (``fit(answers, *, gold=None) -> self``, results in
attributes ending in ``_``); :data:`METHODS` maps the CLI's method names to them.
"""

import inspect as _inspect
from typing import Any as _Any

from ..errors import ValidationError as _ValidationError
from ._base import Estimator
from .aware_dawid_skene import AwareDawidSkene
from .aware_gaussian import AwareGaussian
from .aware_null import AwareNull
from .aware_select import AwareSelect
from .binary_relevance import BinaryRelevance
from .catd import CATD
from .crh import CRH
from .dawid_skene import DawidSkene
from .decision import DECISIONS, decide
from .distributed import DISTRIBUTED_METHODS, fit_distributed
from .glad import GLAD, AwareGLAD
from .gtm import GTM
from .kos import KOS
from .latent_class import LatentClass
from .mace import MACE, AwareMACE
from .majority_vote import MajorityVote
from .mean_median import Mean, Median
from .minimax_entropy import MinimaxEntropy
from .mmsr import MMSR
from .one_coin_dawid_skene import OneCoinDawidSkene
from .perturbation_aware import AwareOneCoin
from .private_dawid_skene import PrivateDawidSkene
from .raykar import Raykar
from .wawa import Wawa
from .weighted_average import WeightedAverage
from .weighted_vote import WeightedVote
from .zencrowd import AwareZenCrowd, ZenCrowd
from .zero_based_skill import ZeroBasedSkill

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
    "AwareSelect",
    "LatentClass",
    "Raykar",
    "WeightedAverage",
    "Mean",
    "Median",
    "PrivateDawidSkene",
    "Wawa",
    "ZeroBasedSkill",
    "KOS",
    "MMSR",
    "BinaryRelevance",
    "GLAD",
    "AwareGLAD",
    "MACE",
    "AwareMACE",
    "ZenCrowd",
    "AwareZenCrowd",
    "MinimaxEntropy",
    "decide",
    "DECISIONS",
    "METHODS",
    "RELEASE_METHODS",
    "AWARE_METHOD",
    "AWARE_METHODS",
    "NO_AWARE_METHOD",
    "aware_method",
    "make_estimator",
    "estimator_params",
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
    "aware-select": AwareSelect,
    "aware-gaussian": AwareGaussian,
    "lc": LatentClass,
    "raykar": Raykar,
    "sigma": WeightedAverage,
    "mean": Mean,
    "median": Median,
    "private-ds": PrivateDawidSkene,
    "wawa": Wawa,
    "zbs": ZeroBasedSkill,
    "kos": KOS,
    "mmsr": MMSR,
    "glad": GLAD,
    "aware-glad": AwareGLAD,
    "mace": MACE,
    "aware-mace": AwareMACE,
    "zencrowd": ZenCrowd,
    "aware-zencrowd": AwareZenCrowd,
    "minimax": MinimaxEntropy,
}


#: The perturbation-aware estimator for each mechanism that has one: what ``privtd infer
#: --mechanism NAME`` and the service pick when no method is given. Randomized response gets the
#: Dawid-Skene model at every label count: over two labels with a learned class prior and the
#: balanced decision (two coins per worker: on Duchenne and sentiment it beats the one-coin model
#: at most epsilons), over more with a fixed uniform class prior (its ``class_prior="auto"``),
#: which met the plain methods' balanced accuracy on the bundled sets over more than two labels
#: where the one-coin model fell short of Dawid-Skene at high epsilon (docs/inference.md).
AWARE_METHOD: dict[str, str] = {
    "one-layer": "aware-ds",
    "two-layer": "aware-ds",
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
#: GLAD, MACE and ZenCrowd's aware forms compose their model with the randomized-response
#: channel (docs/inference.md).
AWARE_METHODS = frozenset(
    {
        "aware-one-coin",
        "aware-ds",
        "aware-select",
        "aware-gaussian",
        "aware-null",
        "aware-glad",
        "aware-mace",
        "aware-zencrowd",
    }
)


def aware_method(mechanism: _Any) -> str | None:
    """The perturbation-aware estimator for a mechanism (see :data:`AWARE_METHOD`), or None."""
    return AWARE_METHOD.get(getattr(mechanism, "name", ""))


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
    # Name what is wrong in privtd's terms, not through Python's TypeError about __init__.
    accepted = estimator_params(method)
    takes_mechanism = "mechanism" in _inspect.signature(cls).parameters
    unknown = [k for k in params if k not in accepted and (k != "mechanism" or not takes_mechanism)]
    if unknown:
        raise _ValidationError(
            f"unknown parameter {unknown[0]!r} for method {method}; it takes: "
            f"{', '.join(accepted) or 'none'} (CLI: -P/--method-param KEY=VALUE)."
        )
    try:
        return cls(**params)
    except TypeError:
        needed = [
            p.name
            for p in _inspect.signature(cls).parameters.values()
            if p.default is p.empty and p.name not in params and p.kind is not p.VAR_KEYWORD
        ]
        what = (
            f"needs {', '.join(needed)}"
            if needed
            else f"cannot take the values given for {', '.join(sorted(params))}"
        )
        raise _ValidationError(f"Method {method!r} {what}; check their types.") from None


def estimator_params(method: str) -> list[str]:
    """The parameters a method's estimator takes (its mechanism aside), in signature order."""
    cls = METHODS.get(method) or RELEASE_METHODS.get(method)
    if cls is None:
        raise _ValidationError(
            f"Unknown method {method!r}. Choose one of {', '.join([*METHODS, *RELEASE_METHODS])}."
        )
    names: list[str] = []
    # An aware form that passes **params on to its plain model (AwareMACE, AwareGLAD, ...)
    # takes the plain model's parameters too: follow the classes up until no **params is left.
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        params = _inspect.signature(vars(klass)["__init__"]).parameters.values()
        names += [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in ("self", "mechanism")
            and p.name not in names
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names
