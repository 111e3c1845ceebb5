"""One-coin Dawid-Skene: one accuracy per worker (docs/algorithms.md#one-coin-dawid-skene)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from . import _kernels
from ._em import EMEstimator, Fit, Model, Shape
from ._ops import per_worker
from ._tags import MEMORY_AND_DASK, Tags
from .dawid_skene import EPS


def one_coin_start(part: Any, previous: Any, mirror: bool) -> tuple[np.ndarray, Any]:
    """Per part: the EM start (as :func:`~.dawid_skene.ds_start`), the posterior mass of the
    labels each worker gave and the posteriors' sums."""
    mu = previous[0][:, ::-1].copy() if mirror else part.soft_start()
    skill = _kernels.pick_sum(part.task, part.value, part.worker, mu, part.n_workers)
    return mu, (skill, mu.sum(axis=0))


def one_coin_pass(part: Any, previous: Any, params: tuple[np.ndarray, ...]) -> Any:
    """Per part, one fused pass: E-step, then each worker's summed posterior of the labels
    it gave, the posteriors' sums and the log-likelihood."""
    log_right, log_wrong, log_prior = params
    mu, skill, prior_sum, loglik = _kernels.one_coin_step(
        part.layout, log_right, log_wrong, log_prior, part.gold_codes()
    )
    return mu, (skill, prior_sum, loglik)


class OneCoinModel(Model):
    """One-coin Dawid-Skene's sufficient statistics: per worker the summed posterior of the
    labels it gave, the posteriors' column sums and the log-likelihood. Parameters: each
    worker's accuracy and the class prior."""

    start = staticmethod(one_coin_start)
    step = staticmethod(one_coin_pass)
    start_arg = False

    def __init__(
        self, tol: float, n_tasks: int, n_answers: int, counts: np.ndarray, n_labels: int
    ) -> None:
        super().__init__(tol)
        self.n_tasks, self.n_answers, self.counts = n_tasks, n_answers, counts
        self.n_labels = n_labels

    def init(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        skill_sum, prior_sum = stats
        return self._skill(skill_sum), prior_sum / self.n_tasks

    def step_params(self, params: Any) -> tuple[np.ndarray, ...]:
        skill, prior = params
        log_right, log_wrong = OneCoinDawidSkene._log_confusion(skill, self.n_labels)
        return log_right, log_wrong, np.log(np.maximum(prior, EPS))

    def m_step(self, stats: Any) -> tuple[np.ndarray, np.ndarray]:
        skill_sum, prior_sum, _ = stats
        return self._skill(skill_sum), prior_sum / self.n_tasks

    def objective(self, stats: Any) -> float:
        return float(stats[2]) / self.n_answers

    def _skill(self, total: np.ndarray) -> np.ndarray:
        """Each worker's mean posterior of the labels it gave (``1/K`` for one without
        answers: a listed worker who has not answered yet)."""
        return per_worker(np.asarray(total, dtype=np.float64), self.counts, 1.0 / self.n_labels)


class OneCoinDawidSkene(EMEstimator):
    """Dawid-Skene where worker ``u`` answers correctly with probability ``s_u`` and otherwise
    uniformly among the other ``K - 1`` labels (as crowd-kit's ``OneCoinDawidSkene``).

    M-step: ``s_u`` is the mean posterior mass of the labels the worker gave; confusion entries
    are clipped to ``[1e-10, 1 - 1e-10]``. The class prior is updated every iteration. Because the
    confusion is one-coin, the E-step needs only two scatter-adds: a per-task constant
    ``sum_u log((1 - s_u) / (K - 1))`` and a weighted vote with the per-worker log-odds.

    Stopping rule and ``objective_``: as :class:`DawidSkene` (log-likelihood per answer).
    ``weights_["weight"]`` is the accuracy ``s_u``; ``weights_["log_odds"]`` the vote weight.
    """

    __privtd_tags__ = Tags("one-coin-ds", executors=MEMORY_AND_DASK)

    warm_starts = True

    def __init__(self, max_iter: int = 100, tol: float = 1e-5) -> None:
        self.max_iter = max_iter
        self.tol = tol

    def _model(self, shape: Shape) -> OneCoinModel:
        return OneCoinModel(self.tol, shape.n_tasks, shape.n_answers, shape.counts, shape.n_labels)

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        """The fitted attributes from the EM's end and the last posteriors."""
        skill, prior = fit.params
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        log_right, log_wrong = self._log_confusion(skill, answers.n_labels)
        self._set_results(
            answers,
            truth,
            proba=mu,
            weight=skill,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"log_odds": log_right - log_wrong},
        )

    @staticmethod
    def _log_confusion(skill: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Log of the diagonal and off-diagonal confusion entries, clipped as crowd-kit does."""
        log_right = np.log(np.clip(skill, EPS, 1 - EPS))
        log_wrong = np.log(np.clip((1 - skill) / (k - 1), EPS, 1 - EPS))
        return log_right, log_wrong
