"""M-MSR: robust rank-one completion of the workers' covariance (Ma & Olshevsky, NeurIPS 2020)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh

from .._rng import RNGLike, check_rng
from ..answers import Answers
from ._em import EMEstimator, Fit, Model, Shape
from ._ops import softmax_rows
from ._skill_vote import decide, skill_votes
from ._tags import Tags

#: Sign graphs up to this many nodes are solved densely (exact and fast); larger ones by ARPACK.
DENSE_EIGEN = 1500


def mmsr_start(part: Any, previous: Any, arg: Any) -> tuple[Any, Any]:
    """The workers' covariance ``C`` from all the answers, and what the M-MSR half-steps
    read of it: the overlapping pairs, ``|C|`` on them, the trim ``F`` and each group's
    layout. Statistics: ``C``, the common task counts and the number of answered tasks."""
    n_w = part.n_workers
    cov, common = MMSR.covariance(part)
    n_seen = int(np.count_nonzero(np.bincount(part.task, minlength=part.n_tasks)))
    rows, cols = np.nonzero(common)
    observed = np.abs(cov[rows, cols])
    coworkers = np.bincount(rows, minlength=n_w)
    # Not min(initial=0): that caps the minimum at 0, so F was always 0 and nothing was
    # trimmed. With no worker there is nothing to trim.
    f = max(int(coworkers.min()) // 2 - 1, 0) if n_w else 0
    layouts = group_layout(cols, n_w), group_layout(rows, n_w)
    return (rows, cols, observed, f, n_seen, layouts), (cov, common, n_seen)


def mmsr_pass(part: Any, previous: Any, params: tuple[np.ndarray, np.ndarray]) -> tuple[Any, Any]:
    """One M-MSR round: ``v`` then ``u`` as trimmed means of ``|C| / u`` and ``|C| / v``."""
    rows, cols, observed, f, n_seen, (by_col, by_row) = previous[0]
    u, v = params
    n_w = part.n_workers
    with np.errstate(divide="ignore", invalid="ignore"):
        v = trimmed_means(cols, observed / u[rows], v, f, n_w, n_seen, by_col)
        u = trimmed_means(rows, observed / v[cols], u, f, n_w, n_seen, by_row)
    return previous[0], (u, v)


def mmsr_finish(part: Any, previous: Any, weight: np.ndarray) -> tuple[Any, None]:
    """The vote weighted by ``weight`` and its softmax (a task whose voters all weigh 0: the
    plain majority vote), gold rows fixed."""
    scores = skill_votes(part, weight)
    truth, proba = decide(part, scores, softmax_rows(scores.copy()), None)
    assert proba is not None
    return (part.fix_labels(truth), part.fix_rows(proba)), None


class MMSRModel(Model):
    """Not EM: M-MSR's rank-one completion of the workers' covariance, whose rounds read the
    ``workers x workers`` covariance, not the answers. The statistics of a round are the new
    factors ``u`` and ``v``; its objective how far ``u v^T`` moved. Stops when that is below
    ``tol``.

    In memory only: the rounds and the sign determination work on the whole covariance (a
    global matrix completion and an eigenvector), which no part of the answers holds."""

    start = staticmethod(mmsr_start)
    step = staticmethod(mmsr_pass)
    finish = staticmethod(mmsr_finish)

    def __init__(self, est: MMSR, shape: Shape) -> None:
        super().__init__(est.tol)
        self.est, self.shape = est, shape
        self.rng = check_rng(est.rng)

    def init(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        self.cov, self.common, self.n_seen = stats
        return self.est._start(self.rng, self.shape.n_workers)

    def step_params(self, params: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        self.current = params
        return params

    def m_step(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        u, v = stats
        return u, v

    def objective(self, stats: Any) -> float:
        (u, v), (u_old, v_old) = stats, self.current
        return rank_one_distance(u, v, u_old, v_old)

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return objective[-1] < self.tol

    def finish_params(self, fit: Fit) -> np.ndarray:
        # The vote weights come from the factors and the covariance's signs; they, with the
        # accuracies, become the fit's parameters: what the vote and the results read.
        u, v = fit.params
        k = self.shape.n_labels
        norm_u = np.linalg.norm(u)
        magnitude = u * np.sqrt(np.linalg.norm(v) / norm_u) if norm_u > 0 else u
        s = magnitude * self.est.signs(self.cov, self.common, self.rng)
        root = 1.0 / np.sqrt(max(self.n_seen, 1))
        s = np.maximum(np.minimum(s, 1.0 - root), -1.0 / (k - 1) + root)
        p = s * (k - 1) / k + 1.0 / k
        weight = np.log(p * (k - 1) / (1.0 - p))
        fit.params = weight, p
        return weight


class MMSR(EMEstimator):
    """Worker reliabilities from the covariance of their answers, then a weighted vote (Ma &
    Olshevsky, "Adversarial crowdsourcing through robust rank-one matrix completion", NeurIPS
    2020), for the one-coin model where worker ``u`` is right with probability ``p_u``.

    1. For each pair of workers with common tasks, ``C_uv = K/(K-1) * agree_uv - 1/(K-1)``
       (``agree_uv``: the fraction of their common tasks answered alike), whose expectation is
       ``s_u s_v`` with ``s_u = (K p_u - 1)/(K - 1)``: a rank-one matrix seen only where workers
       overlap. Sparse products of worker x task indicators; never a task x worker array.
    2. M-MSR: alternately set each ``v_j`` to the trimmed mean of ``|C_ij| / u_i`` over the
       workers ``i`` that share tasks with ``j``, and each ``u_i`` likewise with ``v``. The trim
       drops the ``F`` values furthest above and the ``F`` furthest below the current value
       (all of one side if it has fewer than ``F``), ``F = floor(d/2) - 1`` with ``d`` the
       smallest number of co-workers, which bounds what adversarial workers can pull.
       Stop when ``||u v^T - u' v'^T||_F`` (all entries; ``objective_``) falls below ``tol``.
    3. ``|s| = u * sqrt(|v|/|u|)``; the signs come from the sign graph of ``C`` (an edge per
       negative entry, a path of two edges per positive one): the eigenvector of its random-walk
       matrix at the eigenvalue nearest -1 two-colours it, oriented so most workers are
       positive.
    4. ``s`` clipped to ``[-1/(K-1) + 1/sqrt(n), 1 - 1/sqrt(n)]`` (``n`` answered tasks), turned
       into ``p_u`` and the vote weight ``log(p_u (K-1) / (1-p_u))``; the label is the arg-max
       of the weighted votes and ``probas_`` their softmax (the one-coin posterior under a
       uniform prior).

    Where crowd-kit 1.4.2's ``MMSR`` differs, this follows the paper: crowd-kit also subtracts
    ``1/(K-1)`` from the pairs with no common task and from the diagonal, so its sign graph
    reads every non-overlapping pair as a negative correlation; with ``d <= 1`` its ``F = -1``
    keeps only the largest value (here ``F >= 0``); and it divides the weighted votes by their
    sum, which turns the arg-max into an arg-min for a task whose weights sum below 0.

    Parameters
    ----------
    max_iter : int, default 10000
    tol : float, default 1e-10
        crowd-kit's ``n_iter`` and ``tol``, same rule.
    rng : Generator, int or None, default 0
        Draws the uniform start of ``u`` and ``v`` (crowd-kit's ``random_state``) and ARPACK's
        start on large sign graphs.

    Notes
    -----
    The steps follow the authors' code (github.com/maqqbu/MMSR, MainProgram.m and
    sign_determination_valid.m), which fills ``C`` only where workers overlap and takes the
    arg-max of the raw weighted votes.

    ``weights_["weight"]`` (also ``skills_``) is the vote weight; ``weights_["accuracy"]`` is
    ``p_u``. A worker who shares no task with anyone gets weight 0; a task whose workers all
    weigh 0 keeps its plain majority vote.

    Runs on the EM engine (:class:`MMSRModel`) in memory only: see its docstring.
    """

    __privtd_tags__ = Tags(
        "mmsr",
        not_distributed=(
            "its rounds and signs work on the whole workers x workers covariance, not on shards"
        ),
    )

    def __init__(self, max_iter: int = 10000, tol: float = 1e-10, rng: RNGLike = 0) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.rng = rng

    def _model(self, shape: Shape) -> MMSRModel:
        return MMSRModel(self, shape)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        weight, p = fit.params
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=weight,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"accuracy": p},
        )

    def _start(self, rng: np.random.Generator, n_w: int) -> tuple[np.ndarray, np.ndarray]:
        """The uniform start of ``u`` and ``v``: independent draws (a variant may start both
        from one, as crowd-kit does)."""
        return rng.uniform(size=n_w), rng.uniform(size=n_w)

    @staticmethod
    def covariance(answers: Answers) -> tuple[np.ndarray, np.ndarray]:
        """``C`` (0 where two workers share no task, and on the diagonal) and the number of
        common tasks per pair, from sparse worker x task and worker x (task, label) indicators."""
        n_w, n_t, k = answers.n_workers, answers.n_tasks, answers.n_labels
        ones = np.ones(len(answers.worker))
        took = sp.csr_matrix((ones, (answers.worker, answers.task)), shape=(n_w, n_t))
        said = sp.csr_matrix(
            (ones, (answers.worker, answers.task.astype(np.int64) * k + answers.value)),
            shape=(n_w, n_t * k),
        )
        common = (took @ took.T).toarray()
        np.fill_diagonal(common, 0.0)
        alike = (said @ said.T).toarray()
        seen = common > 0
        cov = np.zeros((n_w, n_w))
        cov[seen] = k / (k - 1) * alike[seen] / common[seen] - 1.0 / (k - 1)
        return cov, common

    def signs(self, cov: np.ndarray, common: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Per worker +1 or -1 from the two-colouring of the sign graph (0: no nonzero entry)."""
        n_w = cov.shape[0]
        # A worker with no nonzero entry has no edge. The authors' code (and crowd-kit) test the
        # row sum instead, which also drops a worker whose entries happen to cancel (+1 and -1:
        # tests/test_crowdkit_methods.py's hand case) and leaves it unsigned.
        valid = np.flatnonzero(np.any(cov != 0.0, axis=1))
        out = np.zeros(n_w)
        if len(valid) == 0:
            return out
        sub = cov[np.ix_(valid, valid)]
        n = len(valid)
        neg_i, neg_j = np.nonzero(sub < 0)  # both directions already
        pos_i, pos_j = np.nonzero(np.triu(sub > 0, 1))
        mid = n + np.arange(len(pos_i))
        head = np.concatenate([neg_i, pos_i, mid, pos_j, mid])
        tail = np.concatenate([neg_j, mid, pos_i, mid, pos_j])
        size = n + len(pos_i)
        adjacency = sp.csr_matrix((np.ones(len(head)), (head, tail)), shape=(size, size))
        scale = 1.0 / np.sqrt(np.asarray(adjacency.sum(axis=1)).ravel())
        sym = sp.diags(scale) @ adjacency @ sp.diags(scale)
        if size <= DENSE_EIGEN:
            # Only the lowest pair: a fraction of a full decomposition's cost.
            _, vectors = eigh(sym.toarray(), subset_by_index=[0, 0], driver="evr")
            vector = vectors[:, 0]
        else:
            _, vectors = eigsh(sym, k=1, which="SA", v0=rng.uniform(size=size))
            vector = vectors[:, 0]
        colour = np.sign(vector[:n])
        orient = 1.0 if colour.sum() >= 0 else -1.0
        out[valid] = orient * colour
        return out


def group_layout(group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's members as one row of a ``(n_groups, largest group)`` index array, padded
    with -1, and the group sizes: fixed for a fit, so each half-step sorts small rows instead
    of all pairs (the worker pairs are already a dense ``workers x workers`` covariance)."""
    counts = np.bincount(group, minlength=n_groups)
    order = np.argsort(group, kind="stable")
    start = np.cumsum(counts) - counts
    width = int(counts.max()) if len(counts) else 0
    index = np.full((n_groups, width), -1, dtype=np.int64)
    index[group[order], np.arange(len(order)) - start[group[order]]] = order
    return index, counts


def trimmed_means(
    group: np.ndarray,
    values: np.ndarray,
    current: np.ndarray,
    f: int,
    n_groups: int,
    n_tasks: int,
    layout: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """One M-MSR half-step for all groups at once: per group, drop the ``f`` largest values
    above the group's current value (all above it if fewer than ``f``) and the ``f`` smallest
    below, and average the rest; a group left empty keeps its value, one left with a single 0
    gets ``1/sqrt(n_tasks)``. ``layout`` is :func:`group_layout`'s (computed when not given);
    each group's row is sorted, padded with NaN, which sorts last as a real NaN would."""
    index, counts = group_layout(group, n_groups) if layout is None else layout
    val = np.sort(np.where(index >= 0, values[index], np.nan), axis=1)
    rank = np.arange(index.shape[1])[None, :]
    count = counts[:, None]
    real = rank < count
    now = current[:, None]
    below = (real & (val < now)).sum(axis=1)[:, None]
    above = (real & (val > now)).sum(axis=1)[:, None]
    keep = real & np.where(below < f, val >= now, rank >= f)
    keep &= np.where(above < f, val <= now, rank < count - f)
    kept = keep.sum(axis=1)
    total = np.where(keep, val, 0.0).sum(axis=1)
    out = np.where(kept > 0, total / np.maximum(kept, 1), current)
    out[(kept == 1) & (total == 0)] = 1.0 / np.sqrt(max(n_tasks, 1))
    return out


def rank_one_distance(u: np.ndarray, v: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """``||u v^T - a b^T||_F`` without forming either matrix. Written through the changes
    ``du = u - a`` and ``dv = v - b`` (``du v^T + a dv^T``): expanding the two products instead
    cancels terms of size ``|u|^2 |v|^2`` and cannot resolve a change near ``tol``."""
    du, dv = u - a, v - b
    sq = (du @ du) * (v @ v) + (a @ a) * (dv @ dv) + 2.0 * (du @ a) * (v @ dv)
    return float(np.sqrt(max(sq, 0.0)))
