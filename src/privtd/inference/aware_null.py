"""Perturbation-aware truth inference for P3's sparse answers with private NULLs.

P3's mechanisms release every cell of a worker's row over the public task list, NULL included,
so the server sees a report for every (worker, task) pair: a score, or NULL, drawn through a
public channel from the worker's true symbol (a score, or NULL where it did not answer). P3's
aggregator averages the non-NULL reports, and at small epsilon and high sparsity most of them
are scores the mechanism made up for NULL cells.

Model (derivation in ``docs/inference.md``). Per task ``q`` the workers' true symbols are drawn
from ``p_q`` over the ``G`` scores and NULL, with a nested Dirichlet prior: answered-or-NULL
``~ Beta``, the score given answered ``~ Dir``, centred on the pooled distribution (the maximum
likelihood fit of all tasks' reports together) with strengths learned from how much more the
tasks' deconvolved counts vary than the channel alone explains (method of moments). Where the
channel carries little, the tasks do not vary beyond the noise, the prior grows strong and the
truths move to the pooled mean instead of to the middle of the domain. Each report is the
public channel's output for its cell:

- ``krr-null``: keep with ``e^eps / (G + e^eps)``, else each other symbol (NULL reports are
  counted as ``n_workers`` minus the task's non-NULL reports, since every cell is released);
- ``two-layer-null``: the same with the keep probability marginalised over the worker's private
  budget (a worker's cells are then treated as independent).

P3's Laplace mechanism is not modelled: it fills a NULL cell with a uniformly drawn score before
adding noise, so a NULL's report has the law of a uniformly random answer and the reports cannot
tell the answered share apart; deconvolving the noise alone cost ~100 s per fit on P3's 2,000 x
200 design and moved the MAE change by less than 0.1 at sparsity 0.9 (``docs/reproduction.md``).

Fit (default ``estimate="map"``): EM for the posterior mode of ``p_q`` under the prior with one
more pseudo-answer per symbol. Responsibilities over each report's latent symbol use the current
posterior means as weights; the objective is concave, so each task has one fixed point.
``estimate="variational"``: variational Bayes, with weights ``exp(E[log p_q])`` under the nested
Dirichlet ``q(p_q)``; under a weak prior a task can have several fixed points, and on P3's
synthetic design it is the closer (``docs/reproduction.md``). A task's truth summarises its
posterior predictive distribution of one answer, ``E[p_q(s | answered)]``, without the
mechanism's made-up scores: by default its median (scores as unit-wide bins, interpolated within
the bin), which P3's MAE rewards and which answers clipped to the domain's ends do not drag;
``location="mean"`` gives the answers' average, what P3's aggregator estimates on clean data.
Workers' own qualities are not modelled (every answer of a task counts the same).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..answers import Answers
from ..errors import ValidationError
from . import _kernels
from ._base import Estimator, Gold, _check_choice, _check_float
from ._em import InMemory, MemoryPart, Model, run_em
from ._kernels._numpy import grouped_median, null_e_step, null_truths
from ._tags import Tags


def null_channel(mechanism: Any) -> np.ndarray:
    """The channel ``C[x, z]``: the probability of reporting symbol ``x`` (scores, then NULL)
    from true symbol ``z``; two-layer's keep probability marginalised over the private budget
    (:meth:`~privtd.mechanisms.Mechanism.channel`)."""
    refusal = ValidationError(
        "AwareNull models P3's randomized-response mechanisms (krr-null, two-layer-null); got "
        f"{type(mechanism).__name__}. Use WeightedAverage for Laplace or MF reports."
    )
    if not getattr(mechanism, "releases_cells", False):
        raise refusal
    try:
        channel: np.ndarray = mechanism.channel()
    except ValidationError:
        raise refusal from None
    return channel


#: Floor for shares that divide or enter a logarithm.
_TINY = 1e-12
#: Bounds on a learned prior strength: at least the one pseudo-answer per level that served
#: as the fixed prior before (a moment estimate from few tasks can be near 0 and would let one
#: noisy task run to the domain's edge), at most far beyond any task's count (the tasks do not
#: vary beyond the noise: every task is the pooled distribution).
_STRENGTH_RANGE = (1.0, 1e6)


def pooled_distribution(total: np.ndarray, channel: np.ndarray) -> np.ndarray:
    """The maximum likelihood distribution of true symbols from all tasks' report counts
    together: ``max sum_x total_x log (C p)_x`` over the simplex (pushing the counts through the
    channel's inverse goes negative at small epsilon).

    The channel keeps with ``keep`` and otherwise reports each other symbol with ``other``, so
    ``(C p)_x = d p_x + other`` with ``d = keep - other`` and the problem is separable under
    ``sum p = 1``. Its KKT conditions give ``p_x = max(total_x / lam - other / d, 0)``: water
    filling, with the symbols of the largest counts active and ``lam`` fixed by the sum."""
    keep, other = float(channel[0, 0]), float(channel[0, 1])
    ratio = other / (keep - other)
    ordered = np.sort(total)[::-1]
    active = np.arange(1, total.size + 1)
    lam = np.cumsum(ordered) / (1.0 + active * ratio)
    # The active set is the largest k counts for the largest k whose smallest count stays
    # positive: ordered[k-1] / lam_k > ratio (true for k = 1 whenever any count is positive).
    k = int(np.flatnonzero(ordered > ratio * lam)[-1])
    p = np.maximum(total / lam[k] - ratio, 0.0)
    return p / p.sum()


def pooled_median_interval(
    pooled: np.ndarray,
    n_cells: int,
    channel: np.ndarray,
    low: float,
    draws: int = 200,
    level: float = 0.9,
) -> tuple[float, float]:
    """A parametric-bootstrap interval of the median score of ``pooled`` (the pooled fit of
    ``n_cells`` reports): ``draws`` report totals drawn from the multinomial it predicts, each
    fitted again (seeded, so the same release gives the same interval). Where the learned prior
    is strong the tasks' truths sit near this median, so a wide interval says the release does
    not fix them; where no draw keeps a score the median is open over the whole domain. The
    cells are taken as independent, which under two-layer RR (one budget per worker) they are
    not quite."""
    g = channel.shape[0] - 1
    predicted = channel @ pooled
    rng = np.random.default_rng(0)
    drawn = rng.multinomial(n_cells, predicted / predicted.sum(), size=draws)
    fits = np.array([pooled_distribution(t.astype(float), channel) for t in drawn])
    answered = fits[:, :g].sum(axis=1) > 0
    if not answered.any():
        return low - 0.5, low + g - 0.5
    medians = grouped_median(fits[answered, :g], low)
    lo, hi = np.quantile(medians, [(1.0 - level) / 2, (1.0 + level) / 2])
    return float(lo), float(hi)


def variational_bound(
    counts: np.ndarray,
    channel: np.ndarray,
    expected: np.ndarray,
    n_q: np.ndarray,
    rate: np.ndarray,
    scores_prior: np.ndarray,
) -> np.ndarray:
    """Per task, the evidence lower bound of the posterior ``q(p_q)`` = prior + ``expected``
    with each report's latent symbol at its optimal responsibilities: ``sum_x c_x log (w C^T)_x``
    (``w = exp(E_q[log p_q])``) less ``KL(q(p_q) || prior)``, the Beta and Dirichlet levels
    apart. It compares fixed points of the same task: the higher one explains its reports
    better for the prior's cost."""
    from scipy.special import digamma, gammaln  # on use: costs ~0.5 s to import

    g = scores_prior.size
    # The variational weights whatever the fit's estimate: the bound is variational Bayes's.
    _, predicted = null_e_step(counts, channel, expected, n_q, rate, scores_prior, "variational")
    fit = (counts * np.log(predicted)).sum(axis=1)
    answered = expected[:, :g].sum(axis=1)
    levels = (
        (np.column_stack([answered + rate[0], expected[:, g] + rate[1]]), rate),
        (expected[:, :g] + scores_prior, scores_prior),
    )
    for post, prior in levels:
        total = post.sum(axis=1)
        fit -= (
            gammaln(total)
            - gammaln(post).sum(axis=1)
            - gammaln(prior.sum())
            + gammaln(prior).sum()
            + ((post - prior) * (digamma(post) - digamma(total)[:, None])).sum(axis=1)
        )
    return fit


def moment_strengths(
    counts: np.ndarray, channel: np.ndarray, pooled: np.ndarray, keep_variance: float = 0.0
) -> tuple[float, float]:
    """The prior's two strengths (answered-or-NULL, score given answered) by the method of
    moments on the tasks' deconvolved counts ``t_q = C^-1 c_q``.

    Given its true counts a task's reports vary by ``sum_z t_z (diag C_z - C_z C_z^T)``, linear in
    ``t``, so over tasks the noise in ``t_q`` is ``D = N C^-1 (diag(C p) - C diag(p) C^T) C^-T``
    per cell at the pooled ``p`` (less ``Var[keep] W diag(p) W^T`` when each worker keeps with
    its own probability, a fixed effect over tasks). Under the nested Dirichlet the answered
    count ``A`` is beta-binomial, ``Var A = N r (1 - r)(1 + (N - 1) / (lam + 1))``, and the scores'
    centred sum ``x = sum_s (s - m) t_s`` has ``E x^2 = E[A] v + E[A (A - 1)] v / (beta + 1)``,
    ``v`` the pooled scores' variance. The observed second moments less the noise give
    ``1 / (lam + 1)`` and ``1 / (beta + 1)``, clipped to the strength range."""
    g = channel.shape[0] - 1
    n_q = counts.sum(axis=1)
    keep, other = channel[0, 0], channel[0, 1]
    deconvolved = (counts - other * n_q[:, None]) / (keep - other)
    inverse = (np.eye(g + 1) - other) / (keep - other)
    noise = np.diag(channel @ pooled) - channel @ np.diag(pooled) @ channel.T
    moves = np.eye(g + 1) - (1.0 - np.eye(g + 1)) / g  # d C[:, z] / d keep
    noise -= keep_variance * (moves @ np.diag(pooled) @ moves.T)
    noise = inverse @ noise @ inverse.T
    low, high = _STRENGTH_RANGE

    def strength(inv: float) -> float:
        return float(np.clip(1.0 / max(inv, 1.0 / high) - 1.0, low, high))

    rate = float(pooled[:g].sum())
    if not _TINY < rate < 1.0 - _TINY:
        return high, high
    answered = np.r_[np.ones(g), 0.0]
    pairs = float((n_q * (n_q - 1)).sum())
    excess = ((deconvolved @ answered - n_q * rate) ** 2).sum() - n_q.sum() * (
        answered @ noise @ answered + rate * (1.0 - rate)
    )
    inv_answered = float(np.clip(excess / (rate * (1.0 - rate) * max(pairs, 1.0)), 0.0, 1.0))
    shares = pooled[:g] / rate
    scores = np.arange(g, dtype=float)
    mean = float(shares @ scores)
    spread = float(shares @ (scores - mean) ** 2)
    if spread <= _TINY:
        return strength(inv_answered), high
    centred = np.r_[scores - mean, 0.0]
    excess = ((deconvolved @ centred) ** 2).sum() - n_q.sum() * (
        centred @ noise @ centred + rate * spread
    )
    pairs_answered = pairs * (rate * rate + rate * (1.0 - rate) * inv_answered)
    inv_scores = excess / (spread * max(pairs_answered, _TINY))
    return strength(inv_answered), strength(float(inv_scores))


class NullProblem(NamedTuple):
    """What AwareNull's steps read: per task its report counts and cells, the channel, the
    prior (answered-or-NULL rates, scores), how a task's truth summarises its fit (the lowest
    score, and median or mean: :func:`~._kernels._numpy.null_truths`), the estimate and
    ``tol``."""

    counts: np.ndarray
    channel: np.ndarray
    n_q: np.ndarray
    rate: np.ndarray
    scores_prior: np.ndarray
    low: float
    median: bool
    estimate: str
    tol: float


def null_start(part: Any, previous: Any, state: Any) -> tuple[Any, Any]:
    """The tasks' start: expected counts of true symbols, truths, which tasks still step (and
    the constants of the tasks' steps, once computed)."""
    return state, None


def null_step(part: Any, previous: Any, p: NullProblem) -> tuple[Any, Any]:
    """One accelerated step of every task still stepping (:func:`~._kernels.aware_null_step`);
    a task stops once its truth moves by less than ``tol``. Statistics: the summed
    log-likelihood of the tasks that stepped, that of those that stopped now, and how many
    still step."""
    expected, truth, active, constants = previous[0]
    if constants is None:
        constants = _kernels.null_task_constants(p.n_q, p.rate, p.scores_prior)
    stats = _kernels.aware_null_step(
        p.counts,
        p.channel,
        p.rate,
        p.scores_prior,
        constants,
        (expected, truth, active),
        p.low,
        p.median,
        p.estimate,
        p.tol,
    )
    return (expected, truth, active, constants), stats


class AwareNullModel(Model):
    """AwareNull's tasks, each fitted on its own under the fixed prior: a step moves every task
    still stepping, the fit stops when none is. The objective after a step is the summed
    log-likelihood of every task (its last value for those that stopped; gold tasks count 0)
    per report cell."""

    start = staticmethod(null_start)
    step = staticmethod(null_step)

    def __init__(self, problem: NullProblem, state: tuple[Any, ...]) -> None:
        super().__init__(problem.tol)
        self.problem, self.start_arg = problem, state
        self.cells = max(float(problem.n_q.sum()), 1.0)
        #: The summed last log-likelihood of the tasks that stopped.
        self.stopped = 0.0

    def init(self, stats: Any) -> NullProblem:
        return self.problem

    def m_step(self, stats: Any) -> NullProblem:
        self.stopped += stats[1]
        return self.problem

    def objective(self, stats: Any) -> float:
        return (stats[0] + self.stopped) / self.cells

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return stats[2] == 0


class AwareNull(Estimator):
    """Task-level deconvolution of P3's randomized-response channels with NULL (see module doc).

    Parameters
    ----------
    mechanism : KRRNull or TwoLayerNull
        The mechanism that released the workers' full rows, with its public parameters.
    location : {"median", "mean"}, default "median"
        How a task's truth summarises its inferred distribution of answers: the median (scores
        as unit-wide bins; it can reach half a score beyond the domain's ends) or the mean.
    strength : float > 0 or None, default None
        Pseudo-answers in each level of the prior. None learns each level's strength from the
        data (method of moments, at least 1); a number fixes both.
    estimate : {"map", "variational"}, default "map"
        How each task's distribution is fitted. "map": the posterior mode under the prior with
        one more pseudo-answer per symbol, by EM, whose weights are the posterior means
        ``(n_qz + prior_z) / (n_q + sum prior)`` level by level: a concave objective, one fixed
        point, no digamma. "variational": variational Bayes, weights ``exp(E[log p_q])``; under
        a weak prior a task can have several fixed points (see ``start``). On P3's real data
        the MAP estimate is the closer at 20 of 28 settings; on its synthetic design the
        variational one at 45 of 48 (``docs/reproduction.md``).
    start : {"pooled", "deconvolved"}, default "pooled"
        Where each task's iteration starts: the pooled distribution, or its own report counts
        pushed through the channel's inverse (clipped at 0). A task's variational fit can have
        several fixed points where the prior holds under one pseudo-answer per score; the two
        starts can end at different ones (``bound_`` tells which explains the reports better).
    max_iter : int, default 1000
        Accelerated steps (three E steps each).
    tol : float, default 1e-4
        On the largest change of a truth, in score units.

    Notes
    -----
    Fitted: ``truths_``, ``answer_rate_`` (per task, the posterior mean share of workers who
    answered it), ``pooled_`` (the pooled distribution of true symbols, scores then NULL),
    ``strengths_`` (the prior's pseudo-answers: answered-or-NULL level, score level),
    ``bound_`` (per task, the variational bound of its fit, computed on demand) and
    ``pooled_median_interval_`` (a nominal 90% bootstrap interval of the pooled answers' median,
    which the truths follow where the prior is strong; computed on demand). The answers
    must be the mechanism's release of every worker's full row over the tasks: non-NULL reports
    as answers, NULL reports left out (as ``perturb`` returns them); a task's NULL reports are
    counted as the workers minus its answers.
    """

    __privtd_tags__ = Tags(
        "aware-null",
        mechanisms=("krr-null", "two-layer-null"),
        default_for=("krr-null", "two-layer-null"),
        release_only=True,
    )

    kinds = ("numeric",)
    iterative = True

    def __init__(
        self,
        mechanism: Any,
        *,
        location: str = "median",
        strength: float | None = None,
        estimate: str = "map",
        start: str = "pooled",
        max_iter: int = 1000,
        tol: float = 1e-4,
    ) -> None:
        self.mechanism = mechanism
        self.location = location
        self.strength = strength
        self.estimate = estimate
        self.start = start
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.location not in ("median", "mean"):
            raise ValidationError(
                f"AwareNull location must be 'median' or 'mean'; got {self.location!r}."
            )
        if self.strength is not None:
            _check_float(type(self).__name__, "strength", self.strength, 0.0, low_open=True)
        _check_choice(type(self).__name__, "estimate", self.estimate, ("map", "variational"))
        _check_choice(type(self).__name__, "start", self.start, ("pooled", "deconvolved"))
        null_channel(self.mechanism)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        mech = self.mechanism
        channel = null_channel(mech)
        g = mech.domain_size
        counts = self._symbol_counts(answers)
        n_q = counts.sum(axis=1)
        pooled = pooled_distribution(counts.sum(axis=0), channel)
        if self.strength is None:
            spread = mech.keep_variance()
            strengths = moment_strengths(counts, channel, pooled, spread)
        else:
            strengths = (float(self.strength), float(self.strength))
        # The prior's centre stays inside the simplex: the pooled fit puts exact zeros on
        # symbols whose reports the channel's noise explains, and a zero Beta or Dirichlet
        # parameter has no digamma.
        centre = np.maximum(pooled, _TINY)
        centre /= centre.sum()
        rate = np.array([1.0 - centre[g], centre[g]]) * strengths[0]
        scores_prior = centre[:g] / centre[:g].sum() * strengths[1]
        median = self.location == "median"
        expected = np.outer(n_q, np.maximum(pooled, _TINY))
        if self.start == "deconvolved":
            # Each task's counts through the channel's inverse, clipped, rescaled to its cells,
            # with a trace of the pooled start so that no symbol starts at exactly 0.
            keep, other = channel[0, 0], channel[0, 1]
            own = np.maximum((counts - other * n_q[:, None]) / (keep - other), 0.0)
            own += 1e-3 * expected / np.maximum(n_q, 1.0)[:, None]
            expected = own * (n_q / own.sum(axis=1))[:, None]
        truth = null_truths(expected, scores_prior, mech.low, median)
        if gold is not None:
            truth[gold.index] = gold.value
        # Tasks are independent given the fixed prior: each stops on its own, so the few slow
        # ones (small epsilon, tasks near the middle) do not keep the rest iterating.
        active = np.ones(answers.n_tasks, dtype=bool)
        if gold is not None:
            active[gold.index] = False
        problem = NullProblem(
            counts,
            channel,
            n_q,
            rate,
            scores_prior,
            mech.low,
            median,
            self.estimate,
            self.tol,
        )
        model = AwareNullModel(problem, (expected, truth, active, None))
        executor = InMemory(MemoryPart(answers, gold, None))
        fit = run_em(model, executor, int(self.max_iter), self._tick)
        expected, truth = executor.state[:2]
        answered = expected[:, :g].sum(axis=1)
        self.answer_rate_ = pd.Series(
            (answered + rate[0]) / (n_q + rate.sum()), index=answers.tasks, name="answer_rate"
        )
        self.pooled_ = pooled
        self.strengths_ = strengths
        # For bound_, computed on demand (one more E step; most callers never ask).
        self._posterior = (counts, channel, expected, n_q, rate, scores_prior, answers.tasks)
        self._set_results(
            answers, truth, n_iter=fit.n_iter, converged=fit.converged, objective=fit.objective
        )

    @property
    def bound_(self) -> pd.Series:
        """Per task, the variational bound of its fit (``variational_bound``): between two
        fits of the same release (other starts, other settings), the higher bound is the
        better explanation of that task's reports."""
        if not hasattr(self, "_posterior"):
            raise ValidationError("AwareNull is not fitted yet: call fit(answers) first.")
        *state, tasks = self._posterior
        return pd.Series(variational_bound(*state), index=tasks, name="bound")

    @property
    def pooled_median_interval_(self) -> tuple[float, float]:
        """A nominal 90% parametric-bootstrap interval of the pooled answers' median score
        (``pooled_median_interval``): at small epsilon and high sparsity the learned prior takes
        most tasks to the pooled answers, and this says how far the release fixes them (on P3's
        synthetic design at sparsity 0.9: 0.27-7.3 at epsilon 0.1, 0.27-0.44 at epsilon 1)."""
        if not hasattr(self, "_posterior"):
            raise ValidationError("AwareNull is not fitted yet: call fit(answers) first.")
        counts, channel = self._posterior[:2]
        return pooled_median_interval(self.pooled_, int(counts.sum()), channel, self.mechanism.low)

    def _symbol_counts(self, answers: Answers) -> np.ndarray:
        """Per task the count of each reported symbol: scores, then NULL."""
        mech = self.mechanism
        g = mech.domain_size
        shifted = answers.value - mech.low
        rounded = np.rint(shifted)
        # One pass each: np.allclose's generality cost more than the whole fit on P3's design.
        if rounded.min() < 0 or rounded.max() >= g or np.abs(shifted - rounded).max() > 1e-9:
            raise ValidationError(
                f"{type(mech).__name__} reports are integer scores in [{mech.low}, {mech.high}]; "
                "these answers hold other values. Pass the mechanism that produced them."
            )
        flat = answers.task.astype(np.int64) * (g + 1) + rounded.astype(np.int64)
        counts = np.bincount(flat, minlength=answers.n_tasks * (g + 1)).astype(float)
        counts = counts.reshape(answers.n_tasks, g + 1)
        counts[:, g] = answers.n_workers - answers.task_counts()
        return counts
