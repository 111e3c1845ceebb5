"""Perturbation-aware truth inference for P3's sparse answers with private NULLs.

P3's mechanisms release every cell of a worker's row over the public task list, NULL included,
so the server sees a report for every (worker, task) pair: a score, or NULL, drawn through a
public channel from the worker's true symbol (a score, or NULL where it did not answer). P3's
aggregator averages the non-NULL reports, and at small epsilon and high sparsity most of them
are scores the mechanism made up for NULL cells.

Model (derivation in ``docs/inference.md``). Per task ``q`` the workers' true symbols are drawn
from ``p_q`` over the ``G`` scores and NULL, with a nested Dirichlet prior: answered-or-NULL
``~ Beta``, the score given answered ``~ Dir``, both weak (``strength`` pseudo-answers each)
and centred on the pooled estimate. Each report is the public channel's output for its cell:

- ``krr-null``: keep with ``e^eps / (G + e^eps)``, else each other symbol (NULL reports are
  counted as ``n_workers`` minus the task's non-NULL reports, since every cell is released);
- ``two-layer-null``: the same with the keep probability marginalised over the worker's private
  budget (a worker's cells are then treated as independent).

P3's Laplace mechanism is not modelled: its per-report likelihood made a fit cost ~100 s on P3's
2,000 x 200 design (400,000 reports x 11 symbols per iteration) and at sparsity 0.9 it moved the
MAE change by less than 0.1 (documented in ``docs/reproduction.md``).

Variational Bayes: responsibilities over each report's latent symbol use ``exp(E[log p_q])``,
``q(p_q)`` is the nested Dirichlet updated with the expected counts. A task's truth is the
posterior mean of its scores' mean, ``sum_s s E[p_q(s | answered)]``: the answers' average, which
is what P3's aggregator estimates, without the mechanism's made-up scores. Workers' own qualities
are not modelled (every answer of a task counts the same).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.special import digamma

from ..answers import Answers
from ..errors import ValidationError
from ._base import Estimator, Gold, _check_float


def null_channel(mechanism: Any) -> np.ndarray:
    """The channel ``C[x, z]``: the probability of reporting symbol ``x`` (scores, then NULL)
    from true symbol ``z``; two-layer's keep probability marginalised over the private budget."""
    from ..mechanisms import KRRNull, TwoLayerNull

    if isinstance(mechanism, KRRNull):
        keep = float(mechanism.keep)
        other = (1.0 - keep) / mechanism.domain_size
    elif isinstance(mechanism, TwoLayerNull):
        keep, other = mechanism._marginal()
    else:
        raise ValidationError(
            "AwareNull models P3's randomized-response mechanisms (krr-null, two-layer-null); got "
            f"{type(mechanism).__name__}. Use WeightedAverage for Laplace or MF reports."
        )
    channel = np.full((mechanism.domain_size + 1, mechanism.domain_size + 1), other)
    np.fill_diagonal(channel, keep)
    return channel


class AwareNull(Estimator):
    """Task-level deconvolution of P3's randomized-response channels with NULL (see module doc).

    Parameters
    ----------
    mechanism : KRRNull or TwoLayerNull
        The mechanism that released the workers' full rows, with its public parameters.
    strength : float > 0, default 1
        Pseudo-answers in each level of the prior. Learning it by empirical Bayes collapsed
        every task onto the pooled distribution on sparse data (Web: MAE change 0.70 against
        RR's 0.29 at epsilon 5), so it is fixed and weak.
    max_iter : int, default 1000
        Accelerated steps (three E steps each).
    tol : float, default 1e-4
        On the largest change of a truth, in score units.

    Fitted: ``truths_``, ``answer_rate_`` (per task, the posterior mean share of workers who
    answered it). The answers must be the mechanism's release of every worker's full row over
    the tasks: non-NULL reports as answers, NULL reports left out (as ``perturb`` returns them);
    a task's NULL reports are counted as the workers minus its answers.
    """

    kinds = ("numeric",)
    iterative = True

    def __init__(
        self,
        mechanism: Any,
        *,
        strength: float = 1.0,
        max_iter: int = 1000,
        tol: float = 1e-4,
    ) -> None:
        self.mechanism = mechanism
        self.strength = strength
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float(type(self).__name__, "strength", self.strength, 0.0, low_open=True)
        null_channel(self.mechanism)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        mech = self.mechanism
        channel = null_channel(mech)
        g = mech.domain_size
        scores = np.arange(mech.low, mech.high + 1, dtype=float)
        counts = self._symbol_counts(answers)
        n_q = counts.sum(axis=1)
        keep, other = channel[0, 0], channel[0, 1]
        # Start: the counts pushed back through the channel (the inverse of
        # (keep - other) I + other J), clipped into the simplex's interior.
        start = np.maximum((counts - other * n_q[:, None]) / (keep - other), 1e-3)
        expected = start * (n_q / start.sum(axis=1))[:, None]
        pooled = expected.sum(axis=0) / expected.sum()
        rate = np.array([1.0 - pooled[g], pooled[g]]) * self.strength
        scores_prior = pooled[:g] / pooled[:g].sum() * self.strength

        def truths_of(rows_expected: np.ndarray) -> np.ndarray:
            # The posterior mean of the answers' mean score.
            answered = rows_expected[:, :g].sum(axis=1)
            mean = (rows_expected[:, :g] + scores_prior) @ scores
            return mean / (answered + scores_prior.sum())

        truth = truths_of(expected)
        if gold is not None:
            truth[gold.index] = gold.value
        loglik = np.zeros(answers.n_tasks)
        # Tasks are independent given the fixed prior: each stops on its own, so the few slow
        # ones (small epsilon, tasks near the middle) do not keep the rest iterating.
        active = np.ones(answers.n_tasks, dtype=bool)
        if gold is not None:
            active[gold.index] = False
        objective: list[float] = []
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            rows = np.flatnonzero(active)
            expected[rows], loglik[rows] = self._accelerated_step(
                counts[rows], channel, expected[rows], n_q[rows], rate, scores_prior
            )
            objective.append(float(loglik.sum()) / max(float(n_q.sum()), 1.0))
            new = truths_of(expected[rows])
            active[rows] = np.abs(new - truth[rows]) >= self.tol
            truth[rows] = new
            if not active.any():
                break
        converged = not active.any()
        answered = expected[:, :g].sum(axis=1)
        self.answer_rate_ = pd.Series(
            (answered + rate[0]) / (n_q + rate.sum()), index=answers.tasks, name="answer_rate"
        )
        self._set_results(answers, truth, n_iter=n_iter, converged=converged, objective=objective)

    def _symbol_counts(self, answers: Answers) -> np.ndarray:
        """Per task the count of each reported symbol: scores, then NULL."""
        mech = self.mechanism
        g = mech.domain_size
        code = np.rint(answers.value - mech.low).astype(np.int64)
        if (code < 0).any() or (code >= g).any() or not np.allclose(answers.value, code + mech.low):
            raise ValidationError(
                f"{type(mech).__name__} reports are integer scores in [{mech.low}, {mech.high}]; "
                "these answers hold other values. Pass the mechanism that produced them."
            )
        flat = answers.task.astype(np.int64) * (g + 1) + code
        counts = np.bincount(flat, minlength=answers.n_tasks * (g + 1)).astype(float)
        counts = counts.reshape(answers.n_tasks, g + 1)
        counts[:, g] = answers.n_workers - answers.task_counts()
        return counts

    @classmethod
    def _accelerated_step(
        cls,
        counts: np.ndarray,
        channel: np.ndarray,
        expected: np.ndarray,
        n_q: np.ndarray,
        rate: np.ndarray,
        scores_prior: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One SQUAREM step (Varadhan and Roland 2008, scheme S3) per task: two E steps, an
        extrapolation along them with the task's own step length, and one E step from there.
        Tasks are independent given the fixed prior, so each gets its own step. Plain EM
        crawls where the channel carries little (2,000 iterations at epsilon 0.5); rows whose
        extrapolation leaves the positive orthant keep the second E step."""
        args = (counts, channel)
        prior = (n_q, rate, scores_prior)
        first, _ = cls.e_step(*args, expected, *prior)
        second, _ = cls.e_step(*args, first, *prior)
        r = first - expected
        v = second - first - r
        r_norm = np.sqrt((r * r).sum(axis=1))
        v_norm = np.sqrt((v * v).sum(axis=1))
        alpha = np.minimum(-r_norm / np.where(v_norm > 0, v_norm, 1.0), -1.0)[:, None]
        jump = expected - 2.0 * alpha * r + alpha * alpha * v
        jump = np.where((jump > 0).all(axis=1, keepdims=True), jump, second)
        return cls.e_step(*args, jump, *prior)

    @classmethod
    def e_step(
        cls,
        counts: np.ndarray,
        channel: np.ndarray,
        expected: np.ndarray,
        n_q: np.ndarray,
        rate: np.ndarray,
        scores_prior: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Expected count of each true symbol per task, given the reported counts: a report
        ``x`` is from ``z`` with probability ``w_z C[x, z] / sum_z' w_z' C[x, z']``, where
        ``w = exp(E[log p_q])`` comes from the current expected counts. Returns them and, per
        task, ``sum_x counts_x log (w C^T)_x``."""
        weights = np.exp(cls._expected_log_p(expected, n_q, rate, scores_prior))
        predicted = weights @ channel.T
        expected = weights * ((counts / predicted) @ channel)
        return expected, (counts * np.log(predicted)).sum(axis=1)

    @staticmethod
    def _expected_log_p(
        expected: np.ndarray, n_q: np.ndarray, rate: np.ndarray, scores_prior: np.ndarray
    ) -> np.ndarray:
        """``E[log p_q(s)]`` under the nested Dirichlet posterior: answered-or-NULL first
        (Beta), then the score given answered (Dirichlet)."""
        answered = expected[:, :-1].sum(axis=1)
        top = digamma(n_q + rate.sum())
        log_answered = digamma(answered + rate[0]) - top
        log_null = digamma(expected[:, -1] + rate[1]) - top
        post = expected[:, :-1] + scores_prior
        log_score = digamma(post) - digamma(answered + scores_prior.sum())[:, None]
        return np.column_stack([log_answered[:, None] + log_score, log_null])
