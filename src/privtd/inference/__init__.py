"""The server's side: truth inference on (possibly perturbed) answers.

Every estimator follows one contract (``fit(answers, *, gold=None) -> self``, results in
attributes ending in ``_``) and declares its tags (:class:`Tags`: its method name, the answer
kinds it takes, the mechanisms it models, where it runs); :func:`all_estimators` lists the
registered ones, and :data:`METHODS` maps the CLI's method names to them.
"""

# No ``from __future__ import annotations`` and no bare helper imports here: each would show up
# as a public name; the helpers go by private aliases, and annotations naming a lazy class are
# quoted. The estimators and the Dask engine load on first use (PEP 562), so that a fit, or
# the CLI listing its methods, imports only what it runs.
import importlib as _importlib
import inspect as _inspect
import typing as _typing
from collections.abc import Iterator as _Iterator
from collections.abc import Mapping as _Mapping

from ..errors import ValidationError as _ValidationError

if _typing.TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers
    from ._base import Estimator, clone
    from ._tags import Tags, get_tags
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
    "Tags",
    "get_tags",
    "all_estimators",
    "clone",
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
    "takes_mechanism",
    "make_estimator",
    "estimator_params",
    "fit_distributed",
    "DISTRIBUTED_METHODS",
]

#: Every method name the CLI and :func:`make_estimator` take, as ``"module:Class"`` of its
#: estimator in this package: the index that lets the CLI's choice list (``privtd.cli._names``)
#: and :data:`METHODS` name the methods without importing any estimator. What each method is
#: (its kinds, mechanisms, executors) its class's tags say; tests/test_registry.py checks that
#: this index names each class under its tag's name. A plain model whose ``mechanism``
#: parameter composes the channel into its likelihood is listed twice: under its own name and
#: under its aware form's (its tags' ``aware_form``). A class is imported when first used.
_METHOD_SPECS: dict[str, str] = {
    "mv": "majority_vote:MajorityVote",
    "wv": "weighted_vote:WeightedVote",
    "crh": "crh:CRH",
    "catd": "catd:CATD",
    "gtm": "gtm:GTM",
    "ds": "dawid_skene:DawidSkene",
    "one-coin-ds": "one_coin_dawid_skene:OneCoinDawidSkene",
    "aware-one-coin": "perturbation_aware:AwareOneCoin",
    "aware-ds": "aware_dawid_skene:AwareDawidSkene",
    "aware-select": "aware_select:AwareSelect",
    "aware-gaussian": "aware_gaussian:AwareGaussian",
    "lc": "latent_class:LatentClass",
    "raykar": "raykar:Raykar",
    "sigma": "weighted_average:WeightedAverage",
    "mean": "mean_median:Mean",
    "median": "mean_median:Median",
    "private-ds": "private_dawid_skene:PrivateDawidSkene",
    "wawa": "wawa:Wawa",
    "zbs": "zero_based_skill:ZeroBasedSkill",
    "kos": "kos:KOS",
    "mmsr": "mmsr:MMSR",
    "glad": "glad:GLAD",
    "aware-glad": "glad:GLAD",
    "mace": "mace:MACE",
    "aware-mace": "mace:MACE",
    "zencrowd": "zencrowd:ZenCrowd",
    "aware-zencrowd": "zencrowd:ZenCrowd",
    "minimax": "minimax_entropy:MinimaxEntropy",
    # Estimators tagged release_only, which only read a mechanism's release of whole rows
    # (every (worker, task) cell reported, NULL included): they need the mechanism, so
    # RELEASE_METHODS holds them, not METHODS, whose members fit any answers of their kind.
    "aware-null": "aware_null:AwareNull",
}
_RELEASE_ONLY = ("aware-null",)

#: Public name -> the submodule that defines it: the estimators from the table above, and the
#: rest.
_LAZY: dict[str, str] = {
    **{spec.split(":")[1]: spec.split(":")[0] for spec in _METHOD_SPECS.values()},
    # Deprecated aliases of GLAD(mechanism=...), MACE(...) and ZenCrowd(...).
    "AwareGLAD": "glad",
    "AwareMACE": "mace",
    "AwareZenCrowd": "zencrowd",
    "Estimator": "_base",
    "clone": "_base",
    "Tags": "_tags",
    "get_tags": "_tags",
    "BinaryRelevance": "binary_relevance",
    "decide": "decision",
    "DECISIONS": "decision",
    "fit_distributed": "distributed",
    "DISTRIBUTED_METHODS": "distributed",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _DERIVED:
        value = _DERIVED[name]()
    elif name in _LAZY:
        value = getattr(_importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif not name.startswith("__") and name in _submodules():  # privtd.inference.glad, ...
        value = _importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_submodules()})


def _submodules() -> set[str]:
    import pkgutil

    return {module.name for module in pkgutil.iter_modules(__path__)}


class _Estimators(_Mapping[str, "type[Estimator]"]):
    """Method name -> estimator class, imported when looked up: listing the names imports none."""

    def __init__(self, names: _typing.Iterable[str]) -> None:
        self._names = tuple(names)

    def __getitem__(self, method: str) -> "type[Estimator]":
        if method not in self._names:
            raise KeyError(method)
        cls: type[Estimator] = __getattr__(_METHOD_SPECS[method].split(":")[1])
        return cls

    def __iter__(self) -> _Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, method: object) -> bool:
        return method in self._names

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{m!r}: {_METHOD_SPECS[m]!r}" for m in self._names) + "}"


#: Method name -> estimator class, for the estimators that fit any answers of their kind.
METHODS: "_Mapping[str, type[Estimator]]" = _Estimators(
    m for m in _METHOD_SPECS if m not in _RELEASE_ONLY
)

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


def all_estimators(
    *,
    kind: str | None = None,
    aware: bool | None = None,
    executor: str | None = None,
) -> list[tuple[str, "type[Estimator]"]]:
    """Every registered estimator as ``(method name, class)``, in the CLI's order.

    Imports every estimator module (the registry itself, :data:`METHODS`, does not). The
    filters keep the estimators whose tags (:func:`get_tags`) match. A class listed under two
    names (``glad`` and ``aware-glad``: :class:`GLAD` without and with a mechanism) is
    matched under each by that name's tags (its tags' ``aware_form`` for the aware name).

    Parameters
    ----------
    kind : {"categorical", "numeric"}, optional
        Only those that take this kind of answers.
    aware : bool, optional
        Only the perturbation-aware ones (True: they model a mechanism's channel and take it
        as their first parameter) or only the plain ones (False).
    executor : {"memory", "dask"}, optional
        Only those that run there (``"dask"``: :func:`fit_distributed`).

    Examples
    --------
    >>> from privtd.inference import all_estimators
    >>> [name for name, _ in all_estimators(kind="numeric", executor="dask")]
    ['crh', 'catd', 'gtm', 'raykar', 'sigma', 'mean', 'median']
    """
    from ._tags import EXECUTORS, method_tags

    if kind not in (None, "categorical", "numeric"):
        raise _ValidationError(
            f"The 'kind' argument of all_estimators must be 'categorical', 'numeric' or None. "
            f"Got {kind!r}."
        )
    if executor not in (None, *EXECUTORS):
        raise _ValidationError(
            f"The 'executor' argument of all_estimators must be one of "
            f"{', '.join(map(repr, EXECUTORS))} or None. Got {executor!r}."
        )
    found = []
    for method, spec in _METHOD_SPECS.items():
        cls: type[Estimator] = __getattr__(spec.split(":")[1])
        tags = method_tags(cls, method)
        if kind is not None and kind not in tags.kinds:
            continue
        if aware is not None and tags.aware != aware:
            continue
        if executor is not None and executor not in tags.executors:
            continue
        found.append((method, cls))
    return found


def _aware_method() -> dict[str, str]:
    from ._tags import method_tags

    table: dict[str, str] = {}
    for method, cls in all_estimators(aware=True):
        for mechanism in method_tags(cls, method).default_for:
            if mechanism in table:
                raise RuntimeError(
                    f"Both {table[mechanism]} and {method} are tagged the default for the "
                    f"{mechanism} mechanism; tag one."
                )
            table[mechanism] = method
    return table


def _aware_methods() -> frozenset[str]:
    return frozenset(method for method, _ in all_estimators(aware=True))


#: The lists read off the estimators' tags, built on first use (they import every estimator).
_DERIVED: dict[str, _typing.Callable[[], _typing.Any]] = {
    "AWARE_METHOD": _aware_method,
    "AWARE_METHODS": _aware_methods,
}

if _typing.TYPE_CHECKING:
    #: The perturbation-aware estimator for each mechanism that has one (its tags'
    #: ``default_for``): what ``privtd infer --mechanism NAME`` and the service pick when no
    #: method is given. Randomized response gets the Dawid-Skene model at every label count:
    #: over two labels with a learned class prior and the balanced decision (two coins per
    #: worker: on Duchenne and sentiment it beats the one-coin model at most epsilons), over
    #: more with a fixed uniform class prior (its ``class_prior="auto"``), which met the plain
    #: methods' balanced accuracy on the bundled sets over more than two labels where the
    #: one-coin model fell short of Dawid-Skene at high epsilon (docs/inference.md). Built from
    #: the tags on first use.
    AWARE_METHOD: dict[str, str]
    #: The estimators that take the mechanism as their first parameter (their tags name the
    #: mechanisms they model). Built from the tags on first use; :func:`takes_mechanism` asks
    #: about one method without importing the others.
    AWARE_METHODS: frozenset[str]


def aware_method(mechanism: _typing.Any) -> str | None:
    """The perturbation-aware estimator for a mechanism (see :data:`AWARE_METHOD`), or None."""
    from ._tags import method_tags

    name = getattr(mechanism, "name", "")
    table: dict[str, str] | None = globals().get("AWARE_METHOD")
    if table is not None:
        return table.get(name)
    # The first estimator tagged the default for it is the only one (building AWARE_METHOD
    # refuses two): stopping there spares ``privtd infer --mechanism`` importing the rest.
    for method, spec in _METHOD_SPECS.items():
        if name in method_tags(__getattr__(spec.split(":")[1]), method).default_for:
            return method
    return None


def takes_mechanism(method: str) -> bool:
    """Whether a method's estimator is perturbation-aware (takes the mechanism), importing
    that estimator only."""
    from ._tags import method_tags

    cls = METHODS.get(method) or RELEASE_METHODS.get(method)
    if cls is None:
        raise _ValidationError(
            f"Unknown method {method!r}. Choose one of {', '.join([*METHODS, *RELEASE_METHODS])}."
        )
    return method_tags(cls, method).aware


#: The estimators that need a mechanism's release of whole rows (see the table above).
RELEASE_METHODS: "_Mapping[str, type[Estimator]]" = _Estimators(_RELEASE_ONLY)


def make_estimator(method: str, **params: _typing.Any) -> "Estimator":
    """Build the estimator for a method name, passing ``params`` to its constructor.

    A plain model that takes a mechanism (``glad``, ``mace``, ``zencrowd``) given one is its
    aware form, as its constructor makes it: ``make_estimator("glad", mechanism=m)`` is
    ``make_estimator("aware-glad", mechanism=m)``; an aware form given none is the plain
    model (``privtd infer`` says so in a note).
    """
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
            f"{', '.join(accepted) or 'none'}.",
            param="method_params",
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
    return [
        p.name
        for p in _inspect.signature(cls).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "mechanism"
    ]
