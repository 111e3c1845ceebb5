"""Log-odds weighted voting, the truth-discovery form of P0's analysis
(docs/algorithms.md#weighted-vote)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from . import _kernels
from ._base import _check_choice, _check_float
from ._em import EMEstimator, Fit, Model, Shape
from ._ops import argmax_ties, per_worker, softmax_rows, vote_matrix
from ._tags import MEMORY_AND_DASK, Tags


def wv_start(part: Any, previous: Any, ties: tuple[str, RNGLike]) -> tuple[np.ndarray, Any]:
    """Per part: the majority vote (ties broken as asked, gold fixed) and each worker's
    number of answers equal to it."""
    k = int(part.n_labels)
    truth = part.fix_labels(argmax_ties(vote_matrix(part.task, part.value, part.n_tasks, k), *ties))
    return truth, _kernels.agreement(part.task, part.worker, part.value, truth, part.n_workers)


def wv_pass(part: Any, previous: Any, params: tuple[Any, ...]) -> tuple[np.ndarray, Any]:
    """Per part: the vote weighted by ``weight`` (ties as asked), each worker's agreement
    with it, the summed log-posterior of the chosen labels and how many labels changed."""
    weight, tie_break, rng = params
    truth, k = previous[0], int(part.n_labels)
    if tie_break == "first":
        new, matches, log_post, changed = _kernels.vote_step(
            part.layout, weight, truth, part.gold_codes(), k
        )
        return new, (matches, log_post, changed)
    t, w, x = part.task, part.worker, part.value
    votes = _kernels.worker_votes(t, x, w, weight, part.n_tasks, k)
    new = part.fix_labels(argmax_ties(votes, "random", rng))
    log_post = votes - votes.max(axis=1, keepdims=True)
    log_post -= np.log(np.exp(log_post).sum(axis=1, keepdims=True))
    chosen = float(log_post[np.arange(part.n_tasks), new].sum())
    matches = np.bincount(w, weights=new[t] == x, minlength=part.n_workers)
    return new, (matches, chosen, int((new != truth).sum()))


def wv_finish(part: Any, previous: Any, weight: np.ndarray) -> tuple[Any, None]:
    """Per part: the labels and the softmax of the weighted votes (gold rows one-hot)."""
    k = int(part.n_labels)
    votes = _kernels.worker_votes(part.task, part.value, part.worker, weight, part.n_tasks, k)
    return (previous[0], part.fix_rows(softmax_rows(votes))), None


class WeightedVoteModel(Model):
    """The weighted vote as an iteration over per-worker agreement counts; parameters: the
    log-odds weights and the accuracies they come from. Stops when at most ``tol`` labels
    change."""

    start = staticmethod(wv_start)
    step = staticmethod(wv_pass)
    finish = staticmethod(wv_finish)

    def __init__(self, est: WeightedVote, shape: Shape) -> None:
        super().__init__(est.tol)
        self.est, self.shape = est, shape
        self.start_arg = (est.tie_break, est.rng)

    def init(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        k, est = self.shape.n_labels, self.est
        accuracy = per_worker(stats + est.smoothing / k, self.shape.counts + est.smoothing, 1.0 / k)
        p = np.clip(accuracy, est.eta, 1.0 - est.eta)
        return np.log((k - 1) * p / (1.0 - p)), accuracy

    def step_params(self, params: Any) -> tuple[Any, ...]:
        return params[0], self.est.tie_break, self.est.rng

    def m_step(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.init(np.asarray(stats[0], dtype=np.float64))

    def objective(self, stats: Any) -> float:
        return float(stats[1])

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return int(stats[2]) <= self.tol

    def finish_params(self, fit: Fit) -> Any:
        return fit.used[0]


class WeightedVote(EMEstimator):
    """Weighted vote with weights ``w_u = log((K - 1) p_u / (1 - p_u))`` (P0 Sec. 6.2).

    ``p_u`` is the fraction of the worker's answers that match the current aggregate. Weights are
    signed: a worker who agrees less often than chance gets a negative weight, so their answers
    count against the label they gave. That is what lets truth discovery recover workers whose
    two-layer flip probability exceeds 1/2 (docs/algorithms.md#td-means-the-signed-weighted-vote).

    Parameters
    ----------
    eta : float in (0, 0.5)
        ``p_u`` is clipped to ``[eta, 1 - eta]``, capping weights at ``log((K-1)(1-eta)/eta)``.
        Default 0.01.
    smoothing : float >= 0
        Pseudo-answers at chance level added to each worker: ``p_u = (matches + smoothing / K) /
        (n_u + smoothing)``. Shrinks workers with few answers towards weight 0. Default 0 (none).
    max_iter, tol : stop when at most ``tol`` task labels change in an iteration.
    tie_break, rng : how tied votes are broken.

    Notes
    -----
    Starts from uniform weights (the majority vote). ``probas_`` is the softmax of the weighted
    votes, which is the posterior of the one-coin model with these weights and a uniform prior.
    ``objective_`` records the summed log-posterior of the chosen labels.
    """

    __privtd_tags__ = Tags("wv", executors=MEMORY_AND_DASK)

    def __init__(
        self,
        eta: float = 0.01,
        smoothing: float = 0.0,
        max_iter: int = 100,
        tol: float = 0.0,
        tie_break: str = "first",
        rng: RNGLike = None,
    ) -> None:
        self.eta = eta
        self.smoothing = smoothing
        self.max_iter = max_iter
        self.tol = tol
        self.tie_break = tie_break
        self.rng = rng

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float("WeightedVote", "eta", self.eta, 0.0, 0.5, low_open=True, high_open=True)
        _check_float("WeightedVote", "smoothing", self.smoothing, 0.0)
        _check_choice("WeightedVote", "tie_break", self.tie_break, ("first", "random"))

    def _model(self, shape: Shape) -> WeightedVoteModel:
        return WeightedVoteModel(self, shape)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        weight, accuracy = fit.used
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=weight,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"accuracy": accuracy},
        )
