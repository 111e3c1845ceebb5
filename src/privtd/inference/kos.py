"""KOS: message passing for binary labels (Karger, Oh & Shah, NIPS 2011)."""

from __future__ import annotations

import numpy as np

from .._rng import RNGLike, check_rng
from ..answers import Answers
from ..errors import ValidationError
from ._base import Estimator, Gold
from ._ops import shares, vote_matrix


class KOS(Estimator):
    """The iterative algorithm of Karger, Oh & Shah (NIPS 2011, "Iterative learning for reliable
    crowdsourcing systems"), for two labels coded ``A = -1`` (first label) and ``+1`` (second).

    Each answer is an edge between its task ``i`` and worker ``j`` carrying two messages. Worker
    messages start at ``y_{j->i} ~ N(1, 1)`` (the paper's random start, drawn from ``rng``); one
    iteration sets ``x_{i->j} = sum_{j' != j} A_{ij'} y_{j'->i}`` (each task tells each of its
    workers what the others say) and ``y_{j->i} = sum_{i' != i} A_{i'j} x_{i'->j}`` (each worker's
    reliability as seen from its other tasks). The estimate is the sign of
    ``sum_j A_{ij} y_{j->i}``. Both sums are one ``bincount`` over the answers, less the edge's
    own term.

    The paper's messages grow geometrically; here ``y`` is divided by its largest magnitude after
    every iteration. A positive common factor changes no sign, so the labels are the paper's, and
    the fit can run to convergence where crowd-kit's unscaled messages overflow past 1e300 and
    stop early.

    Parameters
    ----------
    max_iter : int, default 100
        The paper's ``k_max`` (crowd-kit's ``n_iter``).
    tol : float, default 1e-6
        Stop when no scaled worker message moves by more than ``tol`` (max-norm; ``objective_``
        records it), i.e. the power iteration has settled.
    rng : Generator, int or None, default 0
        Seeds the random start (crowd-kit's ``random_state``, default 0 too).

    Notes
    -----
    ``probas_`` is the decision itself (one-hot; 1/2 each on a tie): KOS scores tasks but has no
    probability model. ``weights_["weight"]`` is the worker's reliability
    ``sum_i A_{ij} x_{i->j}``, scaled to largest magnitude 1. A task whose score is exactly 0
    (no other worker to compare with, e.g. a lone worker) keeps its plain majority vote. Gold
    tasks send ``x_{i->j} = +-max|x|`` (their label, as sure as the surest task).
    """

    iterative = True

    def __init__(self, max_iter: int = 100, tol: float = 1e-6, rng: RNGLike = 0) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.rng = rng

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        if answers.n_labels != 2:
            raise ValidationError(
                f"KOS is binary; these answers have {answers.n_labels} labels. "
                "Use DawidSkene (method 'ds') or MMSR (method 'mmsr') for more labels."
            )
        t, w = answers.task, answers.worker
        n_t, n_w = answers.n_tasks, answers.n_workers
        sign = 2.0 * answers.value - 1.0
        y = check_rng(self.rng).normal(1.0, 1.0, size=answers.n_answers)
        gold_sign = None
        if gold is not None:
            gold_sign = np.zeros(n_t)
            gold_sign[gold.index] = 2.0 * gold.value - 1.0
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            x = self._task_messages(t, sign, y, n_t, gold_sign)
            ax = sign * x
            new = np.bincount(w, weights=ax, minlength=n_w)[w] - ax
            scale = np.abs(new).max(initial=0.0)
            if scale > 0:
                new /= scale
            objective.append(float(np.abs(new - y).max(initial=0.0)))
            y = new
            if objective[-1] <= self.tol:
                converged = True
                break
        score = np.bincount(t, weights=sign * y, minlength=n_t)
        x = self._task_messages(t, sign, y, n_t, gold_sign)
        reliability = np.bincount(w, weights=sign * x, minlength=n_w)
        top = np.abs(reliability).max(initial=0.0)
        votes = np.column_stack([np.maximum(-score, 0.0), np.maximum(score, 0.0)])
        tie = score == 0.0
        if tie.any():
            votes[tie] = vote_matrix(t, answers.value, n_t, 2)[tie]
        proba = shares((votes == votes.max(axis=1, keepdims=True)).astype(np.float64))
        truth = proba.argmax(axis=1)
        if gold is not None:
            truth[gold.index] = gold.value
            proba[gold.index] = np.eye(2)[gold.value]
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=reliability / top if top > 0 else reliability,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
        )

    @staticmethod
    def _task_messages(
        t: np.ndarray, sign: np.ndarray, y: np.ndarray, n_t: int, gold_sign: np.ndarray | None
    ) -> np.ndarray:
        """``x_{i->j}``: the task's summed evidence less the receiving worker's own."""
        ay = sign * y
        x = np.bincount(t, weights=ay, minlength=n_t)[t] - ay
        if gold_sign is not None:
            known = gold_sign[t] != 0
            x[known] = gold_sign[t][known] * np.abs(x).max(initial=1.0)
        return x
