"""Dawid-Skene with full confusion matrices (Dawid & Skene 1979; docs/algorithms.md#dawid-skene)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold, WarmStart, _check_float, confusion_frame
from ._ops import shares, vote_matrix

EPS = 1e-10


def soft_majority(answers: Answers, gold: Gold | None, warm: WarmStart | None = None) -> np.ndarray:
    """Label frequencies per task, the usual EM start, or a warm start's posteriors where it
    has them; gold rows are one-hot."""
    votes = vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels)
    mu = shares(votes)
    if warm is not None:
        warm.apply(mu)
    return fix_gold(mu, gold)


def gold_array(gold: Gold | None, n_tasks: int) -> np.ndarray:
    """Per task, the gold label code, or -1 where there is none (the kernels' encoding)."""
    labels = np.full(n_tasks, -1, dtype=np.int64)
    if gold is not None:
        labels[gold.index] = gold.value
    return labels


def fix_gold(mu: np.ndarray, gold: Gold | None) -> np.ndarray:
    if gold is not None:
        mu[gold.index] = 0.0
        mu[gold.index, gold.value] = 1.0
    return mu


class DawidSkene(Estimator):
    """EM for per-worker confusion matrices ``pi_u[k, l] = P(answer k | truth l)``.

    Start: soft majority vote, the class prior from it, one M-step. Then E-step (posteriors in log
    space), prior update, M-step, until the change of the log-likelihood per answer is below
    ``tol``. The log-likelihood ``sum_q log sum_l p_l prod_u pi_u[x_uq, l]`` falls out of the
    E-step's normaliser, so the stopping test costs nothing extra; it equals the ELBO at the
    exact posterior and never decreases under EM.

    Parameters
    ----------
    max_iter : int, default 100
    tol : float, default 1e-5
        On the change in log-likelihood per answer (crowd-kit's rule and default).
    smoothing : float >= 0, default 0
        Pseudo-count added to every confusion cell before normalising (Laplace smoothing).
        Entries are clipped below at 1e-10 either way, so an unseen class gets a uniform column.

    Notes
    -----
    Fitted: ``truths_``, ``probas_``, ``priors_`` (Series), ``confusions_`` (DataFrame: rows
    (worker, label given), columns the true label, as crowd-kit's ``errors_``; the
    ``(n_workers, K, K)`` array ``[worker, answer, truth]`` is
    ``confusions_.to_numpy().reshape(n_workers, K, K)``),
    ``weights_`` (``weight`` = the prior-weighted accuracy ``sum_l p_l pi_u[l, l]``).
    """

    iterative = True
    warm_starts = True

    def __init__(self, max_iter: int = 100, tol: float = 1e-5, smoothing: float = 0.0) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.smoothing = smoothing

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float(type(self).__name__, "smoothing", self.smoothing, 0.0)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        n_t, n_w, k = answers.n_tasks, answers.n_workers, answers.n_labels
        layout = _kernels.TaskLayout(answers.task, answers.worker, answers.value, n_t)
        # Encoded once, reused by every iteration: row of (worker, answer) in the confusions.
        wx = layout.worker.astype(np.int64) * k + layout.value
        wx = wx.astype(np.int32) if n_w * k < 2**31 else wx
        gold_labels = gold_array(gold, n_t)
        mu = soft_majority(answers, gold, self._warm)
        prior = mu.mean(axis=0)
        counts = _kernels.gather_scatter(wx, layout.task, mu, n_w * k)
        confusion = self._normalise(self._start_counts(answers, counts), n_w, k)
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            # One fused pass: E-step with the current parameters, then the M-step's counts.
            # The log-likelihood is the E-step's normaliser, so the stopping test is free.
            mu, counts, prior_sum, loglik = _kernels.ds_step(
                layout, wx, np.log(confusion), np.log(np.maximum(prior, EPS)), gold_labels
            )
            objective.append(loglik / answers.n_answers)
            prior = prior_sum / n_t
            confusion = self._normalise(counts, n_w, k)
            if n_iter > 1 and objective[-1] - objective[-2] < self.tol:
                converged = True
                break
        cube = confusion.reshape(n_w, k, k)
        self.confusions_ = confusion_frame(answers, cube)
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        accuracy = (np.diagonal(cube, axis1=1, axis2=2) * prior).sum(axis=1)
        self._set_results(
            answers,
            mu.argmax(axis=1),
            proba=mu,
            weight=accuracy,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
        )

    def _start_counts(self, answers: Answers, counts: np.ndarray) -> np.ndarray:
        """The first M-step's counts, rows (worker, label given), columns the truth: what a
        variant seeds with prior knowledge of the workers (crowd-kit's ``initial_error``)."""
        return counts

    def _normalise(self, counts: np.ndarray, n_w: int, k: int) -> np.ndarray:
        """Confusion rows ``(n_workers * K, K)`` from M-step counts: smooth, clip, normalise."""
        counts += self.smoothing
        np.maximum(counts, EPS, out=counts)
        cube = counts.reshape(n_w, k, k)
        cube /= cube.sum(axis=1, keepdims=True)
        return counts
