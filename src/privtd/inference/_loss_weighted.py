"""The loop shared by truth-discovery methods that alternate 'weights from losses' and
'truths from weights': CRH, CATD, Raykar's real-valued model and P3's Algorithm 1.

Each subclass says which loss it uses and how a worker's summed loss becomes a weight.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from . import _kernels
from ._base import _check_choice
from ._em import EMEstimator, Fit, Largest, Model, Shape
from ._ops import (
    argmax_ties,
    largest_change,
    shares,
    task_mean,
    vote_matrix,
    weighted_mean_from_sums,
)

_FLOOR = 1e-12


class LossWeightedEstimator(EMEstimator):
    """Alternate a weight step and a truth step until the truths stop changing.

    Stopping rule: numeric answers stop when the largest absolute change of any task's truth
    (the max norm) is below ``tol``; categorical answers stop when the number of tasks whose
    label changed is at most ``tol`` (so the default waits for no change at all).
    ``objective_`` records ``sum_u weight_u * loss_u`` after each weight step.
    """

    kinds: ClassVar[tuple[str, ...]] = ("categorical", "numeric")
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

    def _numeric_loss(self) -> str:
        """The numeric loss a fit uses (a method, so that fit sets no public attribute)."""
        return self.numeric_loss

    @abstractmethod
    def _weights(self, loss: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Per-worker weight from the per-worker summed loss and answer count."""

    def _validate_params(self) -> None:
        super()._validate_params()
        if hasattr(self, "tie_break"):
            _check_choice(type(self).__name__, "tie_break", self.tie_break, ("first", "random"))

    def _model(self, shape: Shape) -> LossWeightedModel:
        return LossWeightedModel(self, shape)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        weight, loss = fit.used
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=weight,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"loss": loss},
        )


def _zero_one_loss(part: Any, truth: np.ndarray) -> np.ndarray:
    wrong = truth[part.task] != part.value
    return np.bincount(part.worker, weights=wrong, minlength=part.n_workers)


def lw_start(part: Any, previous: Any, arg: tuple[Any, ...]) -> tuple[Any, Any]:
    """Per part: the start (labels: the majority vote; numbers: the median or the mean, and
    each task's inverse answer spread where the losses are normalised; a warm start's and the
    gold truths where there are), then each worker's loss."""
    tie_break, rng, init, normalize_by_std, squared = arg
    t, w, x, n_t = part.task, part.worker, part.value, part.n_tasks
    warm = getattr(part, "warm", None)
    if part.n_labels is not None:
        votes = vote_matrix(t, x, n_t, int(part.n_labels))
        truth = argmax_ties(votes, tie_break, rng)
        if warm is not None:
            truth[warm.index] = warm.value.argmax(axis=1)
        truth = part.fix_labels(truth)
        return (truth, votes), (_zero_one_loss(part, truth), 0)
    truth = part.sorted.median() if init == "median" else task_mean(t, x, n_t)
    if warm is not None:
        warm.apply(truth)
    truth = part.fix_values(truth)
    inv_scale = np.ones(n_t)
    if normalize_by_std:
        n_q = np.maximum(np.bincount(t, minlength=n_t), 1)  # an unanswered task's scale is unused
        mean = np.bincount(t, weights=x, minlength=n_t) / n_q
        var = np.bincount(t, weights=(x - mean[t]) ** 2, minlength=n_t) / n_q
        inv_scale = 1.0 / np.maximum(np.sqrt(var), _FLOOR)
    loss = _kernels.worker_loss(t, w, x, truth, inv_scale, squared, part.n_workers)
    return (truth, inv_scale), (loss, Largest(0.0))


def lw_pass(part: Any, previous: Any, params: tuple[Any, ...]) -> tuple[Any, Any]:
    """Per part: the truths from the weights (a weighted vote; a weighted mean or median),
    how many labels changed or the largest change, then each worker's loss."""
    weight, tie_break, rng, squared = params
    t, w, x, n_t = part.task, part.worker, part.value, part.n_tasks
    if part.n_labels is not None:
        truth = previous[0][0]
        votes = _kernels.worker_votes(t, x, w, weight, n_t, int(part.n_labels))
        new = part.fix_labels(argmax_ties(votes, tie_break, rng))
        changed = int((new != truth).sum())
        return (new, votes), (_zero_one_loss(part, new), changed)
    truth, inv_scale = previous[0]
    if squared:
        num, den = _kernels.weighted_task_sums(t, w, x, weight, n_t)
        new = weighted_mean_from_sums(num, den, t, x, n_t)
    else:
        new = part.sorted.weighted_median(weight[w])
    new = part.fix_values(new)
    change = Largest(largest_change(new, truth))
    loss = _kernels.worker_loss(t, w, x, new, inv_scale, squared, part.n_workers)
    return (new, inv_scale), (loss, change)


def lw_finish(part: Any, previous: Any, _: Any) -> tuple[Any, None]:
    """Per part: labels with their weighted vote shares, or the numbers."""
    if part.n_labels is not None:
        truth, votes = previous[0]
        return (truth, shares(votes)), None
    return previous[0][0], None


class LossWeightedModel(Model):
    """Alternating weights and truths as a model: the statistics are each worker's summed loss
    and the truths' change; the parameters each worker's weight and the loss it came from."""

    start = staticmethod(lw_start)
    step = staticmethod(lw_pass)
    finish = staticmethod(lw_finish)

    def __init__(self, est: LossWeightedEstimator, shape: Shape) -> None:
        super().__init__(est.tol)
        self.est, self.shape = est, shape
        self.categorical = shape.n_labels > 0
        self.squared = est._numeric_loss() == "squared"
        self.ties = (getattr(est, "tie_break", "first"), getattr(est, "rng", None))
        self.start_arg = (*self.ties, est.init, est.normalize_by_std, self.squared)

    def init(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        loss = np.asarray(stats[0], dtype=np.float64)
        return self.est._weights(loss, self.shape.counts), loss

    m_step = init

    def step_params(self, params: Any) -> tuple[Any, ...]:
        self.current = params
        return (params[0], *self.ties, self.squared)

    def objective(self, stats: Any) -> float:
        weight, loss = self.current
        return float(weight @ loss)

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        if self.categorical:
            return int(stats[1]) <= self.tol
        return float(stats[1]) < self.tol
