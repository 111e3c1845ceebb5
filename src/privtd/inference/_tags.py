"""What an estimator class declares about itself (its tags), read by the method registry, the
command line, the Dask engine and :mod:`privtd.utils.estimator_checks`.

No numpy here: the command line reads this module on its fast path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Where a fit can run: ``"memory"`` (``estimator.fit``) and ``"dask"`` (:func:`fit_distributed`).
EXECUTORS = ("memory", "dask")
MEMORY = ("memory",)
MEMORY_AND_DASK = ("memory", "dask")


@dataclasses.dataclass(frozen=True)
class Tags:
    """An estimator's tags: a class declares them as ``__privtd_tags__ = Tags(...)``.

    Read them with :func:`get_tags`, which adds what the class already states in the attributes
    its ``fit`` acts on (``kinds``, ``warm_starts``, ``iterative``), so that the two cannot
    disagree. A subclass inherits its parent's tags; it declares its own where one differs
    (a registered method always declares its ``name``).

    Parameters
    ----------
    name : str or None
        The method's name in :func:`make_estimator` and ``privtd infer --method``; None for an
        estimator that is not registered (a third party's, or a base class).
    binary_only : bool
        Whether the fit refuses answers over more than two labels.
    mechanisms : tuple of str
        The mechanisms (:data:`privtd.mechanisms.MECHANISMS` names) whose channel the
        estimator models: a perturbation-aware estimator takes the mechanism as its first
        parameter. Empty for a plain estimator.
    default_for : tuple of str
        The mechanisms this estimator is the default perturbation-aware method for (what
        ``privtd infer --mechanism NAME`` runs with no ``--method``); a subset of
        ``mechanisms``, and each mechanism has at most one.
    release_only : bool
        Whether the estimator reads only a mechanism's release of whole rows (every
        (worker, task) cell reported), so that it needs its mechanism.
    executors : tuple of str
        Where a fit runs: ``"memory"``, and ``"dask"`` where :func:`fit_distributed` has a
        driver for exactly this class.
    not_distributed : str or None
        Why the estimator does not run on a Dask cluster, where its structure gives a reason
        (one clause, for the refusal).
    aware_form : Tags or None
        For a plain model whose ``mechanism`` parameter composes a mechanism's channel into its
        likelihood (GLAD, MACE, ZenCrowd): the tags of that perturbation-aware form, which the
        registry lists under its own method name (``aware-glad``) beside the plain one, and
        which :func:`get_tags` returns for an instance given a mechanism. None for a class with
        one form.

    Attributes
    ----------
    kinds : tuple of str
        The answer kinds the fit takes (``"categorical"``, ``"numeric"``): the class's
        ``kinds``.
    warm_start : bool
        Whether ``fit`` takes ``warm_start=``: the class's ``warm_starts``.
    iterative : bool
        Whether the fit iterates (and so takes ``max_iter`` and ``tol``): the class's
        ``iterative``.
    """

    name: str | None = None
    binary_only: bool = False
    mechanisms: tuple[str, ...] = ()
    default_for: tuple[str, ...] = ()
    release_only: bool = False
    executors: tuple[str, ...] = MEMORY
    not_distributed: str | None = None
    aware_form: Tags | None = None
    kinds: tuple[str, ...] = dataclasses.field(default=("categorical",), init=False)
    warm_start: bool = dataclasses.field(default=False, init=False)
    iterative: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self) -> None:
        unknown = [e for e in self.executors if e not in EXECUTORS]
        if unknown or "memory" not in self.executors:
            raise ValueError(
                f"Tags.executors must include 'memory' and name only {', '.join(EXECUTORS)}. "
                f"Got {self.executors!r}."
            )
        if not set(self.default_for) <= set(self.mechanisms):
            raise ValueError(
                f"Tags.default_for {self.default_for!r} names a mechanism outside "
                f"mechanisms {self.mechanisms!r}."
            )
        form = self.aware_form
        if form is not None and (self.aware or not form.aware or not form.name or form.aware_form):
            raise ValueError(
                "Tags.aware_form is the form of a plain model given a mechanism: the plain "
                "tags name no mechanisms, and the form names its method and its mechanisms. "
                f"Got {self!r}."
            )

    @property
    def aware(self) -> bool:
        """Whether the estimator models a mechanism's channel (takes ``mechanism``)."""
        return bool(self.mechanisms)


def get_tags(estimator: Any) -> Tags:
    """The tags of an estimator or estimator class: its declared ``__privtd_tags__`` (defaults
    where it declares none) with ``kinds``, ``warm_start`` and ``iterative`` read from the
    class. For an instance given a mechanism, of a class whose tags have an ``aware_form``:
    that form's tags."""
    cls = estimator if isinstance(estimator, type) else type(estimator)
    declared = getattr(cls, "__privtd_tags__", None)
    if declared is None:
        declared = Tags()
    elif not isinstance(declared, Tags):
        raise TypeError(
            f"{cls.__name__}.__privtd_tags__ must be a privtd.inference.Tags; got "
            f"{type(declared).__name__}."
        )
    form = declared.aware_form
    if form is not None:
        if cls is not estimator and getattr(estimator, "mechanism", None) is not None:
            return _with_class_attributes(form, cls)
        declared = dataclasses.replace(declared, aware_form=_with_class_attributes(form, cls))
    return _with_class_attributes(declared, cls)


def _with_class_attributes(declared: Tags, cls: type) -> Tags:
    """A copy of ``declared`` with the tags the class's own attributes state."""
    tags = dataclasses.replace(declared)
    object.__setattr__(tags, "kinds", tuple(getattr(cls, "kinds", ("categorical",))))
    object.__setattr__(tags, "warm_start", bool(getattr(cls, "warm_starts", False)))
    object.__setattr__(tags, "iterative", bool(getattr(cls, "iterative", False)))
    return tags


def method_tags(cls: type, method: str) -> Tags:
    """The tags a class is registered with under a method name: its own, or its aware form's
    where the name is that form's (``aware-glad`` for :class:`GLAD`)."""
    tags = get_tags(cls)
    if tags.aware_form is not None and tags.aware_form.name == method:
        return tags.aware_form
    return tags


#: The randomized-response mechanisms, whose channel the aware forms of the plain categorical
#: models compose with their model.
RANDOMIZED_RESPONSE = ("one-layer", "two-layer", "binary-rr")
