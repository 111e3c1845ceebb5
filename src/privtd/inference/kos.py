"""KOS: message passing for binary labels (Karger, Oh & Shah, NIPS 2011)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._rng import RNGLike, check_rng
from ..answers import Answers
from ..errors import ValidationError
from ._em import EMEstimator, Fit, Largest, Model, Shape
from ._ops import shares, vote_matrix
from ._tags import Tags


def kos_start(part: Any, previous: Any, rng: RNGLike) -> tuple[Any, np.ndarray]:
    """The worker messages' random start ``y ~ N(1, 1)``, one per answer in input order, and
    the task messages they send."""
    sign = 2.0 * part.value - 1.0
    y = check_rng(rng).normal(1.0, 1.0, size=len(part.value))
    gold_sign = None
    if part.gold is not None:
        codes = part.gold_codes()
        gold_sign = np.where(codes >= 0, 2.0 * codes - 1.0, 0.0)
    return _send(part, sign, y, gold_sign)


def kos_pass(part: Any, previous: Any, reliability: np.ndarray) -> tuple[Any, Any]:
    """One round: each worker's message is its reliability less the answer's own term,
    scaled to largest magnitude 1; then the task messages they send. Statistics: the largest
    move of a worker message and each worker's reliability."""
    y, ax, sign, gold_sign = previous[0]
    new = reliability[part.worker] - ax
    scale = np.abs(new).max(initial=0.0)
    if scale > 0:
        new /= scale
    change = Largest(np.abs(new - y).max(initial=0.0))
    state, reliability = _send(part, sign, new, gold_sign)
    return state, (change, reliability)


def kos_finish(part: Any, previous: Any, _: Any) -> tuple[Any, None]:
    """The sign of each task's score (a tie: the plain majority vote) as one-hot
    probabilities, gold rows fixed."""
    y, _ax, sign, _g = previous[0]
    t, n_t = part.task, part.n_tasks
    score = np.bincount(t, weights=sign * y, minlength=n_t)
    votes = np.column_stack([np.maximum(-score, 0.0), np.maximum(score, 0.0)])
    tie = score == 0.0
    if tie.any():
        votes[tie] = vote_matrix(t, part.value, n_t, 2)[tie]
    proba = shares((votes == votes.max(axis=1, keepdims=True)).astype(np.float64))
    return (part.fix_labels(proba.argmax(axis=1)), part.fix_rows(proba)), None


def _send(
    part: Any, sign: np.ndarray, y: np.ndarray, gold_sign: np.ndarray | None
) -> tuple[Any, np.ndarray]:
    """The task messages ``x`` for the worker messages ``y``, kept as ``A x``, and each
    worker's reliability ``sum_i A_ij x_{i->j}``, which the next worker messages start from."""
    ax = sign * _task_messages(part.task, sign, y, part.n_tasks, gold_sign)
    reliability = np.bincount(part.worker, weights=ax, minlength=part.n_workers)
    return (y, ax, sign, gold_sign), reliability


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


class KOSModel(Model):
    """Not EM: KOS's message passing, a power iteration over the answers' messages. The state
    is the messages (per answer), the statistics each worker's reliability and the largest
    move of a message; the parameters the reliabilities. Stops when no message moved by more
    than ``tol``.

    In memory only: every round rescales each answer's message by the largest over all the
    answers (and gold tasks send the largest task message), a reduction within the round
    that a step summed over parts cannot make; and the random start is one draw per answer
    in input order."""

    start = staticmethod(kos_start)
    step = staticmethod(kos_pass)
    finish = staticmethod(kos_finish)

    def __init__(self, est: KOS) -> None:
        super().__init__(est.tol)
        self.start_arg = est.rng

    def init(self, stats: Any) -> np.ndarray:
        return np.asarray(stats)

    def m_step(self, stats: Any) -> np.ndarray:
        return np.asarray(stats[1])

    def objective(self, stats: Any) -> float:
        return float(stats[0])

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return objective[-1] <= self.tol


class KOS(EMEstimator):
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

    Runs on the EM engine (:class:`KOSModel`) in memory only: see its docstring.
    """

    __privtd_tags__ = Tags(
        "kos",
        binary_only=True,
        not_distributed=(
            "a round rescales every answer's message by the largest over all answers, a "
            "reduction inside the round, and its random start is one draw per answer in input order"
        ),
    )

    def __init__(self, max_iter: int = 100, tol: float = 1e-6, rng: RNGLike = 0) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.rng = rng

    def _model(self, shape: Shape) -> KOSModel:
        if shape.n_labels != 2:
            raise ValidationError(
                f"KOS is binary; these answers have {shape.n_labels} labels. "
                "Use DawidSkene (method 'ds') or MMSR (method 'mmsr') for more labels."
            )
        return KOSModel(self)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        reliability = fit.params
        top = np.abs(reliability).max(initial=0.0)
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=reliability / top if top > 0 else reliability,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
        )
