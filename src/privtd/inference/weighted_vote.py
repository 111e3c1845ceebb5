"""Log-odds weighted voting, the truth-discovery form of P0's analysis
(docs/algorithms.md#weighted-vote)."""

from __future__ import annotations

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold, _check_choice, _check_float
from ._ops import argmax_ties, per_worker, softmax_rows, vote_matrix
from .dawid_skene import gold_array


class WeightedVote(Estimator):
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

    iterative = True

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

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        t, w, x = answers.task, answers.worker, answers.value
        n_t, n_w, k = answers.n_tasks, answers.n_workers, answers.n_labels
        counts = answers.worker_counts()
        layout = _kernels.TaskLayout(t, w, x, n_t)
        gold_labels = gold_array(gold, n_t)
        truth = argmax_ties(vote_matrix(t, x, n_t, k), self.tie_break, self.rng)
        truth[gold_labels >= 0] = gold_labels[gold_labels >= 0]
        matches = _kernels.agreement(t, w, x, truth, n_w)
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            accuracy = per_worker(matches + self.smoothing / k, counts + self.smoothing, 1.0 / k)
            p = np.clip(accuracy, self.eta, 1.0 - self.eta)
            weight = np.log((k - 1) * p / (1.0 - p))
            if self.tie_break == "first":
                new, matches, log_post, changed = _kernels.vote_step(
                    layout, weight, truth, gold_labels, k
                )
            else:
                new, matches, log_post, changed = self._random_tie_step(
                    answers, weight, truth, gold_labels
                )
            objective.append(log_post)
            truth = new
            if changed <= self.tol:
                converged = True
                break
        proba = softmax_rows(_kernels.worker_votes(t, x, w, weight, n_t, k))
        if gold is not None:
            proba[gold.index] = np.eye(k)[gold.value]
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=weight,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"accuracy": accuracy},
        )

    def _random_tie_step(
        self, answers: Answers, weight: np.ndarray, truth: np.ndarray, gold: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, float, int]:
        """The iteration of :func:`_kernels.vote_step`, with ties broken at random."""
        t, w, x = answers.task, answers.worker, answers.value
        votes = _kernels.worker_votes(t, x, w, weight, answers.n_tasks, answers.n_labels)
        new = argmax_ties(votes, "random", self.rng)
        new[gold >= 0] = gold[gold >= 0]
        log_post = votes - votes.max(axis=1, keepdims=True)
        log_post -= np.log(np.exp(log_post).sum(axis=1, keepdims=True))
        chosen = float(log_post[np.arange(answers.n_tasks), new].sum())
        matches = np.bincount(w, weights=new[t] == x, minlength=answers.n_workers)
        return new, matches, chosen, int((new != truth).sum())
