"""Vectorised building blocks shared by the estimators: scatter-adds over integer codes."""

from __future__ import annotations

import numpy as np

from .._rng import RNGLike, check_rng
from . import _kernels


def vote_matrix(
    task: np.ndarray,
    value: np.ndarray,
    n_tasks: int,
    n_labels: int,
) -> np.ndarray:
    """``M[t, k]`` = number of answers to task ``t`` with label ``k`` (one scatter-add)."""
    return _kernels.label_counts(task, value, n_tasks, n_labels)


def shares(votes: np.ndarray) -> np.ndarray:
    """Rows scaled to sum to 1; a task nobody answered gets the uniform row, not NaN (a NaN row
    would spread through every EM update that sums over tasks)."""
    total = votes.sum(axis=1, keepdims=True)
    return np.divide(votes, total, out=np.full(votes.shape, 1.0 / votes.shape[1]), where=total > 0)


def argmax_ties(scores: np.ndarray, tie_break: str = "first", rng: RNGLike = None) -> np.ndarray:
    """Row argmax; ties go to the smallest code ("first") or uniformly at random ("random")."""
    if tie_break == "first":
        return scores.argmax(axis=1)
    gen = check_rng(rng)
    top = scores.max(axis=1, keepdims=True)
    # Weighted votes are float sums, so "tied" means equal up to rounding.
    tied = scores >= top - 1e-9 * np.maximum(np.abs(top), 1.0)
    keys = gen.random(scores.shape) * tied
    return keys.argmax(axis=1)


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Row softmax in place (stable: subtract the row max first); returns the array."""
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def squarem_extrapolate(
    x0: np.ndarray, x1: np.ndarray, x2: np.ndarray, axis: int | None = None
) -> np.ndarray:
    """SQUAREM's jump (Varadhan and Roland 2008, scheme S3) from three successive EM states:
    with ``r = x1 - x0``, ``v = x2 - 2 x1 + x0`` and ``alpha = min(-|r| / |v|, -1)``, the state
    ``x0 - 2 alpha r + alpha^2 v``. At ``alpha = -1`` that is ``x2``, so the step is held there
    where the path speeds up. Norms over ``axis`` (None: the whole state) give one step length
    per slice, so independent problems (rows) each get their own."""
    r = x1 - x0
    v = x2 - x1 - r
    r_norm = np.sqrt((r * r).sum(axis=axis, keepdims=axis is not None))
    v_norm = np.sqrt((v * v).sum(axis=axis, keepdims=axis is not None))
    # v = 0 (a path of equal steps, in practice only a settled one, r = 0) gives no length.
    alpha = np.where(v_norm > 0, -r_norm / np.where(v_norm > 0, v_norm, 1.0), -1.0)
    alpha = np.minimum(alpha, -1.0)
    jump: np.ndarray = x0 - 2.0 * alpha * r + alpha * alpha * v
    return jump


def task_mean(task: np.ndarray, value: np.ndarray, n_tasks: int) -> np.ndarray:
    """The plain mean of each task's answers; NaN for a task nobody answered."""
    total = np.bincount(task, weights=value, minlength=n_tasks)
    count = np.bincount(task, minlength=n_tasks)
    return np.divide(total, count, out=np.full(n_tasks, np.nan), where=count > 0)


def per_worker(total: np.ndarray, counts: np.ndarray, idle: float) -> np.ndarray:
    """``total / counts`` per worker; a listed worker without answers (a campaign's enrolled
    worker who has not answered yet) gets ``idle``, the model's neutral value, not 0/0."""
    return np.divide(total, counts, out=np.full(counts.shape, float(idle)), where=counts > 0)


def largest_change(new: np.ndarray, old: np.ndarray) -> float:
    """max |new - old| over the tasks that have an estimate (NaN marks an unanswered task)."""
    return float(np.fmax.reduce(np.abs(new - old), initial=0.0))


def weighted_mean_from_sums(
    num: np.ndarray, den: np.ndarray, task: np.ndarray, value: np.ndarray, n_tasks: int
) -> np.ndarray:
    """``num / den`` per task; a task whose weights sum to 0 gets the plain mean, and one with
    no answers NaN (nothing is known of it)."""
    bad = ~(den > 0)
    if bad.any():
        num = np.where(bad, task_mean(task, value, n_tasks), num)
        den = np.where(bad, 1.0, den)
    return num / den


class SortedByTask:
    """Answers sorted once by (task, value), for weighted medians and per-task medians.

    The order never changes across iterations (only the weights do), so the sort is paid once.
    A task with no answers has median NaN.
    """

    def __init__(self, task: np.ndarray, value: np.ndarray, n_tasks: int) -> None:
        self.order = _kernels.sort_by_task_then_value(task, value, n_tasks)
        self.task = task[self.order]
        self.value = value[self.order]
        counts = np.bincount(task, minlength=n_tasks)
        self.start = np.concatenate(([0], np.cumsum(counts)[:-1]))
        self.counts = counts
        self.n_tasks = n_tasks
        self.empty = counts == 0

    def _pick(self, index: np.ndarray) -> np.ndarray:
        if not self.empty.any():
            return self.value[index]
        # An unanswered task's index points past its (empty) slice: read answer 0, then NaN.
        out = self.value[np.where(self.empty, 0, index)].astype(np.float64)
        out[self.empty] = np.nan
        return out

    def weighted_median(self, weight_per_answer: np.ndarray) -> np.ndarray:
        """First value per task where the cumulative weight reaches half the task's total.

        ``weight_per_answer`` must be non-negative.
        """
        w = weight_per_answer[self.order]
        cum = np.cumsum(w)
        total = np.bincount(self.task, weights=w, minlength=self.n_tasks)
        before = np.concatenate(([0.0], cum))[self.start]
        within = cum - before[self.task]
        reached = within >= 0.5 * total[self.task] - 1e-12 * np.abs(total[self.task])
        # Weights are non-negative, so within a task "reached" is False...False True...True and
        # the first True sits after the task's count of False: one bincount, no per-task loop.
        n_before = np.bincount(self.task, weights=~reached, minlength=self.n_tasks).astype(np.int64)
        # Float round-off in the global cumsum can leave the last answer just short of half.
        first = np.minimum(self.start + n_before, self.start + self.counts - 1)
        # A task whose weights are all zero falls back to its plain median.
        none = ~(total > 0)
        if none.any():
            first[none] = self.start[none] + (self.counts[none] - 1) // 2
        return self._pick(first)

    def median(self) -> np.ndarray:
        """Per-task median (mean of the two middle values for even counts)."""
        lo = self.start + (self.counts - 1) // 2
        hi = self.start + self.counts // 2
        return 0.5 * (self._pick(lo) + self._pick(hi))
