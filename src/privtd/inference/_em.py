"""One EM loop for every model and every executor.

A model is its sufficient statistics. It names two steps that run on a part of the answers,
``start(part, previous, arg) -> (state, stats)`` and ``step(part, previous, params) ->
(state, stats)``, module-level functions so that a cluster can ship them; ``state`` is the
part's per-task result (posteriors, truths), which stays where the part is, and ``stats`` the
per-worker sums, which an executor adds up over the parts. From the summed statistics the
model makes its parameters (``init`` after the start, ``m_step`` after each step), its
objective and its stopping rule. :func:`run_em` drives any model on any executor:

- :class:`InMemory`: the whole answers as one part (privtd's estimators' ``fit``);
- the Dask executor in :mod:`privtd.inference.distributed` (one part per shard, summed by a
  tree reduction on the workers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold, WarmStart
from ._ops import SortedByTask, shares, vote_matrix

Step = Callable[[Any, Any, Any], tuple[Any, Any]]


class Largest(float):
    """A statistic the parts combine by their maximum (a largest change), not their sum."""


class Executor(Protocol):
    """Runs a step on every part and returns its statistics summed over the parts. ``outs``
    holds the parts' outputs of the last step, which the next receives as ``previous``; a fit
    that goes back to an earlier step (a dropped SQUAREM jump, a refit not kept) sets it back.
    ``has_gold``: whether the parts hold known truths."""

    outs: Any
    has_gold: bool

    def run(self, fn: Step, params: Any = None) -> Any: ...


class Model:
    """An iterative model as its per-part steps and what it makes of their summed statistics.

    Subclasses set :attr:`start` and :attr:`step` and implement :meth:`init` and
    :meth:`m_step` (or :meth:`update`, where the next parameters depend on those the step ran
    with); :meth:`objective` and :meth:`converged` give the stopping rule (the default: the
    objective rose by less than ``tol`` after the first iteration). An :attr:`accelerated`
    model also implements :meth:`jump` (see :func:`run_em`).
    """

    start: Step
    step: Step
    #: What ``start`` receives as its third argument.
    start_arg: Any = None
    #: A last step that turns each part's state into its results, where they differ.
    finish: Step | None = None
    #: Whether :func:`run_em` runs SQUAREM: every third step from :meth:`jump`.
    accelerated = False

    def __init__(self, tol: float) -> None:
        self.tol = tol

    def init(self, stats: Any) -> Any:
        """The first parameters, from the start's statistics."""
        raise NotImplementedError

    def step_params(self, params: Any) -> Any:
        """What ``step`` reads of the parameters (e.g. their logarithms)."""
        return params

    def m_step(self, stats: Any) -> Any:
        """The next parameters, from a step's statistics."""
        raise NotImplementedError

    def objective(self, stats: Any) -> float:
        """The objective a step's statistics give (``objective_``)."""
        raise NotImplementedError

    def update(self, stats: Any, used: Any) -> tuple[float, Any]:
        """The objective and the next parameters from a step's statistics and the parameters
        ``used`` it ran with: :meth:`objective` and :meth:`m_step`, which read the statistics
        alone, unless a model's next parameters also depend on its last ones."""
        return self.objective(stats), self.m_step(stats)

    def jump(self, start: Any, first: Any, second: Any) -> Any:
        """SQUAREM's extrapolation from the parameters before two plain steps and after each
        (an :attr:`accelerated` model's)."""
        raise NotImplementedError

    def keep_jump(self, objective: list[float], path: list[Any], jumped: Any, after: Any) -> bool:
        """Whether the step from the parameters ``jumped`` (extrapolated along ``path``, the
        parameters before and after the two plain steps), which gave ``after``, is kept: by
        default where its objective is no lower than the second plain step's."""
        return objective[-1] >= objective[-2]

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return n_iter > 1 and objective[-1] - objective[-2] < self.tol

    def finish_params(self, fit: Fit) -> Any:
        """What ``finish`` receives as its third argument."""
        return None


@dataclass
class Fit:
    """What :func:`run_em` found: the parameters after the last M-step, those the last step
    ran with (``used``: the ones the final per-task state comes from), the iterations run,
    whether the stopping rule ended them, the objective after each, the last statistics."""

    params: Any
    used: Any = None
    start_stats: Any = None
    n_iter: int = 0
    converged: bool = False
    objective: list[float] = field(default_factory=list)
    stats: Any = None


def run_em(
    model: Model,
    executor: Executor,
    max_iter: int,
    tick: Callable[[int], None] | None = None,
) -> Fit:
    """Start, then step and update until the model's stopping rule or ``max_iter``.

    An :attr:`~Model.accelerated` model runs SQUAREM (Varadhan and Roland 2008) in cycles: two
    plain steps, then one from the extrapolation along them (:meth:`Model.jump`). That step is
    kept where :meth:`Model.keep_jump` says; else it is dropped, its objective with it, and the
    fit goes on from the second plain step (so ``objective_`` keeps one value per step gone on
    from). Every step counts in ``max_iter`` and ``n_iter``; the stopping rule is tested after
    the plain steps; a cycle starts only where its three steps fit in ``max_iter``.
    """
    start = executor.run(model.start, model.start_arg)
    fit = Fit(model.init(start), start_stats=start)
    path: list[Any] = []  # SQUAREM: the parameters before and after the cycle's plain steps
    for n_iter in range(1, max_iter + 1):
        if tick is not None:
            tick(n_iter)
        plain = None
        if len(path) == 3:
            plain = fit.params, fit.used, fit.stats, executor.outs
            fit.params = model.jump(*path)
        fit.used = fit.params
        fit.stats = executor.run(model.step, model.step_params(fit.params))
        objective, fit.params = model.update(fit.stats, fit.used)
        fit.objective.append(objective)
        fit.n_iter = n_iter
        if plain is not None:
            if not model.keep_jump(fit.objective, path, fit.used, fit.params):
                fit.objective.pop()
                fit.params, fit.used, fit.stats, executor.outs = plain
            path = []
        elif model.converged(n_iter, fit.objective, fit.stats):
            fit.converged = True
            break
        elif path:
            path.append(fit.params)
        elif model.accelerated and n_iter + 2 <= max_iter:
            path = [fit.used, fit.params]
    return fit


@dataclass(frozen=True)
class Shape:
    """The sizes a model is built for, from :class:`~privtd.Answers` or the answers of a
    cluster alike, and each worker's number of answers."""

    n_tasks: int
    n_workers: int
    n_labels: int
    n_answers: int
    counts: np.ndarray

    @classmethod
    def of(cls, answers: Any) -> Shape:
        counts = answers.worker_counts() if hasattr(answers, "worker_counts") else answers.counts
        labels = answers.labels
        return cls(
            answers.n_tasks,
            answers.n_workers,
            0 if labels is None else len(labels),
            answers.n_answers,
            np.asarray(counts),
        )


class EMEstimator(Estimator):
    """An estimator whose fit is :func:`run_em` over the model :meth:`_model` builds, on any
    executor: ``fit`` runs it in memory, :func:`privtd.inference.fit_distributed` on a
    cluster, and :meth:`_finish` turns what it found into the fitted attributes."""

    iterative = True

    def _model(self, shape: Shape) -> Model:
        raise NotImplementedError

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        raise NotImplementedError

    def _run(self, executor: Executor, shape: Shape) -> Fit:
        """The fit on an executor, whose state is then the final per-task results: the model
        run by :func:`run_em`, then its ``finish`` (an estimator that runs several models,
        restarts, overrides this)."""
        model = self._model(shape)
        fit = run_em(model, executor, int(self.max_iter), self._tick)
        if model.finish is not None:
            executor.run(model.finish, model.finish_params(fit))
        return fit

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        executor = InMemory(MemoryPart(answers, gold, self._warm))
        fit = self._run(executor, Shape.of(answers))
        self._finish(answers, fit, *results(executor.state))

    max_iter: int


def results(state: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A part's final state as its truths and probabilities: a pair as it is, posteriors
    (one row per task) with their arg-max, truths alone without probabilities."""
    if isinstance(state, tuple):
        return state
    if state.ndim == 2:
        return state.argmax(axis=1), state
    return state, None


class MemoryPart:
    """All the answers as one part: the coded arrays in their input order, the layout sorted
    by task that the fused kernels read, the gold and a warm start."""

    def __init__(self, answers: Answers, gold: Gold | None, warm: WarmStart | None) -> None:
        self.task, self.worker, self.value = answers.task, answers.worker, answers.value
        self.n_tasks, self.n_workers = answers.n_tasks, answers.n_workers
        self.n_labels = answers.n_labels if answers.labels is not None else None
        self._layout: _kernels.TaskLayout | None = None
        self.gold = gold
        self.warm = warm
        self._wx: np.ndarray | None = None
        self._gold_codes: np.ndarray | None = None
        self._sorted: SortedByTask | None = None
        self._floats: np.ndarray | None = None

    @property
    def layout(self) -> _kernels.TaskLayout:
        """The answers sorted by task, which the fused kernels read; built on first use (the
        models without such a kernel never pay for the sort)."""
        if self._layout is None:
            self._layout = _kernels.TaskLayout(self.task, self.worker, self.value, self.n_tasks)
        return self._layout

    @property
    def sorted_task(self) -> np.ndarray:
        """Each answer's task in the layout's (task-sorted) order."""
        return self.layout.task

    def wx(self) -> np.ndarray:
        """Row of each answer in a confusion table, ``worker * K + answer``, in the layout's
        order; built once and reused by every step."""
        if self._wx is None:
            k = int(self.n_labels or 0)
            wx = self.layout.worker.astype(np.int64) * k + self.layout.value
            self._wx = wx.astype(np.int32) if self.n_workers * k < 2**31 else wx
        return self._wx

    def gold_codes(self) -> np.ndarray:
        """Per task, the gold label code, or -1 where there is none (the kernels' encoding)."""
        if self._gold_codes is None:
            self._gold_codes = np.full(self.n_tasks, -1, dtype=np.int64)
            if self.gold is not None:
                self._gold_codes[self.gold.index] = self.gold.value
        return self._gold_codes

    def fix_rows(self, proba: np.ndarray) -> np.ndarray:
        """``proba`` (a row per task) with the gold tasks' rows one-hot."""
        if self.gold is not None:
            proba[self.gold.index] = np.eye(proba.shape[1])[self.gold.value]
        return proba

    def value_floats(self) -> np.ndarray:
        """The answers as float64 (label codes as numbers), built once and reused by every
        step: a fresh copy per step costs page faults more than the arithmetic."""
        if self._floats is None:
            self._floats = self.value.astype(np.float64)
        return self._floats

    @property
    def sorted(self) -> SortedByTask:
        """The answers sorted by (task, value), for medians; built on first use, then kept."""
        if self._sorted is None:
            self._sorted = SortedByTask(self.task, self.value, self.n_tasks)
        return self._sorted

    def fix_values(self, truth: np.ndarray) -> np.ndarray:
        """Numeric ``truth`` with the gold tasks' set to their values."""
        if self.gold is not None:
            truth[self.gold.index] = self.gold.value
        return truth

    def fix_labels(self, truth: np.ndarray) -> np.ndarray:
        """``truth`` (one value per task) with the gold tasks' set to their label codes."""
        if self.gold is not None:
            truth[self.gold.index] = self.gold.value
        return truth

    def gold_values(self) -> np.ndarray | None:
        """Numeric answers' gold truths per task, NaN where none (None without gold)."""
        if self.gold is None:
            return None
        values = np.full(self.n_tasks, np.nan)
        values[self.gold.index] = self.gold.value
        return values

    def soft_start(self) -> np.ndarray:
        """Label frequencies per task, the usual EM start, or a warm start's posteriors where
        it has them; gold rows one-hot."""
        mu = shares(vote_matrix(self.task, self.value, self.n_tasks, int(self.n_labels or 0)))
        if self.warm is not None:
            self.warm.apply(mu)
        if self.gold is not None:
            mu[self.gold.index] = 0.0
            mu[self.gold.index, self.gold.value] = 1.0
        return mu


class InMemory:
    """The executor of an in-memory fit: one part, whose last output ``(state, stats)`` a
    step receives as ``previous``."""

    def __init__(self, part: Any) -> None:
        self.part = part
        self.outs: tuple[Any, Any] | None = None
        # A part that is not the answers (a pooled fit's rows of counts) holds no gold.
        self.has_gold = getattr(part, "gold", None) is not None

    @property
    def state(self) -> Any:
        """The part's per-task state after the last step."""
        assert self.outs is not None
        return self.outs[0]

    def run(self, fn: Step, params: Any = None) -> Any:
        self.outs = fn(self.part, self.outs, params)
        return self.outs[1]
