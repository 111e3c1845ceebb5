"""Dawid-Skene with full confusion matrices (Dawid & Skene 1979; SPEC A5)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..answers import Answers
from ._base import Estimator, Gold, _check_float
from ._ops import logsumexp_rows, softmax_rows, vote_matrix

EPS = 1e-10


def soft_majority(answers: Answers, gold: Gold | None) -> np.ndarray:
    """Label frequencies per task, the usual EM start; gold rows are one-hot."""
    votes = vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels)
    mu = votes / votes.sum(axis=1, keepdims=True)
    return fix_gold(mu, gold)


def fix_gold(mu: np.ndarray, gold: Gold | None) -> np.ndarray:
    if gold is not None:
        mu[gold.index] = 0.0
        mu[gold.index, gold.value] = 1.0
    return mu


class DawidSkene(Estimator):
    """EM for per-worker confusion matrices ``pi_u[k, l] = P(answer k | truth l)`` (SPEC A5).

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

    Fitted: ``truths_``, ``probas_``, ``priors_`` (Series), ``confusions_`` (array of shape
    ``(n_workers, K, K)`` indexed ``[worker, answer, truth]`` in ``answers.labels`` order),
    ``weights_`` (``weight`` = the prior-weighted accuracy ``sum_l p_l pi_u[l, l]``).
    """

    iterative = True

    def __init__(self, max_iter: int = 100, tol: float = 1e-5, smoothing: float = 0.0) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.smoothing = smoothing

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float(type(self).__name__, "smoothing", self.smoothing, 0.0)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        t, n_t, n_w, k = answers.task, answers.n_tasks, answers.n_workers, answers.n_labels
        # Encoded once, reused by every M-step and E-step.
        wx = answers.worker.astype(np.int64) * k + answers.value
        mu = soft_majority(answers, gold)
        prior = mu.mean(axis=0)
        confusion = self._m_step(wx, t, mu, n_w, k)
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            log_rho = self._log_likelihoods(wx, t, confusion, prior, n_t, k)
            objective.append(float(logsumexp_rows(log_rho).sum()) / answers.n_answers)
            mu = fix_gold(softmax_rows(log_rho), gold)
            prior = mu.mean(axis=0)
            confusion = self._m_step(wx, t, mu, n_w, k)
            if n_iter > 1 and objective[-1] - objective[-2] < self.tol:
                converged = True
                break
        self.confusions_ = confusion.reshape(n_w, k, k)
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        accuracy = (np.diagonal(self.confusions_, axis1=1, axis2=2) * prior).sum(axis=1)
        self._set_results(
            answers,
            mu.argmax(axis=1),
            proba=mu,
            weight=accuracy,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
        )

    def _m_step(
        self, wx: np.ndarray, t: np.ndarray, mu: np.ndarray, n_w: int, k: int
    ) -> np.ndarray:
        """Confusion rows ``(n_workers * K, K)``: row ``w * K + answer``, column ``truth``."""
        counts = np.empty((n_w * k, k))
        for label in range(k):  # K is small; each column is one O(n) bincount
            counts[:, label] = np.bincount(wx, weights=mu[t, label], minlength=n_w * k)
        counts += self.smoothing
        np.maximum(counts, EPS, out=counts)
        cube = counts.reshape(n_w, k, k)
        cube /= cube.sum(axis=1, keepdims=True)
        return counts

    @staticmethod
    def _log_likelihoods(
        wx: np.ndarray, t: np.ndarray, confusion: np.ndarray, prior: np.ndarray, n_t: int, k: int
    ) -> np.ndarray:
        log_conf = np.log(confusion)
        log_rho = np.empty((n_t, k))
        for label in range(k):
            log_rho[:, label] = np.bincount(t, weights=log_conf[wx, label], minlength=n_t)
        log_rho += np.log(np.maximum(prior, EPS))
        return log_rho
