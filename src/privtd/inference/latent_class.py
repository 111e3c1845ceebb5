"""The binary two-coin latent class model (Raykar et al. 2010 without features;
docs/algorithms.md#latent-class).

P2's main model: the secure protocol splits exactly these E- and M-steps between parties.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..answers import Answers
from ..errors import ValidationError
from ._base import _check_float
from ._em import EMEstimator, Fit, Largest, Model, Shape
from ._ops import shares, vote_matrix
from ._tags import MEMORY_AND_DASK, Tags


def lc_start(part: Any, previous: Any, arg: Any) -> tuple[np.ndarray, Any]:
    """Per part: the positive vote share per task (a warm start's where it has one, gold
    fixed), then the M-step's per-worker sums and the posteriors' sum."""
    mu = shares(vote_matrix(part.task, part.value, part.n_tasks, 2))[:, 1]
    warm = getattr(part, "warm", None)
    if warm is not None:
        mu[warm.index] = warm.value[:, 1]
    mu = part.fix_labels(mu)  # gold codes 0 / 1 are the posteriors of the positive class
    x = part.value_floats()
    return mu, (LatentClass.m_sums(mu, part.task, part.worker, x, part.n_workers), mu.sum())


def lc_pass(part: Any, previous: Any, params: tuple[Any, ...]) -> tuple[np.ndarray, Any]:
    """Per part: the E-step from the M-step's parameters, the largest change of a posterior,
    the log-likelihood and the next M-step's sums."""
    from scipy.special import expit  # on use: costs ~0.5 s to import

    sens, spec, prior = params
    t, w, x = part.task, part.worker, part.value_floats()
    log_a, log_b = LatentClass.e_step_sums(sens, spec, t, w, x, part.n_tasks)
    logit = np.log(prior) - np.log1p(-prior) + log_a - log_b
    loglik = float(np.logaddexp(np.log(prior) + log_a, np.log1p(-prior) + log_b).sum())
    new = part.fix_labels(expit(logit))
    change = Largest(np.max(np.abs(new - previous[0]), initial=0.0))
    sums = LatentClass.m_sums(new, t, w, x, part.n_workers)
    return new, (sums, new.sum(), loglik, change)


def lc_finish(part: Any, previous: Any, _: Any) -> tuple[Any, None]:
    """Per part: labels (the positive class from 1/2) and both classes' probabilities."""
    mu = previous[0]
    return ((mu >= 0.5).astype(np.int64), np.column_stack([1.0 - mu, mu])), None


class LatentClassModel(Model):
    """The two-coin model's sufficient statistics: per worker the posterior mass on each
    class and the answers it explains, the posteriors' sum; parameters: sensitivity,
    specificity and prior. Stops when no posterior moves by ``tol``."""

    start = staticmethod(lc_start)
    step = staticmethod(lc_pass)
    finish = staticmethod(lc_finish)

    def __init__(self, est: LatentClass, n_tasks: int) -> None:
        super().__init__(est.tol)
        self.est, self.n_tasks = est, n_tasks

    def init(self, stats: Any) -> tuple[np.ndarray, np.ndarray, float]:
        return self.est.m_finish(
            np.asarray(stats[0], dtype=np.float64), float(stats[1]) / self.n_tasks
        )

    def m_step(self, stats: Any) -> tuple[np.ndarray, np.ndarray, float]:
        return self.init(stats)

    def objective(self, stats: Any) -> float:
        return float(stats[2])

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return float(stats[3]) < self.tol


class LatentClass(EMEstimator):
    """Two-coin model: sensitivity ``alpha_u = P(x=1 | y=1)``, specificity ``beta_u = P(x=0 | y=0)``
    and prior ``p = P(y=1)``. The positive class is the second label in sorted order
    (``1`` for 0/1 labels, ``True`` for booleans).

    Start: ``mu_q`` = fraction of positive votes. Then M-step, E-step
    ``mu_q = sigmoid(logit p + log a_q - log b_q)``, until the largest change of any ``mu_q`` is
    below ``tol`` (default 1e-4; two-coin EM creeps, so a tighter rule buys hundreds of steps
    for a log-likelihood change below 1e-3 on Duchenne). ``alpha``, ``beta`` and ``p`` are
    clipped to ``[eta, 1 - eta]`` (default 1e-6).
    ``objective_`` is the log-likelihood ``sum_q log(p a_q + (1 - p) b_q)``.
    """

    __privtd_tags__ = Tags("lc", binary_only=True, executors=MEMORY_AND_DASK)

    warm_starts = True

    def __init__(self, max_iter: int = 500, tol: float = 1e-4, eta: float = 1e-6) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.eta = eta

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float("LatentClass", "eta", self.eta, 0.0, 0.5, low_open=True, high_open=True)

    def _model(self, shape: Shape) -> LatentClassModel:
        if shape.n_labels != 2:
            raise ValidationError(
                f"LatentClass is binary; these answers have {shape.n_labels} labels. "
                "Use DawidSkene (method 'ds') for more labels."
            )
        return LatentClassModel(self, shape.n_tasks)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        sens, spec, prior = fit.params
        self.prior_ = prior
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=0.5 * (sens + spec),
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"sensitivity": sens, "specificity": spec},
        )

    @staticmethod
    def m_sums(mu: np.ndarray, t: np.ndarray, w: np.ndarray, x: np.ndarray, n_w: int) -> np.ndarray:
        """The M-step's per-worker sums, rows: posterior mass on the positive class, on the
        negative one, positive answers weighted by the first, negative ones by the second
        (sums over answers, so a cluster adds them up shard by shard)."""
        m = mu[t]
        return np.stack(
            [
                np.bincount(w, weights=m, minlength=n_w),
                np.bincount(w, weights=1.0 - m, minlength=n_w),
                np.bincount(w, weights=m * x, minlength=n_w),
                np.bincount(w, weights=(1.0 - m) * (1.0 - x), minlength=n_w),
            ]
        )

    def m_finish(self, sums: np.ndarray, mu_mean: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Sensitivity, specificity and prior from :meth:`m_sums` and the mean posterior."""
        pos, neg, pos_x, neg_x = sums
        sens = pos_x / np.maximum(pos, 1e-300)
        spec = neg_x / np.maximum(neg, 1e-300)
        lo, hi = self.eta, 1.0 - self.eta
        return np.clip(sens, lo, hi), np.clip(spec, lo, hi), float(np.clip(mu_mean, lo, hi))

    @staticmethod
    def e_step_sums(
        sens: np.ndarray, spec: np.ndarray, t: np.ndarray, w: np.ndarray, x: np.ndarray, n_t: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``log a_q`` and ``log b_q``: the sums the secure protocol computes
        (docs/algorithms.md#secure-protocol)."""
        a = x * np.log(sens)[w] + (1.0 - x) * np.log1p(-sens)[w]
        b = (1.0 - x) * np.log(spec)[w] + x * np.log1p(-spec)[w]
        return np.bincount(t, weights=a, minlength=n_t), np.bincount(t, weights=b, minlength=n_t)
