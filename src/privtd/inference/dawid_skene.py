"""Dawid-Skene with full confusion matrices (Dawid & Skene 1979; docs/algorithms.md#dawid-skene)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from . import _kernels
from ._base import _check_float, confusion_frame
from ._em import EMEstimator, Fit, Model, Shape
from ._tags import MEMORY_AND_DASK, Tags

EPS = 1e-10


def ds_start(part: Any, previous: Any, mirror: bool) -> tuple[np.ndarray, Any]:
    """Per part: the EM start (label frequencies, or with ``mirror`` the previous posteriors
    with the two labels swapped, as the aware estimators' orientation check refits) and its
    M-step counts and posterior sums."""
    mu = previous[0][:, ::-1].copy() if mirror else part.soft_start()
    k = int(part.n_labels)
    counts = _kernels.gather_scatter(part.wx(), part.sorted_task, mu, part.n_workers * k)
    return mu, (counts, mu.sum(axis=0))


def ds_pass(part: Any, previous: Any, params: tuple[np.ndarray, np.ndarray]) -> Any:
    """Per part, one fused pass: the E-step with the log confusions and log prior, then the
    M-step's counts, the posteriors' sums and the log-likelihood (the E-step's normaliser,
    so the stopping test costs nothing)."""
    log_conf, log_prior = params
    mu, counts, prior_sum, loglik = _kernels.ds_step(
        part.layout, part.wx(), log_conf, log_prior, part.gold_codes()
    )
    return mu, (counts, prior_sum, loglik)


class DawidSkeneModel(Model):
    """Dawid-Skene's sufficient statistics: per (worker, label given) the posterior mass of
    each true label, the posteriors' column sums and the log-likelihood. Parameters: the
    confusion rows ``(n_workers * K, K)`` and the class prior."""

    start = staticmethod(ds_start)
    step = staticmethod(ds_pass)
    start_arg = False

    def __init__(
        self,
        est: DawidSkene,
        n_tasks: int,
        n_answers: int,
        seed: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        super().__init__(est.tol)
        self.est, self.n_tasks, self.n_answers, self.seed = est, n_tasks, n_answers, seed

    def init(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        counts, prior_sum = stats
        if self.seed is not None:
            counts = self.seed(counts)
        return self._confusion(counts), prior_sum / self.n_tasks

    def step_params(self, params: Any) -> tuple[np.ndarray, np.ndarray]:
        confusion, prior = params
        return np.log(confusion), np.log(np.maximum(prior, EPS))

    def m_step(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        counts, prior_sum, _ = stats
        return self._confusion(counts), prior_sum / self.n_tasks

    def objective(self, stats: Any) -> float:
        return float(stats[2]) / self.n_answers

    def _confusion(self, counts: np.ndarray) -> np.ndarray:
        k = counts.shape[1]
        return self.est._normalise(np.asarray(counts, dtype=np.float64), counts.shape[0] // k, k)


class DawidSkene(EMEstimator):
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

    __privtd_tags__ = Tags("ds", executors=MEMORY_AND_DASK)

    warm_starts = True

    def __init__(self, max_iter: int = 100, tol: float = 1e-5, smoothing: float = 0.0) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.smoothing = smoothing

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float(type(self).__name__, "smoothing", self.smoothing, 0.0)

    def _model(self, shape: Shape) -> DawidSkeneModel:
        return DawidSkeneModel(self, shape.n_tasks, shape.n_answers, self._start_counts)

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        """The fitted attributes from the EM's end and the last posteriors."""
        n_w, k = answers.n_workers, answers.n_labels
        confusion, prior = fit.params
        cube = confusion.reshape(n_w, k, k)
        self.confusions_ = confusion_frame(answers, cube)
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        accuracy = (np.diagonal(cube, axis1=1, axis2=2) * prior).sum(axis=1)
        self._set_results(
            answers,
            truth,
            proba=mu,
            weight=accuracy,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
        )

    def _start_counts(self, counts: np.ndarray) -> np.ndarray:
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
