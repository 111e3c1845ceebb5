"""Perturbation-aware one-coin EM: the known randomized-response channel inside the likelihood.

Worker ``u`` answers a task correctly with its own accuracy ``s_u`` and otherwise uniformly among
the other ``K - 1`` labels; then its device flips the answer with probability ``f_u`` to a
uniformly chosen other label (one-layer: ``f_u = f`` public; two-layer: ``f_u ~ U(a, b)``, private
to the worker, the distribution public). Composing the two symmetric channels gives a one-coin
worker again, whose *observed* accuracy is

    A(s, f) = s (1 - f) + (1 - s) f / (K - 1).

The model is hierarchical: accuracies ``s_u`` come from a population distribution ``G`` (learned,
on a grid), flips from the mechanism's law ``H``. Each worker's observed accuracy then has the
prior ``G x H`` pushed through ``A``, supported only where the channel allows (for one-layer
``[f / (K - 1), 1 - f]``: no worker can look more reliable than the mechanism lets anyone be).

Variational EM (derivation in ``docs/inference.md``):

- E-step over truths: ``log mu[q, l] = log p_l + sum_u [z_uq = l] E[log A_u]
  + [z_uq != l] E[log((1 - A_u) / (K - 1))]``, with expectations under each worker's posterior;
- worker step: on a grid of ``(s, f)``, each worker's posterior is proportional to
  ``G(s) H(f) A^m_u ((1 - A) / (K - 1))^(n_u - m_u)``, where ``m_u = sum_q mu[q, z_uq]`` is the
  expected number of its reports that match the truth and ``n_u`` its number of answers;
- population step: ``G`` is the mean of the workers' posteriors over ``s`` (the nonparametric
  maximum-likelihood update), mixed with a small share of its start so no accuracy is ruled out.

Sparse workers keep a posterior close to the population's; a worker with many answers gets its
own accuracy. Weights are bounded by the channel: under one-layer RR at ``epsilon`` per answer no
vote weighs more than ``epsilon``. Under two-layer with ``a`` near 0 and ``b`` near 1 a worker's
observed accuracy may be below chance and its vote counts inverted
(docs/algorithms.md#td-means-the-signed-weighted-vote).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..answers import Answers
from ..errors import ValidationError
from . import _kernels
from ._base import _check_choice, _check_float
from ._channel import flip_law
from ._em import EMEstimator, Executor, Fit, Model, Shape, run_em
from ._ops import shares, squarem_extrapolate, vote_matrix
from ._tags import MEMORY_AND_DASK, RANDOMIZED_RESPONSE, Tags
from .dawid_skene import EPS
from .decision import check_decision, decision_codes, default_decision
from .one_coin_dawid_skene import one_coin_pass, one_coin_start

_FLOOR = 1e-12


def accuracy_cells(
    s: np.ndarray, flips: np.ndarray, flip_weight: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The observed accuracies a worker can have, and ``C[i, c]``: the probability that a worker
    of own accuracy ``s[i]`` has observed accuracy in cell ``c`` (over the flip law).

    With one flip probability the cells are the ``A(s, f)`` themselves (``C`` is the identity).
    With a flip law the ``(s, f)`` grid is pushed onto ``2 (len(s) - 1) + 1`` equal cells of
    ``[0, 1]`` (width 1 / 200 at the default grid): the likelihood depends on ``(s, f)`` only
    through ``A``, so the worker step costs ``cells`` per worker instead of ``len(s) x len(f)``.
    """
    acc = s[:, None] * (1.0 - flips) + (1.0 - s[:, None]) * flips / (k - 1)
    if flips.size == 1:
        return np.clip(acc[:, 0], _FLOOR, 1.0 - _FLOOR), np.eye(s.size)
    n_cells = 2 * (s.size - 1) + 1
    cell = np.rint(acc * (n_cells - 1)).astype(np.int64)
    conv = np.zeros((s.size, n_cells))
    np.add.at(
        conv, (np.repeat(np.arange(s.size), flips.size), cell.ravel()), np.tile(flip_weight, s.size)
    )
    centres = np.clip(np.linspace(0.0, 1.0, n_cells), _FLOOR, 1.0 - _FLOOR)
    return centres, conv


def majority_agree(part: Any, previous: Any, _: Any) -> tuple[Any, Any]:
    """Per part: how many of its tasks have majority vote's label (without gold: the
    orientation check runs without it) as their most probable one under the posteriors of the
    last step."""
    k = int(part.n_labels or 0)
    majority = shares(vote_matrix(part.task, part.value, part.n_tasks, k)).argmax(axis=1)
    return None, int((previous[0].argmax(axis=1) == majority).sum())


def agreement(executor: Executor, n_tasks: int) -> float:
    """The share of tasks whose most probable label under the last step's posteriors is
    majority vote's; the parts keep those posteriors."""
    kept = executor.outs
    agree = float(executor.run(majority_agree)) / n_tasks
    executor.outs = kept
    return agree


def run_oriented(est: Any, executor: Executor, shape: Shape) -> Fit:
    """An aware estimator's EM (``est._model(shape, mirror)``), and without gold over two
    labels the orientation check (:func:`majority_orientation`)."""
    fit = run_em(est._model(shape), executor, int(est.max_iter), est._tick)
    if shape.n_labels == 2 and not executor.has_gold:

        def refit() -> Fit:
            return run_em(est._model(shape, True), executor, int(est.max_iter), est._tick)

        fit = majority_orientation(fit, refit, executor, shape.n_tasks)
    return fit


def majority_orientation(
    fit: Fit, refit: Callable[[], Fit], executor: Executor, n_tasks: int
) -> Fit:
    """With two labels and flips up to 1/2 or beyond, a fit and its mirror image (every label
    swapped, every worker's accuracy or confusion with them) explain the reports almost equally
    well, and EM can land in either. Keep the orientation in which most workers tell the truth:
    the one that agrees with majority vote more. ``refit`` runs EM again from the last step's
    posteriors with the two labels swapped; the executor ends with the kept fit's."""
    agree = agreement(executor, n_tasks)
    if agree < 0.5:
        kept = executor.outs
        mirror = refit()
        if agreement(executor, n_tasks) > agree:
            return mirror
        executor.outs = kept
    return fit


class AwareOneCoin(EMEstimator):
    """One-coin EM with the public perturbation channel in the likelihood (see module doc).

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None
        The mechanism that produced the answers, with its public parameters. None: no
        perturbation (the model is then a one-coin model with a learned accuracy prior).
    grid : int, default 101
        Points of the accuracy grid on [0, 1].
    prior_weight : float in (0, 1], default 0.3
        Share of the starting accuracy distribution kept in ``G`` at each update.
    start : (alpha, beta), default (2, 1)
        Beta law of the starting accuracy distribution: most workers better than chance.
    class_prior : {"uniform", "learned"}, default "uniform"
        "learned" updates the class prior each iteration, as Dawid-Skene does; with one-coin
        workers it can collapse onto one class (on Duchenne to 0.998, predicting every task 0),
        so the default keeps it uniform.
    decision : {None, "map", "balanced"}, default None
        How ``truths_`` are read from the posteriors, as in :class:`AwareDawidSkene`: None is
        "balanced" under a mechanism, "map" without one. With the uniform class prior the two
        agree; they differ only with ``class_prior="learned"``.
    max_iter : int, default 100
        Passes over the answers, counting the extrapolation's (see ``docs/inference.md``).
    tol : float, default 1e-5
        On the change in the log-likelihood per answer (as :class:`DawidSkene`), computed with
        the expected log-accuracies.

    Notes
    -----
    Fitted: ``decision_`` (the decision used), ``truths_``, ``probas_``, ``priors_``,
    ``weights_`` (``weight`` = posterior mean of the observed accuracy, ``accuracy`` = of the
    worker's own accuracy ``s_u``, ``log_odds`` = the vote weight), ``accuracy_prior_`` (the
    learned ``G`` as a Series over the grid).
    """

    __privtd_tags__ = Tags(
        "aware-one-coin",
        mechanisms=RANDOMIZED_RESPONSE,
        executors=MEMORY_AND_DASK,
    )

    iterative = True
    warm_starts = True

    def __init__(
        self,
        mechanism: Any = None,
        *,
        grid: int = 101,
        prior_weight: float = 0.3,
        start: tuple[float, float] = (2.0, 1.0),
        class_prior: str = "uniform",
        decision: str | None = None,
        max_iter: int = 100,
        tol: float = 1e-5,
    ) -> None:
        self.mechanism = mechanism
        self.grid = grid
        self.prior_weight = prior_weight
        self.start = start
        self.class_prior = class_prior
        self.decision = decision
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        _check_float(name, "prior_weight", self.prior_weight, 0.0, 1.0, low_open=True)
        _check_choice(name, "class_prior", self.class_prior, ("uniform", "learned"))
        check_decision(name, self.decision)
        if not isinstance(self.grid, int) or self.grid < 3:
            raise ValidationError(
                f"The 'grid' parameter of {name} must be an int >= 3. Got {self.grid!r}."
            )
        alpha, beta = self.start
        if not (alpha > 0 and beta > 0):
            raise ValidationError(
                f"The 'start' parameter of {name} must be two positive numbers. Got {self.start!r}."
            )

    def _grids(self, k: int) -> tuple[np.ndarray, ...]:
        """The accuracy grid ``s``, the flip law's flips, the observed-accuracy cells, their
        map ``C`` from ``s`` (:func:`accuracy_cells`) and the logs of a right and of a wrong
        report per cell."""
        flips, flip_weight = flip_law(self.mechanism, k)
        s = np.linspace(0.0, 1.0, self.grid)
        acc, conv = accuracy_cells(s, flips, flip_weight, k)
        basis = np.column_stack([np.log(acc), np.log1p(-acc) - np.log(k - 1)])
        return s, flips, acc, conv, basis

    def _model(self, shape: Shape, mirror: bool = False) -> AwareOneCoinModel:
        """The EM from the soft majority vote (or a warm start's posteriors, ``G`` and class
        prior), or with ``mirror`` from the last fit's posteriors with the labels swapped."""
        k = shape.n_labels
        s, _, _, conv, basis = self._grids(k)
        alpha, beta = self.start
        mid = np.clip(s, 0.5 / self.grid, 1 - 0.5 / self.grid)
        g0 = np.exp((alpha - 1) * np.log(mid) + (beta - 1) * np.log1p(-mid))
        g0 /= g0.sum()
        g_start = prior_start = None
        if self._warm is not None and not mirror:
            g_start = self._warm.array("accuracy_prior", (self.grid,))
            prior_start = self._warm.array("class_prior", (k,))
        return AwareOneCoinModel(self, shape, (g0, conv, basis), (g_start, prior_start), mirror)

    def _run(self, executor: Executor, shape: Shape) -> Fit:
        return run_oriented(self, executor, shape)

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        assert mu is not None
        s, _, acc, conv, basis = self._grids(answers.n_labels)
        g, matches, prior = fit.params[:3]
        counts = answers.worker_counts().astype(np.float64)
        pi = g @ conv
        # A worker's own accuracy given its observed one: E[s | A-cell] = sum_s s G_s C / pi.
        own = (s * g) @ conv / np.maximum(pi, 1e-300)
        targets = np.column_stack([basis, acc, own])
        expect, _ = self._worker_step(matches, counts, pi, basis, targets)
        log_right, log_wrong = expect[:, 0], expect[:, 1]
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        self.accuracy_prior_ = pd.Series(g, index=pd.Index(s, name="accuracy"), name="weight")
        self.decision_ = default_decision(self.decision, self.mechanism)
        self._set_results(
            answers,
            decision_codes(mu, self.decision_, prior),
            proba=mu,
            weight=expect[:, 2],
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={
                "accuracy": expect[:, 3],
                "log_odds": log_right - log_wrong,
            },
            model_state={"accuracy_prior": g, "class_prior": prior},
        )

    @staticmethod
    def _worker_step(
        matches: np.ndarray,
        counts: np.ndarray,
        pi: np.ndarray,
        basis: np.ndarray,
        targets: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each worker's posterior over the observed-accuracy cells, ``∝ pi A^m ((1 - A) /
        (K - 1))^(n - m)`` (``basis`` holds the two logs per cell), reduced to the expectations
        of ``targets`` per worker and the posterior averaged over workers."""
        coef = np.column_stack([matches, counts - matches])
        log_prior = np.log(np.maximum(pi, 1e-300))
        expect, mean_post, _ = _kernels.grid_posterior(coef, basis, log_prior, targets)
        return expect, mean_post


class CoinParams(NamedTuple):
    """AwareOneCoin's parameters: ``G``, each worker's expected matches, the class prior,
    and the worker step from them (each worker's expected log accuracy and log error, which
    the next pass reads, and the population step's ``G``)."""

    g: np.ndarray
    matches: np.ndarray
    prior: np.ndarray
    log_right: np.ndarray
    log_wrong: np.ndarray
    next_g: np.ndarray


class AwareOneCoinModel(Model):
    """AwareOneCoin's variational EM (see module doc) as sufficient statistics: the one-coin
    pass (:func:`~.one_coin_dawid_skene.one_coin_pass`) under each worker's expected log
    accuracies, whose expected matches per worker give the next worker and population steps.
    Its objective: the pass's log-likelihood per answer; it stops when that moves by less than
    ``tol`` over one plain pass.

    As AwareDawidSkene's EM under a flip law, the fit can creep for tens of passes, so it is
    SQUAREM-accelerated (docs/inference.md), over log G, the logit of each worker's expected
    share of matches, and the log class prior where it is learned."""

    start = staticmethod(one_coin_start)
    step = staticmethod(one_coin_pass)
    accelerated = True

    def __init__(
        self,
        est: AwareOneCoin,
        shape: Shape,
        grids: tuple[np.ndarray, np.ndarray, np.ndarray],
        resume: tuple[np.ndarray | None, np.ndarray | None],
        mirror: bool,
    ) -> None:
        super().__init__(est.tol)
        self.start_arg = mirror
        self.g0, self.conv, self.basis = grids
        self.g_start, self.prior_start = resume
        self.shape, self.prior_weight = shape, est.prior_weight
        self.counts = shape.counts.astype(np.float64)
        self.learned = est.class_prior == "learned"

    def init(self, stats: Any) -> CoinParams:
        matches, mu_sum = (_total(a) for a in stats)
        k = self.shape.n_labels
        g = self.g0.copy() if self.g_start is None else self.g_start.copy()
        # mu_sum / n_t is mu.mean(axis=0) to the bit; a cluster sums it shard by shard.
        prior = mu_sum / self.shape.n_tasks if self.learned else np.full(k, 1.0 / k)
        if self.prior_start is not None and self.learned:
            prior = self.prior_start.copy()
        return self._workers(g, matches, prior)

    def _workers(self, g: np.ndarray, matches: np.ndarray, prior: np.ndarray) -> CoinParams:
        """The parameters with their worker and population steps."""
        pi = g @ self.conv
        expect, mean_post = AwareOneCoin._worker_step(
            matches, self.counts, pi, self.basis, self.basis
        )
        # The mean of the workers' posteriors over s: each A-cell's mass split over the s
        # that reach it in proportion to G_s C[s, cell].
        ratio = mean_post / np.maximum(pi, 1e-300)
        w = self.prior_weight
        next_g = (1.0 - w) * g * (self.conv @ ratio) + w * self.g0
        return CoinParams(g, matches, prior, expect[:, 0], expect[:, 1], next_g)

    def step_params(self, params: CoinParams) -> tuple[np.ndarray, ...]:
        return params.log_right, params.log_wrong, np.log(np.maximum(params.prior, EPS))

    def update(self, stats: Any, used: CoinParams) -> tuple[float, CoinParams]:
        matches, prior_sum = _total(stats[0]), _total(stats[1])
        prior = prior_sum / self.shape.n_tasks if self.learned else used.prior
        objective = float(stats[2]) / self.shape.n_answers
        return objective, self._workers(used.next_g, matches, prior)

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return len(objective) > 1 and abs(objective[-1] - objective[-2]) < self.tol

    def _flat(self, params: CoinParams) -> np.ndarray:
        # A worker listed without answers (a crowd's least active) has no share to move:
        # 0 / 0 would turn the extrapolation, and with it every posterior, into NaN.
        share = np.clip(params.matches / np.maximum(self.counts, 1.0), _FLOOR, 1.0 - _FLOOR)
        parts = [np.log(np.maximum(params.g, 1e-300)), np.log(share) - np.log1p(-share)]
        if self.learned:
            parts.append(np.log(np.maximum(params.prior, 1e-300)))
        return np.concatenate(parts)

    def jump(self, start: CoinParams, first: CoinParams, second: CoinParams) -> CoinParams:
        x = squarem_extrapolate(self._flat(start), self._flat(first), self._flat(second))
        log_g, logit, log_prior = np.split(x, [self.g0.size, self.g0.size + self.counts.size])
        g = np.exp(log_g - log_g.max())
        prior = second.prior
        if self.learned:
            prior = np.exp(log_prior - log_prior.max())
            prior /= prior.sum()
        return self._workers(g / g.sum(), self.counts / (1.0 + np.exp(-logit)), prior)

    def keep_jump(
        self, objective: list[float], path: list[Any], jumped: CoinParams, after: CoinParams
    ) -> bool:
        """Kept where the objective at the jump is no lower than at the middle state, as in
        AwareDawidSkene, or where the pass from the jump moves the state no more than the last
        plain pass did: mixing G_0 into each population step makes late plain passes lower the
        objective, so there it cannot judge a jump."""
        moved = np.linalg.norm(self._flat(after) - self._flat(jumped))
        plain = np.linalg.norm(self._flat(path[2]) - self._flat(path[1]))
        return bool(objective[-1] >= objective[-2] or moved <= plain)


def _total(stats: Any) -> np.ndarray:
    """A statistic summed over the parts, as float64."""
    return np.asarray(stats, dtype=np.float64)
