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
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ..answers import Answers
from ..errors import ValidationError
from . import _kernels
from ._base import Estimator, Gold, _check_choice, _check_float
from ._channel import flip_law
from ._ops import squarem_extrapolate
from ._tags import MEMORY_AND_DASK, RANDOMIZED_RESPONSE, Tags
from .dawid_skene import EPS, gold_array, soft_majority
from .decision import check_decision, decision_codes, default_decision

_FLOOR = 1e-12
FitT = TypeVar("FitT", bound=tuple[Any, ...])


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


def majority_orientation(fit: FitT, refit: Callable[[Any], FitT], truth: Any) -> FitT:
    """With two labels and flips up to 1/2 or beyond, a fit and its mirror image (every label
    swapped, every worker's accuracy or confusion with them) explain the reports almost equally
    well, and EM can land in either. Keep the orientation in which most workers tell the truth:
    the one that agrees with majority vote more (``fit[0]`` holds the task posteriors, as
    ``truth`` holds them: ``truth.agreement`` measures them against majority vote and
    ``truth.mirror`` swaps their labels; ``refit`` runs EM again from given posteriors)."""
    agree = truth.agreement(fit[0])
    if agree < 0.5:
        mirror = refit(truth.mirror(fit[0]))
        if truth.agreement(mirror[0]) > agree:
            return mirror
    return fit


class TruthStep:
    """The per-answer half of an aware EM, on answers in memory: its start from task
    posteriors, its truth step (a kernel pass over the answers), and what the fit reads of the
    posteriors. ``privtd.inference.distributed`` passes an object with the same methods that
    runs each on the shards of a Dask cluster, the posteriors staying there."""

    def __init__(self, answers: Answers, layout: _kernels.TaskLayout, gold: np.ndarray) -> None:
        self.answers = answers
        self.layout = layout
        self.gold = gold
        self._majority: np.ndarray | None = None

    def agreement(self, mu: np.ndarray) -> float:
        """The share of tasks whose most probable label is majority vote's."""
        if self._majority is None:
            self._majority = soft_majority(self.answers, None).argmax(axis=1)
        return float((mu.argmax(axis=1) == self._majority).mean())

    @staticmethod
    def mirror(mu: np.ndarray) -> np.ndarray:
        return mu[:, ::-1].copy()

    def finish(self, mu: np.ndarray) -> tuple[Answers, np.ndarray]:
        """The answers to report the results on, and the posteriors as an array."""
        return self.answers, mu


class OneCoinTruth(TruthStep):
    """AwareOneCoin's truth step in memory: expected matches per worker, the one-coin kernel."""

    def start(self, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The posteriors, each worker's expected matches under them, their column sums."""
        a = self.answers
        return mu, _kernels.pick_sum(a.task, a.value, a.worker, mu, a.n_workers), mu.sum(axis=0)

    def step(
        self, log_right: np.ndarray, log_wrong: np.ndarray, log_prior: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        return _kernels.one_coin_step(self.layout, log_right, log_wrong, log_prior, self.gold)


class AwareOneCoin(Estimator):
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

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        layout = _kernels.TaskLayout(answers.task, answers.worker, answers.value, answers.n_tasks)
        truth = OneCoinTruth(answers, layout, gold_array(gold, answers.n_tasks))
        self._fit_em(answers, truth, soft_majority(answers, gold, self._warm), gold is None)

    def _fit_em(self, answers: Answers, truth: Any, start_mu: Any, orient: bool) -> None:
        """The fit from a truth step (:class:`OneCoinTruth`, or the Dask engine's over shards)
        and its start; ``orient``: whether to pick the orientation majority vote agrees with
        (without gold)."""
        k = answers.n_labels
        flips, flip_weight = flip_law(self.mechanism, k)
        s = np.linspace(0.0, 1.0, self.grid)
        acc, conv = accuracy_cells(s, flips, flip_weight, k)
        log_right_grid = np.log(acc)
        log_wrong_grid = np.log1p(-acc) - np.log(k - 1)
        alpha, beta = self.start
        mid = np.clip(s, 0.5 / self.grid, 1 - 0.5 / self.grid)
        g0 = np.exp((alpha - 1) * np.log(mid) + (beta - 1) * np.log1p(-mid))
        g0 /= g0.sum()

        counts = answers.worker_counts().astype(np.float64)
        basis = np.column_stack([log_right_grid, log_wrong_grid])
        grids = (g0, conv, basis)
        resume = None
        if self._warm is not None:
            resume = (
                self._warm.array("accuracy_prior", (self.grid,)),
                self._warm.array("class_prior", (k,)),
            )
        fit = self._em(answers, truth, counts, start_mu, grids, resume)
        if k == 2 and orient:
            fit = majority_orientation(
                fit, lambda mu: self._em(answers, truth, counts, mu, grids), truth
            )
        mu, matches, g, prior, n_iter, converged, objective = fit
        answers, mu = truth.finish(mu)
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
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={
                "accuracy": expect[:, 3],
                "log_odds": log_right - log_wrong,
            },
            model_state={"accuracy_prior": g, "class_prior": prior},
        )

    def _em(
        self,
        answers: Answers,
        truth: Any,
        counts: np.ndarray,
        mu: Any,
        grids: tuple[np.ndarray, np.ndarray, np.ndarray],
        resume: tuple[np.ndarray | None, np.ndarray | None] | None = None,
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, int, bool, list[float]]:
        """Variational EM from the task posteriors ``mu`` (and, resuming a previous fit, its
        ``G`` and class prior); returns the posteriors, the expected matches per worker, ``G``,
        the class prior, iterations, convergence and objective."""
        g0, conv, basis = grids
        n_t, n_w, k = answers.n_tasks, answers.n_workers, answers.n_labels
        g_start, prior_start = resume or (None, None)
        g = g0.copy() if g_start is None else g_start.copy()
        # mu.sum(axis=0) / n_t is mu.mean(axis=0) to the bit; a cluster sums it shard by shard.
        mu, matches, mu_sum = truth.start(mu)
        prior = mu_sum / n_t if self.class_prior == "learned" else np.full(k, 1.0 / k)
        if prior_start is not None and self.class_prior == "learned":
            prior = prior_start.copy()
        learned = self.class_prior == "learned"
        objective: list[float] = []
        passes = 0

        def step(
            g: np.ndarray, matches: np.ndarray, prior: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            """The worker and population steps, then one pass over the answers."""
            nonlocal passes
            passes += 1
            self._tick(passes)
            pi = g @ conv
            expect, mean_post = self._worker_step(matches, counts, pi, basis, basis)
            log_right, log_wrong = expect[:, 0], expect[:, 1]
            # The mean of the workers' posteriors over s: each A-cell's mass split over the s
            # that reach it in proportion to G_s C[s, cell].
            ratio = mean_post / np.maximum(pi, 1e-300)
            g = (1.0 - self.prior_weight) * g * (conv @ ratio) + self.prior_weight * g0
            mu, matches, prior_sum, loglik = truth.step(
                log_right, log_wrong, np.log(np.maximum(prior, EPS))
            )
            objective.append(loglik / answers.n_answers)
            if learned:
                prior = prior_sum / n_t
            return mu, matches, g, prior

        def settled() -> bool:
            """The stopping rule: the objective moved less than tol over one plain pass."""
            return len(objective) > 1 and abs(objective[-1] - objective[-2]) < self.tol

        # As AwareDawidSkene's EM under a flip law, the fit can creep for tens of passes;
        # SQUAREM extrapolates every two passes (docs/inference.md), over log G, the logit of
        # each worker's expected share of matches, and the log class prior where it is learned.
        def flat(state: tuple[np.ndarray, ...]) -> np.ndarray:
            g, matches, prior = state
            # A worker listed without answers (a crowd's least active) has no share to move:
            # 0 / 0 would turn the extrapolation, and with it every posterior, into NaN.
            share = np.clip(matches / np.maximum(counts, 1.0), _FLOOR, 1.0 - _FLOOR)
            parts = [np.log(np.maximum(g, 1e-300)), np.log(share) - np.log1p(-share)]
            return np.concatenate(parts + ([np.log(np.maximum(prior, 1e-300))] if learned else []))

        def unflat(x: np.ndarray, prior: np.ndarray) -> tuple[np.ndarray, ...]:
            log_g, logit, log_prior = np.split(x, [g0.size, g0.size + n_w])
            g = np.exp(log_g - log_g.max())
            if learned:
                prior = np.exp(log_prior - log_prior.max())
                prior /= prior.sum()
            return g / g.sum(), counts / (1.0 + np.exp(-logit)), prior

        converged = False
        while passes < self.max_iter:
            start = (g, matches, prior)
            mu, matches, g, prior = step(g, matches, prior)
            if converged := settled():
                break
            if passes + 2 > self.max_iter:
                continue
            first = (g, matches, prior)
            mu, matches, g, prior = step(g, matches, prior)
            if converged := settled():
                break
            plain = (mu, matches, g, prior)
            x1, x2 = flat(first), flat((g, matches, prior))
            jump = unflat(squarem_extrapolate(flat(start), x1, x2), prior)
            jumped = step(*jump)
            # Kept where the objective at the jump is no lower than at the middle state, as in
            # AwareDawidSkene, or where the pass from the jump moves the state no more than the
            # last plain pass did: mixing G_0 into each population step makes late plain passes
            # lower the objective, so there it cannot judge a jump.
            moved = np.linalg.norm(flat((jumped[2], jumped[1], jumped[3])) - flat(jump))
            if objective[-1] >= objective[-2] or moved <= np.linalg.norm(x2 - x1):
                mu, matches, g, prior = jumped
            else:
                objective.pop()
                mu, matches, g, prior = plain
        return mu, matches, g, prior, passes, converged, objective

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
