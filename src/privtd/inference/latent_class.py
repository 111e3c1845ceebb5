"""The binary two-coin latent class model (Raykar et al. 2010 without features;
docs/algorithms.md#latent-class).

P2's main model: the secure protocol splits exactly these E- and M-steps between parties.
"""

from __future__ import annotations

import numpy as np

from ..answers import Answers
from ..errors import ValidationError
from ._base import Estimator, Gold, _check_float
from ._ops import shares, vote_matrix


class LatentClass(Estimator):
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

    iterative = True
    warm_starts = True

    def __init__(self, max_iter: int = 500, tol: float = 1e-4, eta: float = 1e-6) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.eta = eta

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float("LatentClass", "eta", self.eta, 0.0, 0.5, low_open=True, high_open=True)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        from scipy.special import expit  # on use: costs ~0.5 s to import

        if answers.n_labels != 2:
            raise ValidationError(
                f"LatentClass is binary; these answers have {answers.n_labels} labels. "
                "Use DawidSkene (method 'ds') for more labels."
            )
        t, w = answers.task, answers.worker
        x = answers.value.astype(np.float64)
        n_t, n_w = answers.n_tasks, answers.n_workers
        mu = shares(vote_matrix(t, answers.value, n_t, 2))[:, 1]
        if self._warm is not None:
            mu[self._warm.index] = self._warm.value[:, 1]
        if gold is not None:
            mu[gold.index] = gold.value
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            sens, spec, prior = self.m_step(mu, t, w, x, n_w)
            log_a, log_b = self.e_step_sums(sens, spec, t, w, x, n_t)
            logit = np.log(prior) - np.log1p(-prior) + log_a - log_b
            objective.append(
                float(np.logaddexp(np.log(prior) + log_a, np.log1p(-prior) + log_b).sum())
            )
            new = expit(logit)
            if gold is not None:
                new[gold.index] = gold.value
            change = float(np.max(np.abs(new - mu)))
            mu = new
            if change < self.tol:
                converged = True
                break
        sens, spec, prior = self.m_step(mu, t, w, x, n_w)
        self.prior_ = prior
        proba = np.column_stack([1.0 - mu, mu])
        self._set_results(
            answers,
            (mu >= 0.5).astype(np.int64),
            proba=proba,
            weight=0.5 * (sens + spec),
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"sensitivity": sens, "specificity": spec},
        )

    def m_step(
        self, mu: np.ndarray, t: np.ndarray, w: np.ndarray, x: np.ndarray, n_w: int
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Per-worker sensitivity and specificity, and the class prior, from posteriors ``mu``."""
        return self.m_finish(self.m_sums(mu, t, w, x, n_w), float(mu.mean()))

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
