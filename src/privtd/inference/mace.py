"""MACE: Multi-Annotator Competence Estimation (Hovy et al., NAACL 2013).

Each answer of worker ``j`` is either given in earnest (probability ``theta_j``: the answer is
the truth) or spammed (probability ``1 - theta_j``: the answer is drawn from the worker's own
strategy ``xi_j``, a distribution over labels), so
``P(a | l) = theta_j [a = l] + (1 - theta_j) xi_j(a)``; the truths have a uniform prior.

Fitted as the paper and its reference implementation do: random restarts (each drawing
``theta`` and ``xi`` uniformly and normalising) and the restart with the highest marginal
likelihood kept. By default (``method="vb"``, the reference implementation's default, and
crowd-kit's) each M-step is the paper's variational-Bayes update: Beta(0.5, 0.5) prior on the
trust and a symmetric Dirichlet(10) on the strategy, ``exp(digamma(...))`` normalisation.
``method="em"`` is plain maximum likelihood with fractional counts smoothed by ``0.01 / K``
(the reference implementation's ``--em``).

Every parameter is per worker, so each worker is a Dawid-Skene confusion
``pi_j[a, l] = theta_j [a = l] + (1 - theta_j) xi_j(a)``: one fused Dawid-Skene pass over the
answers gives the posteriors and each worker's report-truth counts, from which the expected
earnest answers and spammed answers per label follow per worker. Through a
randomized-response channel ``C`` (``MACE(mechanism=...)``) the report likelihood is
``theta C[r, l] + (1 - theta) (C xi)[r]`` (``privtd.inference._channel``), and a spammed
report's own answer ``a`` is latent with weight ``xi(a) C[r, a]``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .._rng import RNGLike, check_rng
from ..answers import Answers
from ._base import _check_choice, _check_float, _check_int
from ._channel import channel_matrix, compose_confusions, truth_part
from ._em import EMEstimator, Executor, Fit, Model, Shape, run_em
from ._tags import MEMORY_AND_DASK, RANDOMIZED_RESPONSE, Tags
from .dawid_skene import ds_pass

# Arrays per worker: trust (earnest), spam (1 - trust under EM; less under VB), strategy (K).
Params = tuple[np.ndarray, np.ndarray, np.ndarray]


class MACE(EMEstimator):
    """MACE (Hovy et al. 2013): a spamming indicator per answer (see module doc).

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None, default None
        The mechanism that produced the answers, whose channel is composed into the report
        likelihood (method ``aware-mace``; see module doc). Two-layer RR enters through the
        flip all its workers share, ``R_a`` (the rest each worker's parameters absorb;
        ``docs/inference.md``). None: the plain model (method ``mace``).
    n_restarts : int, default 10
        Random restarts; the one with the highest marginal likelihood is kept.
    max_iter : int, default 100
        EM iterations per restart at most.
    min_iter : int, default 50
        EM iterations per restart at least (capped at ``max_iter``): the paper's reference
        implementation runs a fixed 50. Stopping earlier on ``tol`` left fits on Dog and
        Duchenne a few 1e-6 per answer below crowd-kit's 50-iteration likelihood
        (benchmarks/results/mace_objective.txt).
    tol : float, default 1e-6
        After ``min_iter``, on the change of the log marginal likelihood per answer. Tighter
        than most models' 1e-5 (as GLAD's): MACE's likelihood creeps, and a fit stopped on
        1e-5 alone, before ``min_iter`` existed, ended on sentiment 8.5e-5 per answer below
        where 50 iterations get.
    method : {"vb", "em"}, default "vb"
        "vb": variational Bayes with the priors below (the reference implementation's default
        and crowd-kit's; over the five bundled datasets with expert truths as accurate as EM,
        docs/inference.md); "em": maximum likelihood with smoothed counts.
    smoothing : float or None, default None
        Added to every fractional count before normalising (EM). None: ``0.01 / K``.
    alpha, beta : float, default 0.5
        Beta prior on spamming (alpha) and on answering in earnest (beta) (VB).
    strategy_prior : float, default 10
        Symmetric Dirichlet prior on each strategy (VB).
    default_noise : float, default 0.5
        Random starts are drawn from ``U(1, 1 + default_noise)`` and normalised.
    rng : Generator, int or None, default 0
        Seeds the restarts (an int keeps a fit reproducible; None draws fresh entropy).

    Notes
    -----
    Fitted: ``truths_``, ``probas_``, ``weights_`` (``weight`` = competence ``theta``, the
    probability that an answer is given in earnest; ``spam`` = the weight of spamming, which is
    ``1 - weight`` under EM and less under VB), ``strategies_`` (``(workers, K)``, in
    ``answers.labels`` order), ``n_iter_`` / ``converged_`` / ``objective_`` of the restart
    kept, ``restart_objectives_``.
    """

    __privtd_tags__ = Tags(
        "mace",
        executors=MEMORY_AND_DASK,
        aware_form=Tags("aware-mace", mechanisms=RANDOMIZED_RESPONSE, executors=MEMORY_AND_DASK),
    )

    def __init__(
        self,
        mechanism: Any = None,
        *,
        n_restarts: int = 10,
        max_iter: int = 100,
        min_iter: int = 50,
        tol: float = 1e-6,
        method: str = "vb",
        smoothing: float | None = None,
        alpha: float = 0.5,
        beta: float = 0.5,
        strategy_prior: float = 10.0,
        default_noise: float = 0.5,
        rng: RNGLike = 0,
    ) -> None:
        self.mechanism = mechanism
        self.n_restarts = n_restarts
        self.max_iter = max_iter
        self.min_iter = min_iter
        self.tol = tol
        self.method = method
        self.smoothing = smoothing
        self.alpha = alpha
        self.beta = beta
        self.strategy_prior = strategy_prior
        self.default_noise = default_noise
        self.rng = rng

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        _check_int(name, "n_restarts", self.n_restarts, low=1)
        _check_int(name, "min_iter", self.min_iter, low=1)
        _check_choice(name, "method", self.method, ("em", "vb"))
        if self.smoothing is not None:
            _check_float(name, "smoothing", self.smoothing, 0.0)
        for key in ("alpha", "beta", "strategy_prior"):
            _check_float(name, key, getattr(self, key), 0.0, low_open=True)
        _check_float(name, "default_noise", self.default_noise, 0.0)

    #: Per restart: the reference implementation's fixed 50 (``min_iter``); at tol 1e-6 the
    #: kept restart went on to 50-84 iterations on the bundled datasets.
    typical_iterations = 50

    def _planned_passes(self) -> int:
        starts = getattr(self, "_starts", None)
        n_starts = self.n_restarts if starts is None else len(starts)
        per_start = max(super()._planned_passes(), min(self.min_iter, self.max_iter))
        return int(n_starts) * per_start

    def _run(self, executor: Executor, shape: Shape) -> Fit:
        """Every restart, one :func:`~._em.run_em` each from its random draw (drawn all before
        the first), and the one with the highest log marginal likelihood kept."""
        n_w, k = shape.n_workers, shape.n_labels
        gen = check_rng(self.rng)
        starts = getattr(self, "_starts", None)
        if starts is None:
            starts = []
            for _ in range(self.n_restarts):
                spam = 1.0 + self.default_noise * gen.random((n_w, 2))
                strategy = 1.0 + self.default_noise * gen.random((n_w, k))
                spam /= spam.sum(axis=1, keepdims=True)
                strategy /= strategy.sum(axis=1, keepdims=True)
                starts.append((spam[:, 1], spam[:, 0], strategy))
        channel = channel_matrix(self.mechanism, k, type(self).__name__)
        best: tuple[MACEModel, Fit] | None = None
        finals = []
        for start in starts:
            model = MACEModel(self, shape, channel, start)
            fit = run_em(model, executor, int(self.max_iter), self._tick)
            finals.append(fit.objective[-1] if fit.objective else -np.inf)
            if best is None or finals[-1] > best[1].objective[-1]:
                best = model, fit
        assert best is not None
        model, kept = best
        if kept is not fit:
            # The executor holds the last restart's posteriors: the kept one's again.
            executor.run(ds_pass, model.step_params(kept.used))
        self.restart_objectives_ = np.asarray(finals)
        return kept

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        # Reported: the parameters the final posteriors were computed with.
        trust, spam, strategy = fit.used
        self.strategies_ = strategy
        self._set_results(
            answers,
            truth,
            proba=mu,
            weight=trust,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"spam": spam},
        )


class MACEModel(Model):
    """One restart of MACE as sufficient statistics: Dawid-Skene's pass
    (:func:`~.dawid_skene.ds_pass`) under each worker's confusion, through the channel, with a
    uniform class prior; parameters: trust, spam and strategy per worker (see module doc). Its
    start is the E-step from the restart's draw; it stops, after ``min_iter`` steps, when the
    log marginal likelihood per answer moves less than ``tol``."""

    start = staticmethod(ds_pass)
    step = staticmethod(ds_pass)

    def __init__(self, est: MACE, shape: Shape, channel: np.ndarray | None, start: Params) -> None:
        super().__init__(est.tol)
        self.est, self.shape, self.channel = est, shape, channel
        k = shape.n_labels
        self.log_prior = np.full(k, -np.log(k))
        self.counts = shape.counts.astype(np.float64)
        self.smoothing = 0.01 / k if est.smoothing is None else est.smoothing
        self.min_iter = min(est.min_iter, est.max_iter)
        self.start_arg = self.step_params(start)

    def step_params(self, params: Params) -> tuple[np.ndarray, np.ndarray]:
        trust, spam, strategy = params
        # Per worker, P(r | l) = trust C[r, l] + spam (C xi)[r]; kept, with the parameters,
        # for the M-step that reads this step's report-truth counts.
        self.used = params
        self.composed = compose_confusions(self.channel, trust, spam[:, None] * strategy)
        n_w, k = self.shape.n_workers, self.shape.n_labels
        return np.log(self.composed).reshape(n_w * k, k), self.log_prior

    def init(self, stats: Any) -> Params:
        return self.m_step(stats)

    def m_step(self, stats: Any) -> Params:
        from scipy.special import digamma  # on first fit: privtd imports light

        est, channel, composed = self.est, self.channel, self.composed
        trust, spam, strategy = self.used
        n_w, k = self.shape.n_workers, self.shape.n_labels
        table = np.asarray(stats[0], dtype=np.float64).reshape(n_w, k, k)
        earnest = truth_part(channel, table, composed, trust)
        # Spammed reports per worker and report value, then split over own answers a by
        # xi(a) C[r, a] (no channel: a = r).
        by_report = spam[:, None] * (table / composed).sum(axis=2)
        strategy_counts = strategy * (by_report if channel is None else by_report @ channel)
        counts = self.counts
        if est.method == "em":
            smoothing = self.smoothing
            trust = (earnest + smoothing) / (counts + 2 * smoothing)
            spam = 1.0 - trust
            strategy = strategy_counts + smoothing
            strategy /= strategy.sum(axis=1, keepdims=True)
            return trust, spam, strategy
        spam_counts = counts - earnest
        total = digamma(counts + est.alpha + est.beta)
        trust = np.exp(digamma(earnest + est.beta) - total)
        spam = np.exp(digamma(spam_counts + est.alpha) - total)
        strategy = np.exp(
            digamma(strategy_counts + est.strategy_prior)
            - digamma(strategy_counts.sum(axis=1, keepdims=True) + k * est.strategy_prior)
        )
        return trust, spam, strategy

    def objective(self, stats: Any) -> float:
        return float(stats[2]) / self.shape.n_answers

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return (
            n_iter >= self.min_iter and n_iter > 1 and abs(objective[-1] - objective[-2]) < self.tol
        )


class AwareMACE(MACE):
    """Deprecated alias of ``MACE(mechanism=...)``, kept for one release: it fits and
    reports as that, and constructing one warns (``FutureWarning``)."""

    def __init__(self, mechanism: Any = None, **params: Any) -> None:
        warnings.warn(
            "AwareMACE is deprecated; use MACE(mechanism=...).", FutureWarning, stacklevel=2
        )
        super().__init__(mechanism, **params)
