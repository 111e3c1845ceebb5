"""One-coin Dawid-Skene: one accuracy per worker (docs/algorithms.md#one-coin-dawid-skene)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold
from ._ops import per_worker
from .dawid_skene import EPS, gold_array, soft_majority


class OneCoinDawidSkene(Estimator):
    """Dawid-Skene where worker ``u`` answers correctly with probability ``s_u`` and otherwise
    uniformly among the other ``K - 1`` labels (as crowd-kit's ``OneCoinDawidSkene``).

    M-step: ``s_u`` is the mean posterior mass of the labels the worker gave; confusion entries
    are clipped to ``[1e-10, 1 - 1e-10]``. The class prior is updated every iteration. Because the
    confusion is one-coin, the E-step needs only two scatter-adds: a per-task constant
    ``sum_u log((1 - s_u) / (K - 1))`` and a weighted vote with the per-worker log-odds.

    Stopping rule and ``objective_``: as :class:`DawidSkene` (log-likelihood per answer).
    ``weights_["weight"]`` is the accuracy ``s_u``; ``weights_["log_odds"]`` the vote weight.
    """

    iterative = True
    warm_starts = True

    def __init__(self, max_iter: int = 100, tol: float = 1e-5) -> None:
        self.max_iter = max_iter
        self.tol = tol

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        n_t, n_w, k = answers.n_tasks, answers.n_workers, answers.n_labels
        counts = answers.worker_counts()
        layout = _kernels.TaskLayout(answers.task, answers.worker, answers.value, n_t)
        gold_labels = gold_array(gold, n_t)
        mu = soft_majority(answers, gold, self._warm)
        prior = mu.mean(axis=0)
        skill = self._m_step(mu, answers.task, answers.worker, answers.value, counts, n_w)
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            log_right, log_wrong = self._log_confusion(skill, k)
            mu, skill_sum, prior_sum, loglik = _kernels.one_coin_step(
                layout, log_right, log_wrong, np.log(np.maximum(prior, EPS)), gold_labels
            )
            objective.append(loglik / answers.n_answers)
            prior = prior_sum / n_t
            skill = per_worker(skill_sum, counts, 1.0 / k)
            if n_iter > 1 and objective[-1] - objective[-2] < self.tol:
                converged = True
                break
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        log_right, log_wrong = self._log_confusion(skill, k)
        self._set_results(
            answers,
            mu.argmax(axis=1),
            proba=mu,
            weight=skill,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"log_odds": log_right - log_wrong},
        )

    @staticmethod
    def _log_confusion(skill: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Log of the diagonal and off-diagonal confusion entries, clipped as crowd-kit does."""
        log_right = np.log(np.clip(skill, EPS, 1 - EPS))
        log_wrong = np.log(np.clip((1 - skill) / (k - 1), EPS, 1 - EPS))
        return log_right, log_wrong

    @staticmethod
    def _m_step(
        mu: np.ndarray, t: np.ndarray, w: np.ndarray, x: np.ndarray, counts: np.ndarray, n_w: int
    ) -> np.ndarray:
        """Each worker's accuracy: the mean posterior of the labels it gave (the start; later
        iterations get the same sums from the fused kernel)."""
        return per_worker(_kernels.pick_sum(t, x, w, mu, n_w), counts, 1.0 / mu.shape[1])
