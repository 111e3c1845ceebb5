"""GTM: the Gaussian truth model for real-valued truths (Zhao & Han, QDB 2012;
docs/algorithms.md#gtm)."""

from __future__ import annotations

import numpy as np

from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold, _check_float
from ._ops import SortedByTask


class GTM(Estimator):
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

    kinds = ("numeric",)
    iterative = True

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

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        median, scale, keep = self._preprocess(answers)
        t, w = answers.task[keep], answers.worker[keep]
        z = (answers.value[keep] - median[t]) / scale[t]
        n_t, n_w = answers.n_tasks, answers.n_workers
        n_u = np.bincount(w, minlength=n_w)
        has_claims = np.bincount(t, minlength=n_t) > 0
        gold_z = None if gold is None else (gold.value - median[gold.index]) / scale[gold.index]
        var = np.ones(n_w)
        mu = np.zeros(n_t)
        prior_prec = 1.0 / self.sigma0_sq
        objective: list[float] = []
        converged = False
        n_iter = 0
        ones = np.ones(n_t)
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            num, den = _kernels.weighted_task_sums(t, w, z, 1.0 / var, n_t)
            new = (self.mu0 * prior_prec + num) / (prior_prec + den)
            if gold is not None:
                new[gold.index] = gold_z
            sq_sum = _kernels.worker_loss(t, w, z, new, ones, True, n_w)
            var = (2 * self.beta + sq_sum) / (2 * (self.alpha + 1) + n_u)
            objective.append(
                self._log_posterior(float(((new - self.mu0) ** 2).sum()), var, sq_sum, n_u)
            )
            change = np.linalg.norm(new - mu) / max(float(np.linalg.norm(mu)), 1e-12)
            mu = new
            if change < self.tol:
                converged = True
                break
        truth = np.where(has_claims, mu * scale + median, median)
        n_outliers = np.bincount(answers.worker[~keep], minlength=n_w)
        self._set_results(
            answers,
            truth,
            weight=1.0 / var,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"variance": var, "n_outliers": n_outliers},
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
