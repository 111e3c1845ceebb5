"""The loop shared by truth-discovery methods that alternate 'weights from losses' and
'truths from weights': CRH, CATD, Raykar's real-valued model and P3's Algorithm 1.

Each subclass says which loss it uses and how a worker's summed loss becomes a weight.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold, _check_choice
from ._ops import (
    SortedByTask,
    argmax_ties,
    largest_change,
    shares,
    task_mean,
    vote_matrix,
    weighted_mean_from_sums,
)

_FLOOR = 1e-12


class LossWeightedEstimator(Estimator):
    """Alternate a weight step and a truth step until the truths stop changing.

    Stopping rule: numeric answers stop when the largest absolute change of any task's truth
    (the max norm) is below ``tol``; categorical answers stop when the number of tasks whose
    label changed is at most ``tol`` (so the default waits for no change at all).
    ``objective_`` records ``sum_u weight_u * loss_u`` after each weight step.
    """

    kinds: ClassVar[tuple[str, ...]] = ("categorical", "numeric")
    iterative = True
    warm_starts = True
    #: "squared" or "absolute" for numeric answers; categorical answers always use 0-1 loss.
    numeric_loss: str = "squared"
    #: Divide numeric losses by each task's answer standard deviation (CRH does, CATD does not).
    normalize_by_std: bool = False
    #: How numeric answers start: "median" or "mean".
    init: str = "median"

    max_iter: int
    tol: float
    tie_break: str
    rng: RNGLike

    @abstractmethod
    def _weights(self, loss: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Per-worker weight from the per-worker summed loss and answer count."""

    def _validate_params(self) -> None:
        super()._validate_params()
        if hasattr(self, "tie_break"):
            _check_choice(type(self).__name__, "tie_break", self.tie_break, ("first", "random"))

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        if answers.is_categorical:
            self._fit_categorical(answers, gold)
        else:
            self._fit_numeric(answers, gold)

    def _fit_categorical(self, answers: Answers, gold: Gold | None) -> None:
        t, w, x = answers.task, answers.worker, answers.value
        n_t, n_w, k = answers.n_tasks, answers.n_workers, answers.n_labels
        counts = answers.worker_counts()
        tie_break = getattr(self, "tie_break", "first")
        rng = getattr(self, "rng", None)
        votes = vote_matrix(t, x, n_t, k)
        truth = argmax_ties(votes, tie_break, rng)
        if self._warm is not None:
            truth[self._warm.index] = self._warm.value.argmax(axis=1)
        if gold is not None:
            truth[gold.index] = gold.value
        objective: list[float] = []
        converged = False
        weight = np.ones(n_w)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 - n_iter is read after the loop
            self._tick(n_iter)
            loss = np.bincount(w, weights=truth[t] != x, minlength=n_w)
            weight = self._weights(loss, counts)
            objective.append(float(weight @ loss))
            votes = _kernels.worker_votes(t, x, w, weight, n_t, k)
            new = argmax_ties(votes, tie_break, rng)
            if gold is not None:
                new[gold.index] = gold.value
            changed = int((new != truth).sum())
            truth = new
            if changed <= self.tol:
                converged = True
                break
        proba = shares(votes)
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=weight,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"loss": loss},
        )

    def _fit_numeric(self, answers: Answers, gold: Gold | None) -> None:
        t, w, x = answers.task, answers.worker, answers.value
        n_t, n_w = answers.n_tasks, answers.n_workers
        counts = answers.worker_counts()
        sorted_ = (
            SortedByTask(t, x, n_t)
            if (self.init == "median" or self.numeric_loss == "absolute")
            else None
        )
        if self.init == "median":
            assert sorted_ is not None
            truth = sorted_.median()
        else:
            truth = task_mean(t, x, n_t)
        if self._warm is not None:
            self._warm.apply(truth)
        if gold is not None:
            truth[gold.index] = gold.value
        inv_scale = np.ones(n_t)
        if self.normalize_by_std:
            n_q = np.maximum(answers.task_counts(), 1)  # an unanswered task's scale is unused
            mean = np.bincount(t, weights=x, minlength=n_t) / n_q
            var = np.bincount(t, weights=(x - mean[t]) ** 2, minlength=n_t) / n_q
            inv_scale = 1.0 / np.maximum(np.sqrt(var), _FLOOR)
        squared = self.numeric_loss == "squared"
        objective: list[float] = []
        converged = False
        weight = np.ones(n_w)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            loss = _kernels.worker_loss(t, w, x, truth, inv_scale, squared, n_w)
            weight = self._weights(loss, counts)
            objective.append(float(weight @ loss))
            if squared:
                num, den = _kernels.weighted_task_sums(t, w, x, weight, n_t)
                new = weighted_mean_from_sums(num, den, t, x, n_t)
            else:
                assert sorted_ is not None
                new = sorted_.weighted_median(weight[w])
            if gold is not None:
                new[gold.index] = gold.value
            change = largest_change(new, truth)
            truth = new
            if change < self.tol:
                converged = True
                break
        self._set_results(
            answers,
            truth,
            weight=weight,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"loss": loss},
        )
