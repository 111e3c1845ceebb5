"""The estimator contract every truth-inference algorithm follows (see STYLE.md, Estimators)."""

from __future__ import annotations

import numbers
import sys
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import pandas as pd

from .._repr import short_list
from ..answers import Answers, as_answers
from ..errors import ConvergenceWarning, NotFittedError, ValidationError
from . import _kernels
from ._tags import Tags

if TYPE_CHECKING:
    from .distributed import DistributedAnswers

GoldLike = pd.Series | Mapping[Hashable, Any] | None


def gold_series(gold: GoldLike) -> pd.Series | None:
    """``gold`` as a Series of task -> truth (None if empty), checked: one finite truth per
    task. Shared by the in-memory and the distributed fits."""
    if gold is None:
        return None
    series = gold if isinstance(gold, pd.Series) else pd.Series(dict(gold))
    if series.empty:
        return None
    if series.index.has_duplicates:
        dup = series.index[series.index.duplicated()][0]
        raise ValidationError(f"gold names task {dup!r} twice. Give one truth per task.")
    if series.isna().any():
        raise ValidationError(
            f"gold has a missing truth for task {series.index[series.isna().to_numpy()][0]!r}. "
            "Drop it or fill it."
        )
    return series


class Gold:
    """Gold truths for some tasks, coded against one :class:`Answers`."""

    __slots__ = ("index", "value")

    def __init__(self, index: np.ndarray, value: np.ndarray) -> None:
        self.index = index
        self.value = value

    @classmethod
    def encode(cls, answers: Answers, gold: GoldLike) -> Gold | None:
        series = gold_series(gold)
        if series is None:
            return None
        index = answers.encode_tasks(series.index, "gold")
        if answers.is_categorical:
            value = answers.encode_labels(pd.Index(series.to_numpy()), "gold")
        else:
            try:
                value = series.to_numpy(dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValidationError("gold truths for numeric answers must be numbers.") from exc
        return cls(index, value)


class WarmStart:
    """A previous fit's state (its ``warm_state_``) coded against new :class:`Answers`: per
    task, label probabilities (categorical; rows sum to 1) or a truth (numeric), for the tasks
    it names, and the model's global arrays by name (an estimator reads those it knows)."""

    __slots__ = ("index", "value", "model")

    def __init__(self, index: np.ndarray, value: np.ndarray, model: dict[str, np.ndarray]) -> None:
        self.index = index
        self.value = value
        self.model = model

    @classmethod
    def encode(cls, answers: Answers, state: Any, owner: str) -> WarmStart | None:
        if state is None:
            return None
        if isinstance(state, Estimator):
            state = state._warm_arrays()
        if not isinstance(state, Mapping) or not {"estimator", "tasks", "values"} <= set(state):
            raise ValidationError(
                "warm_start is a previous fit's warm_state_ (or the fitted estimator itself)."
            )
        if state["estimator"] != owner:
            raise ValidationError(
                f"warm_start comes from {state['estimator']}; this is {owner}. "
                "Start from a fit of the same method."
            )
        tasks = pd.Index(state["tasks"])
        # The usual case, a re-fit over the same task list, needs no lookup.
        same = tasks.equals(answers.tasks)
        index = np.arange(len(tasks)) if same else answers.encode_tasks(tasks, "warm_start")
        try:
            value = np.asarray(state["values"], dtype=np.float64)
            model = {k: np.asarray(v, dtype=np.float64) for k, v in state.get("model", {}).items()}
        except (TypeError, ValueError) as exc:
            raise ValidationError("warm_start values must be numbers.") from exc
        if answers.labels is not None:
            labels = pd.Index([] if state.get("labels") is None else state["labels"])
            columns = answers.encode_labels(labels, "warm_start")
            if value.shape != (len(index), len(columns)):
                raise ValidationError(
                    "warm_start values must hold one probability per label for each task."
                )
            rows = np.zeros((len(index), answers.n_labels))
            rows[:, columns] = value
            total = rows.sum(axis=1, keepdims=True)
            if not ((rows >= 0).all() and (total > 0).all() and np.isfinite(total).all()):
                raise ValidationError(
                    "warm_start probabilities must be finite, non-negative and not all zero."
                )
            value = rows / total
        elif value.shape != (len(index),) or not np.isfinite(value).all():
            raise ValidationError("warm_start values must be one finite truth per task.")
        return cls(index, value, model)

    def apply(self, initial: np.ndarray) -> np.ndarray:
        """``initial`` with the started tasks' rows replaced (in place; returned)."""
        initial[self.index] = self.value
        return initial

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """The model array ``name`` if the state has it with this shape (a state from a fit
        with other settings, e.g. another grid size, is an error rather than a silent skip)."""
        if name not in self.model:
            return None
        if self.model[name].shape != shape:
            raise ValidationError(
                f"warm_start's {name} has shape {self.model[name].shape}, not {shape}: it comes "
                "from a fit with other parameters. Start from a fit with the same ones."
            )
        return self.model[name]


def _on_cluster(answers: Any) -> bool:
    """Whether ``answers`` were ingested on a Dask cluster. Such answers exist only once their
    module is imported, so an in-memory fit never imports the Dask engine to ask."""
    ingested = sys.modules.get("privtd.inference.distributed._ingest")
    return ingested is not None and isinstance(answers, ingested.DistributedAnswers)


class Estimator(ABC):
    """Base class: ``fit(answers, *, gold=None) -> self``; results in attributes ending in ``_``.

    Fitted attributes
    -----------------
    truths_ : Series
        The inferred truth per task, indexed by task id, in the answers' original labels.
    probas_ : DataFrame or None
        Posterior per task and label (categorical models that have one).
    weights_ : DataFrame
        Per worker: ``weight`` (the model's quality score), ``n_answers`` and model-specific
        columns (accuracy, sensitivity, variance, ...).
    n_iter_ : int
    converged_ : bool
    objective_ : ndarray
        The objective after each iteration (what it is, is stated per estimator).

    crowd-kit's names answer too: ``labels_`` (``truths_``), ``skills_`` (``weights_["weight"]``
    as a Series), ``loss_history_`` (``objective_`` as a list) and ``errors_`` (the confusion
    matrices as a DataFrame indexed by (worker, label given), columns the true label; None for
    models without them).
    """

    #: What the class declares about itself (:func:`privtd.inference.get_tags` reads it with
    #: ``kinds``, ``warm_starts`` and ``iterative``): an unregistered estimator by default.
    __privtd_tags__: ClassVar[Tags] = Tags()
    kinds: ClassVar[tuple[str, ...]] = ("categorical",)
    iterative: ClassVar[bool] = False
    #: Whether ``fit`` takes ``warm_start=`` (iterative models that can resume from a previous
    #: fit's per-task posteriors or truths and global state).
    warm_starts: ClassVar[bool] = False
    #: How many iterations a fit stopped by its ``tol`` typically runs, for the kernel
    #: backend's choice (:meth:`_planned_passes`): at their default tol, Dawid-Skene took 5-31 on
    #: the bundled datasets and two synthetic 8,000-task sets, one-coin DS, ZenCrowd, weighted
    #: vote, GLAD and zero-based skill 2-22 (MMSR up to 29).
    typical_iterations: ClassVar[int] = 30
    #: Called as ``progress(n_iter, max_iter)`` after each iteration (the CLI's progress line).
    progress: Callable[[int, int], None] | None = None
    #: The smallest ``max_iter`` a fit takes. 0 (a variant's choice) returns the model's start.
    fewest_iterations: ClassVar[int] = 1

    # ---------------------------------------------------------------- public API
    def fit(
        self,
        answers: Answers | pd.DataFrame | DistributedAnswers,
        *,
        gold: GoldLike = None,
        warm_start: Any = None,
    ) -> Estimator:
        """Fit on ``answers``. ``gold`` fixes some tasks' truths. ``warm_start`` (a previous
        fit's ``warm_state_``, or that fitted estimator) resumes an iterative model from where
        it stopped instead of the usual first guess: after new answers arrive, few iterations
        are left to do. Tasks the state does not name start as usual.

        ``answers`` may also be answers ingested on a Dask cluster
        (:func:`privtd.inference.distributed.ingest`): the fit then runs there, as
        :func:`~privtd.inference.fit_distributed` runs it."""
        if _on_cluster(answers):
            from .distributed import fit_distributed

            if warm_start is not None:
                raise ValidationError(
                    "A fit on a cluster takes no warm_start; fit in memory to resume one."
                )
            return fit_distributed(self, cast("DistributedAnswers", answers), gold=gold)
        ans = as_answers(cast("Answers | pd.DataFrame", answers))
        if ans.kind not in self.kinds:
            raise ValidationError(
                f"{type(self).__name__} takes {' or '.join(self.kinds)} answers; these are "
                f"{ans.kind}. Pick another method or recode the answers (kind=...)."
            )
        self._validate_params()
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)
        if warm_start is not None and not self.warm_starts:
            raise ValidationError(f"{type(self).__name__} does not take a warm_start.")
        self._answers = ans
        self._warm = WarmStart.encode(ans, warm_start, self._warm_name)
        # Small fits run numpy's kernels, which have no set-up to pay (_kernels.backend_for).
        with _kernels.backend_for(ans.n_answers, self._planned_passes()) as backend:
            self._kernel_backend = backend  # which one ran: for tests and for profiling
            self._fit(ans, Gold.encode(ans, gold))
        return self

    def fit_predict(self, answers: Answers | pd.DataFrame, *, gold: GoldLike = None) -> pd.Series:
        return self.fit(answers, gold=gold).truths_

    def fit_predict_proba(
        self, answers: Answers | pd.DataFrame, *, gold: GoldLike = None
    ) -> pd.DataFrame:
        self.fit(answers, gold=gold)
        if self.probas_ is None:
            raise ValidationError(f"{type(self).__name__} has no per-task probabilities.")
        return self.probas_

    @property
    def warm_state_(self) -> dict[str, Any]:
        """What ``fit(..., warm_start=)`` resumes from, as plain lists (JSON-ready): the
        per-task posteriors (categorical) or truths (numeric; unanswered tasks left out) and
        the model's global arrays. In the same process, pass the fitted estimator instead: it
        skips the conversion, which can cost more than a fast fit. A model that takes no warm
        start has no such attribute (``hasattr`` is False, ``dir`` leaves it out)."""
        if not self.warm_starts:
            raise AttributeError(
                f"{type(self).__name__} takes no warm_start, so it has no warm_state_."
            )
        arrays = self._warm_arrays()
        return {
            "estimator": arrays["estimator"],
            "tasks": arrays["tasks"].tolist(),
            "values": arrays["values"].tolist(),
            "labels": None if arrays["labels"] is None else arrays["labels"].tolist(),
            "model": {k: np.asarray(v).tolist() for k, v in arrays["model"].items()},
        }

    @property
    def _warm_name(self) -> str:
        """The model a warm state names, which a warm start must name: the class's name."""
        return type(self).__name__

    def _warm_arrays(self) -> dict[str, Any]:
        if not self.warm_starts:
            raise ValidationError(f"{type(self).__name__} does not take a warm_start.")
        answers = self._answers
        if answers.labels is not None:
            assert self._proba is not None  # every warm-starting categorical model has them
            tasks, values = answers.tasks, self._proba
        else:
            known = ~np.isnan(self._truth_codes)
            tasks, values = answers.tasks[known], self._truth_codes[known]
        return {
            "estimator": self._warm_name,
            "tasks": tasks,
            "values": values,
            "labels": answers.labels,
            "model": self._model_state,
        }

    def get_params(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in vars(self).items()
            if not k.endswith("_") and not k.startswith("_") and k != "progress"
        }

    def set_params(self, **params: Any) -> Estimator:
        """Set parameters by name (those :meth:`get_params` lists); returns the estimator.
        As in ``__init__``, the values are checked when ``fit`` runs."""
        known = self.get_params()
        for key in params:
            if key not in known:
                raise ValidationError(
                    f"{type(self).__name__} has no parameter {key!r}; its parameters are "
                    f"{', '.join(known) or 'none'}."
                )
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        head = f"{type(self).__name__}({args})"
        summary = self._summary()
        if summary is None:
            return head
        return f"{head} fitted: " + ", ".join(f"{k}={v}" for k, v in summary.items())

    def _summary(self) -> dict[str, Any] | None:
        """What a fit found, for the reprs: None before fit."""
        if "truths_" not in vars(self):
            return None
        answers = self._answers
        out: dict[str, Any] = {
            "tasks": f"{answers.n_tasks:,}",
            "workers": f"{answers.n_workers:,}",
            "answers": f"{answers.n_answers:,}",
        }
        if answers.labels is not None:
            out["labels"] = short_list(answers.labels)
        if self.iterative:
            out["iterations"] = self.n_iter_
            out["converged"] = "yes" if self.converged_ else "no, stopped at max_iter"
        return out

    def _repr_html_(self) -> str:
        """A short summary in a notebook: the method, its parameters and what the fit found."""
        from html import escape

        from .._repr import html_table

        rows = [("parameters", ", ".join(f"{k}={v!r}" for k, v in self.get_params().items()))]
        summary = self._summary()
        rows += [("fitted", "no: call fit(answers)")] if summary is None else summary.items()
        return html_table(type(self).__name__, [(k, escape(str(v))) for k, v in rows])

    def __dir__(self) -> list[str]:
        # Every name listed reads: a model without warm starts has no warm_state_.
        names = super().__dir__()
        return [n for n in names if n != "warm_state_" or self.warm_starts]

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: crowd-kit's name for a fitted attribute (an
        # estimator that sets one itself, e.g. its own skills_, wins), a fitted attribute read
        # before fit, or a name this model does not have.
        fitted = "truths_" in self.__dict__
        alias = _CROWDKIT_ALIASES.get(name)
        if alias is not None and fitted:
            return alias(self)
        raise missing_attribute(self, name, fitted)

    # ---------------------------------------------------------------- for subclasses
    @abstractmethod
    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        """Fit on coded answers and call :meth:`_set_results`."""

    def _validate_params(self) -> None:
        """Check parameters at fit time (``__init__`` only stores them)."""
        params = self.get_params()
        if "max_iter" in params:
            _check_int(
                type(self).__name__, "max_iter", params["max_iter"], low=self.fewest_iterations
            )
        if params.get("tol") is not None:  # None: the estimator picks one for the data
            _check_float(type(self).__name__, "tol", params["tol"], low=0.0)

    def _planned_passes(self) -> int:
        """Passes over the answers this fit plans to make, which the default kernel backend
        weighs against numba's set-up (``_kernels.backend_for``): 1 for a one-shot model;
        ``max_iter`` when ``tol=0`` runs them all; else ``max_iter`` capped at
        :attr:`typical_iterations`, since most fits stop at their tolerance well before it."""
        if not self.iterative:
            return 1
        max_iter = int(getattr(self, "max_iter", 1))
        if getattr(self, "tol", None) == 0:
            return max_iter
        return min(max_iter, self.typical_iterations)

    def _tick(self, n_iter: int) -> None:
        if self.progress is not None:
            self.progress(n_iter, int(getattr(self, "max_iter", 1)))

    def _set_results(
        self,
        answers: Answers,
        truth: np.ndarray,
        *,
        proba: np.ndarray | None = None,
        weight: np.ndarray | None = None,
        worker_columns: Mapping[str, np.ndarray] | None = None,
        n_iter: int = 1,
        converged: bool = True,
        objective: list[float] | np.ndarray | None = None,
        model_state: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Map code-level results back to the original ids and labels, once. ``model_state``:
        the global arrays a warm start resumes from (see ``warm_state_``)."""
        if answers.labels is not None:
            self.truths_ = pd.Series(answers.labels.take(truth), index=answers.tasks, name="truth")
            self.probas_ = (
                None
                if proba is None
                else pd.DataFrame(proba, index=answers.tasks, columns=answers.labels)
            )
        else:
            self.truths_ = pd.Series(truth, index=answers.tasks, name="truth")
            self.probas_ = None
        self._truth_codes = truth
        self._proba = proba
        self._model_state = dict(model_state or {})
        columns: dict[str, np.ndarray] = {
            "weight": np.ones(answers.n_workers) if weight is None else weight,
            "n_answers": answers.worker_counts(),
        }
        columns.update(worker_columns or {})
        self.weights_ = pd.DataFrame(columns, index=answers.workers)
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        self.objective_ = np.asarray(objective if objective is not None else [], dtype=float)
        if self.iterative and not converged:
            warnings.warn(
                f"{type(self).__name__} stopped at max_iter={n_iter} before the change fell "
                f"below tol={getattr(self, 'tol_', getattr(self, 'tol', None))}; raise max_iter or "
                "tol.",
                ConvergenceWarning,
                stacklevel=3,
            )


def clone(estimator: Estimator) -> Estimator:
    """A new, unfitted estimator of the same class with the same parameters (the values
    themselves, not copies: privtd's mechanisms and parameters are immutable)."""
    if not isinstance(estimator, Estimator):
        raise ValidationError(f"clone takes a privtd estimator; got {type(estimator).__name__}.")
    return type(estimator)(**estimator.get_params())


def confusion_frame(answers: Answers, cube: np.ndarray) -> pd.DataFrame:
    """Confusion matrices ``cube[worker, answer, truth]`` (codes) as a labelled DataFrame, the
    shape crowd-kit's ``errors_`` has: rows a MultiIndex (worker, label given), columns the true
    label, each (worker, true label) column summing to 1 over its block. The array back:
    ``frame.to_numpy().reshape(n_workers, K, K)``."""
    assert answers.labels is not None
    n_w, k = len(answers.workers), len(answers.labels)
    index = pd.MultiIndex.from_product([answers.workers, answers.labels], names=["worker", "label"])
    columns = answers.labels.copy()
    columns.name = "truth"
    return pd.DataFrame(np.asarray(cube).reshape(n_w * k, k), index=index, columns=columns)


def _errors(est: Estimator) -> pd.DataFrame | None:
    """crowd-kit's ``errors_``: ``confusions_`` (None for models without per-worker ones)."""
    confusion = est.__dict__.get("confusions_")
    return confusion if isinstance(confusion, pd.DataFrame) else None


#: crowd-kit's attribute names, answered from privtd's (docs/reference.md): ``labels_`` is
#: ``truths_``, ``skills_`` the worker weight, ``loss_history_`` the objective as a list,
#: ``errors_`` the labelled confusions.
_CROWDKIT_ALIASES: dict[str, Callable[[Estimator], Any]] = {
    "labels_": lambda est: est.truths_,
    "skills_": lambda est: est.weights_["weight"].rename("skill").rename_axis("worker"),
    "loss_history_": lambda est: [float(v) for v in est.objective_],
    "errors_": _errors,
}


#: crowd-kit 1.4.2's fitted attribute names (its aggregation classes' attributes ending in
#: ``_``, and ``BinaryRelevance.aggregators_``) that no privtd estimator has under that name:
#: privtd's names for them are in docs/reference.md, "crowd-kit's names in privtd".
#: tests/test_contract.py checks that no privtd estimator sets one.
CROWDKIT_ONLY_NAMES = frozenset(
    {
        "aggregators_",
        "alphas_",
        "biases_",
        "embeddings_and_outputs_",
        "mv_",
        "posteriors_",
        "scores_",
        "segmentation_region_size_",
        "segmentations_",
        "segmentations_sizes_",
        "smoothing_",
        "spamming_",
        "strategy_priors_",
        "texts_",
        "theta_priors_",
        "thetas_",
    }
)

#: crowd-kit's names that some privtd estimators have too (``priors_``: Dawid-Skene's family;
#: ``betas_``: GLAD), or answer through :data:`_CROWDKIT_ALIASES`.
_CROWDKIT_SHARED_NAMES = frozenset(
    {"labels_", "probas_", "skills_", "errors_", "loss_history_", "priors_", "betas_"}
)


def missing_attribute(owner: object, name: str, fitted: bool) -> AttributeError:
    """The error for an attribute ``owner`` lacks (both subclass ``AttributeError``, so
    ``hasattr`` and ``getattr(est, name, default)`` work): before a fit, a fitted attribute's
    name (ending in ``_``) gets :class:`NotFittedError`; after it, the model has no such
    attribute, and the message lists those it has. A crowd-kit name points to the table of
    privtd's names for crowd-kit's, whether fitted or not."""
    cls = type(owner).__name__
    if not name.endswith("_") or name.startswith("_"):
        return AttributeError(f"{cls!r} object has no attribute {name!r}")
    crowdkit = name in CROWDKIT_ONLY_NAMES or name in _CROWDKIT_SHARED_NAMES
    where = (
        f' {name} is a crowd-kit name: docs/reference.md, "crowd-kit\'s names in privtd", '
        "gives privtd's name for each."
        if crowdkit
        else ""
    )
    if not fitted and name not in CROWDKIT_ONLY_NAMES:
        return NotFittedError(f"{cls}.{name} is not available: call fit(answers) first.{where}")
    if not fitted:
        return AttributeError(f"{cls} has no attribute {name!r}.{where}")
    have = {k for k in vars(owner) if k.endswith("_") and not k.startswith("_")}
    # Also the names answered without being set: crowd-kit's aliases and properties such as
    # warm_state_ (where the class has them).
    have |= set(_CROWDKIT_ALIASES) if isinstance(owner, Estimator) else set()
    have |= {k for k in dir(type(owner)) if k.endswith("_") and not k.startswith("_")}
    return AttributeError(
        f"{cls} has no attribute {name!r}; its fitted attributes are "
        f"{', '.join(sorted(have))}.{where}"
    )


def _check_int(owner: str, name: str, value: Any, low: int | None = None) -> None:
    if (
        not isinstance(value, numbers.Integral)
        or isinstance(value, bool)
        or (low is not None and value < low)
    ):
        raise ValidationError(
            f"The '{name}' parameter of {owner} must be an int >= {low}. Got {value!r}."
        )


def _check_float(
    owner: str,
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    ok = (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and bool(np.isfinite(float(value)))
    )
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        # Infinite values are never accepted, so an unbounded end is written open.
        lo = "(" if low_open or low is None else "["
        hi = ")" if high_open or high is None else "]"
        rng = f"{lo}{low if low is not None else '-inf'}, {high if high is not None else 'inf'}{hi}"
        raise ValidationError(
            f"The '{name}' parameter of {owner} must be a float in {rng}. Got {value!r}."
        )


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValidationError(
            f"The '{name}' parameter of {owner} must be one of "
            f"{', '.join(map(repr, choices))}. Got {value!r}."
        )
