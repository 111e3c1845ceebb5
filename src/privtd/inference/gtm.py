"""GTM: the Gaussian truth model for real-valued truths (Zhao & Han, QDB 2012;
docs/algorithms.md#gtm)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..answers import Answers
from . import _kernels
from ._base import _check_float
from ._em import EMEstimator, Fit, Model, Shape
from ._ops import SortedByTask
from ._tags import MEMORY_AND_DASK, Tags


def gtm_start(part: Any, previous: Any, model: GTM) -> tuple[Any, Any]:
    """Per part: the per-task preprocessing (median, outliers, scale), exact because every
    task is whole in a part, then the kept claims standardised; per-worker claim and outlier
    counts."""
    median, scale, keep = model._preprocess(part)
    t, w = part.task[keep], part.worker[keep]
    z = (part.value[keep] - median[t]) / scale[t]
    has_claims = np.bincount(t, minlength=part.n_tasks) > 0
    gold = part.gold_values()
    gold_z = None if gold is None else (gold - median) / scale  # NaN off the gold tasks
    n_u = np.bincount(w, minlength=part.n_workers)
    n_outliers = np.bincount(part.worker[~keep], minlength=part.n_workers)
    state = (np.zeros(part.n_tasks), t, w, z, median, scale, has_claims, gold_z)
    return state, (n_u, n_outliers)


def gtm_pass(part: Any, previous: Any, params: tuple[Any, ...]) -> tuple[Any, Any]:
    """Per part: each task's posterior mean from the workers' variances, then each worker's
    squared error and the sums of squares the objective and the stopping rule read."""
    var, mu0, prior_prec = params
    mu, t, w, z, median, scale, has_claims, gold_z = previous[0]
    num, den = _kernels.weighted_task_sums(t, w, z, 1.0 / var, part.n_tasks)
    new = (mu0 * prior_prec + num) / (prior_prec + den)
    if gold_z is not None:
        fixed = ~np.isnan(gold_z)
        new[fixed] = gold_z[fixed]
    ones = np.ones(part.n_tasks)
    sq_sum = _kernels.worker_loss(t, w, z, new, ones, True, part.n_workers)
    sums = (float(((new - mu0) ** 2).sum()), float(((new - mu) ** 2).sum()), float((mu**2).sum()))
    return (new, t, w, z, median, scale, has_claims, gold_z), (sq_sum, *sums)


def gtm_finish(part: Any, previous: Any, _: Any) -> tuple[Any, Any]:
    """Per part: the truths back on the answers' scale (a task without kept claims: its
    median)."""
    mu, _t, _w, _z, median, scale, has_claims, _g = previous[0]
    return np.where(has_claims, mu * scale + median, median), None


class GTMModel(Model):
    """GTM's sufficient statistics: per worker the squared error of its standardised claims,
    the sums of squares of the truths' moves; parameters: each worker's variance. Stops when
    the truths move by less than ``tol`` relative to their norm."""

    start = staticmethod(gtm_start)
    step = staticmethod(gtm_pass)
    finish = staticmethod(gtm_finish)

    def __init__(self, est: GTM, shape: Shape) -> None:
        super().__init__(est.tol)
        self.est, self.shape = est, shape
        self.start_arg = est

    def init(self, stats: Any) -> np.ndarray:
        self.n_u = np.asarray(stats[0], dtype=np.float64)
        return np.ones(self.shape.n_workers)

    def step_params(self, var: np.ndarray) -> tuple[Any, ...]:
        return var, self.est.mu0, 1.0 / self.est.sigma0_sq

    def m_step(self, stats: Any) -> np.ndarray:
        est = self.est
        self.sq_sum = np.asarray(stats[0], dtype=np.float64)
        self.var = (2 * est.beta + self.sq_sum) / (2 * (est.alpha + 1) + self.n_u)
        return self.var

    def objective(self, stats: Any) -> float:
        # Called before m_step: the variances the objective reads are the next ones.
        var = self.m_step(stats)
        return self.est._log_posterior(float(stats[1]), var, self.sq_sum, self.n_u)

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        # ||mu - mu_old||_2 / max(||mu_old||_2, 1e-12), from the parts' sums of squares.
        change = np.sqrt(float(stats[2])) / max(np.sqrt(float(stats[3])), 1e-12)
        return bool(change < self.tol)


class GTM(EMEstimator):
    """Bayesian truth model: ``mu_q ~ N(mu0, sigma0^2)``, ``sigma_u^2 ~ InvGamma(alpha, beta)``,
    ``x_uq ~ N(mu_q, sigma_u^2)``, fitted by EM on per-task standardised claims.

    Preprocessing, per task: centre on the median ``m_q``; drop claims with
    ``|x - m_q| / |m_q| > delta0`` (when ``m_q != 0``), then repeatedly drop claims with
    ``|x - m_q| / s_q > delta2`` where ``s_q`` is the standard deviation of the claims left;
    standardise ``z = (x - m_q) / s_q`` (or only centre, ``standardize=False``). Dropped claims are
    counted per worker in ``weights_["n_outliers"]``; a task left with no claims keeps its median.

    EM: the E-step is the posterior mean of ``mu_q``; the M-step the MAP variance
    ``(2 beta + sum (z - mu)^2) / (2 (alpha + 1) + |Q_u|)``.

    Stopping rule: ``||mu - mu_old||_2 / max(||mu_old||_2, 1e-12) < tol`` (default 1e-3) or
    ``max_iter``. ``objective_`` is the log posterior density (up to a constant) after each step.
    ``weights_["weight"]`` is ``1 / sigma_u^2`` in standardised units.
    """

    __privtd_tags__ = Tags("gtm", executors=MEMORY_AND_DASK)

    kinds = ("numeric",)

    def __init__(
        self,
        alpha: float = 10.0,
        beta: float = 10.0,
        mu0: float = 0.0,
        sigma0_sq: float = 1.0,
        delta0: float | None = 1.0,
        delta2: float | None = 2.0,
        standardize: bool = True,
        max_iter: int = 100,
        tol: float = 1e-3,
    ) -> None:
        self.alpha = alpha
        self.beta = beta
        self.mu0 = mu0
        self.sigma0_sq = sigma0_sq
        self.delta0 = delta0
        self.delta2 = delta2
        self.standardize = standardize
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        for name in ("alpha", "beta", "sigma0_sq"):
            _check_float("GTM", name, getattr(self, name), 0.0, low_open=True)
        _check_float("GTM", "mu0", self.mu0)
        for name in ("delta0", "delta2"):
            if getattr(self, name) is not None:
                _check_float("GTM", name, getattr(self, name), 0.0, low_open=True)

    def _preprocess(self, answers: Answers) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Median, scale and the mask of claims kept."""
        t, x, n_t = answers.task, answers.value, answers.n_tasks
        median = SortedByTask(t, x, n_t).median()
        dev = np.abs(x - median[t])
        keep = np.ones(x.size, dtype=bool)
        if self.delta0 is not None:
            m = np.abs(median[t])
            keep &= ~((m > 0) & (dev > self.delta0 * m))
        scale = np.ones(n_t)
        while True:
            n_q = np.bincount(t[keep], minlength=n_t)
            safe = np.maximum(n_q, 1)
            mean = np.bincount(t[keep], weights=x[keep], minlength=n_t) / safe
            var = np.bincount(t[keep], weights=(x[keep] - mean[t[keep]]) ** 2, minlength=n_t) / safe
            scale = np.sqrt(var)
            if self.delta2 is None:
                break
            outlier = keep & (scale[t] > 0) & (dev > self.delta2 * scale[t])
            if not outlier.any():
                break
            keep &= ~outlier
        scale = np.where(scale > 0, scale, 1.0) if self.standardize else np.ones(n_t)
        return median, scale, keep

    def _model(self, shape: Shape) -> GTMModel:
        return GTMModel(self, shape)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        var = fit.params
        self._set_results(
            answers,
            truth,
            weight=1.0 / var,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={
                "variance": var,
                "n_outliers": np.asarray(fit.start_stats[1]).astype(np.int64),
            },
        )

    def _log_posterior(
        self, mu_dev: float, var: np.ndarray, sq_sum: np.ndarray, n_u: np.ndarray
    ) -> float:
        """The log posterior from ``mu_dev = sum_q (mu_q - mu0)^2`` and per-worker sums."""
        # Per-worker sums make this O(workers + tasks), not another pass over the answers.
        like = -0.5 * (n_u @ np.log(var) + (sq_sum / var).sum())
        prior_mu = -0.5 * mu_dev / self.sigma0_sq
        prior_var = (-(self.alpha + 1) * np.log(var) - self.beta / var).sum()
        return float(like + prior_mu + prior_var)
