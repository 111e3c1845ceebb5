"""Perturbation-aware Dawid-Skene: each worker's full confusion matrix composed with the known
randomized-response channel.

Worker ``u`` answers ``x`` to a task of truth ``y`` with its own confusion ``pi_u[x, y]`` (any
bias, for example towards one label, which a one-coin model cannot express); then its device
reports ``z`` through generalized randomized response with flip probability ``f_u``:
``R_f[z, x] = 1 - f`` if ``z = x`` and ``f / (K - 1)`` otherwise (one-layer: ``f_u = f`` public;
two-layer: ``f_u ~ U(a, b)``, private, its law public). The server sees ``z`` through the
composed confusion ``(R_f pi_u)[z, y]``.

EM with two latent layers (derivation in ``docs/inference.md``):

- truth step: ``log mu[q, l] = log p_l + sum_{u in U_q} L_u[z_uq, l]`` with
  ``L_u[z, y] = E_{q_u(f)} log (R_f pi_u)[z, y]``: the Dawid-Skene kernel on expected log
  confusions;
- flip step: ``q_u(f) ∝ H(f) prod_{z, y} (R_f pi_u)[z, y]^C_u[z, y]`` on the flip law's grid,
  with ``C_u[z, y] = sum_{q in Q_u} [z_uq = z] mu[q, y]`` the worker's expected report-truth
  counts;
- confusion step: with the worker's own answer ``x`` latent, the expected own-answer counts are
  ``N_u[x, y] = sum_z C_u[z, y] E_{q_u(f)}[R_f[z, x] pi_u[x, y] / (R_f pi_u)[z, y]]``, and
  ``pi_u[., y] ∝ N_u[., y] + alpha[., y]``, a Dirichlet prior (pseudo-counts ``alpha``) that keeps
  a worker with few answers close to a typical worker.

Everything but the truth step works on the ``K x K`` count table of each worker, so a step costs
one Dawid-Skene pass over the answers plus ``O(workers x flips x K^3)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from . import _kernels
from ._base import _check_choice, _check_float, confusion_frame
from ._channel import compose, flip_law, report_channel
from ._em import EMEstimator, Executor, Fit, Model, Shape
from ._tags import MEMORY_AND_DASK, RANDOMIZED_RESPONSE, Tags
from .dawid_skene import EPS, ds_pass, ds_start
from .decision import check_decision, decision_codes, default_decision
from .perturbation_aware import run_oriented

# A worker state: own confusions, flip posteriors, class prior, the truth step's expected log
# confusions, and the workers' part of the bound (``_kernels._numpy.bound_terms``) at those
# confusions and flips.
State = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]


def _jump(
    start: State,
    first: State,
    second: State,
    learned_prior: bool,
    channel: tuple[np.ndarray, np.ndarray],
    log_h: np.ndarray,
    alpha: np.ndarray,
) -> State:
    """SQUAREM's jump from three successive states, with what the next truth step needs
    (:func:`~._kernels.aware_ds_jump`)."""
    return _kernels.aware_ds_jump(
        start[:3], first[:3], second[:3], learned_prior, channel, log_h, alpha
    )


def resolve_class_prior(class_prior: str, n_labels: int, mechanism: Any) -> str:
    """The class prior that ``class_prior`` ("auto", "learned" or "uniform") fits over
    ``n_labels`` labels: "auto" is "uniform" under a mechanism over more than two labels, else
    "learned" (see :class:`AwareDawidSkene`)."""
    if class_prior == "auto":
        return "uniform" if mechanism is not None and n_labels > 2 else "learned"
    return class_prior


class AwareDawidSkene(EMEstimator):
    """Dawid-Skene with the public randomized-response channel in the likelihood (see module
    doc).

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None
        The mechanism that produced the answers, with its public parameters. None: no
        perturbation (Dawid-Skene with a Dirichlet prior on the confusions).
    prior_strength : float > 0, default 5
        Pseudo-answers per truth column of each worker's own confusion: how many answers a
        worker needs before its own counts outweigh the prior.
    prior_diagonal : float in (0, 1), default 0.7
        The prior's mean probability of answering the truth; the rest is spread evenly over the
        other labels.
    class_prior : {"auto", "learned", "uniform"}, default "auto"
        "learned": as Dawid-Skene, the class prior is re-estimated each iteration; "uniform"
        keeps it fixed. With very few workers per task a learned prior can absorb their bias
        (one worker alone cannot be told from the class balance) and put tasks in the more
        frequent class; "uniform" keeps a lone worker's answers. "auto": "uniform" under a
        mechanism over more than two labels, else "learned" (without a mechanism, as
        Dawid-Skene). Why, measured: with the class prior fixed uniform the model met the plain
        methods' (majority vote's and Dawid-Skene's) balanced accuracy under one-layer and
        two-layer RR at epsilon 0.5-4 on the bundled dog, web and adult_content sets in all 24
        settings over 10 seeds, where the one-coin model met it in 20 (adult_content, one-layer
        RR at epsilon 4: balanced accuracy 0.703 against 0.601;
        ``benchmarks/results/class_prior.txt``, docs/inference.md; the one-coin model stays
        ahead on web). Over two labels the learned prior with the balanced decision stays ahead.
    decision : {None, "map", "balanced"}, default None
        How ``truths_`` are read from the posteriors (``privtd.inference.decision``): "map" the
        most probable label (the Bayes decision for accuracy), "balanced" ``argmax mu / prior``
        (for balanced accuracy). None: "balanced" under a mechanism, "map" without one. Under
        randomized response on skewed classes with a few answers per task the learned prior can
        run to where it alone explains the answers (0.999 on a crowd with 88% of its truths one
        class, three answers a task, one-layer RR at epsilon 1) and every most probable label is
        then that class; the balanced decision reads the evidence against the prior instead
        (``docs/inference.md``, "Decisions"). ``probas_`` are the posteriors either way.
    max_iter : int, default 100
        Passes over the answers, counting the extrapolation's (see ``docs/inference.md``).
    tol : float or None, default None
        On the change per answer, over one plain pass, of the bound the EM climbs: the truth
        step's log-likelihood (with the expected log confusions), plus the confusions' Dirichlet
        log density, less the flip posteriors' divergence from the flip law. None: 1e-6 where
        the flip is public (one-layer RR, or no mechanism), 1e-5 under a flip law (two-layer
        RR). With a public flip the class prior and the workers' biases trade off along a ridge
        that the noise flattens; the fit climbs it in steps under 1e-5 per answer while its
        truths still improve (``docs/inference.md``). Under a flip law the workers whose devices
        kept most answers pin the ridge, and going on to 1e-6 moved nothing measurable.

    Notes
    -----
    Fitted: ``tol_`` (the tolerance used), ``class_prior_`` ("learned" or "uniform", the
    class prior used), ``decision_`` (the decision used), ``truths_``,
    ``probas_``, ``priors_``, ``confusions_`` (each worker's own confusion, the channel taken
    out; a DataFrame with rows (worker, label given) and columns the true label, as
    ``DawidSkene``'s), ``weights_``
    (``weight`` = the prior-weighted own accuracy, ``flip`` = the posterior mean of the worker's
    flip probability, ``observed_accuracy`` = the same for the reports it sent).
    """

    __privtd_tags__ = Tags(
        "aware-ds",
        mechanisms=RANDOMIZED_RESPONSE,
        # The default over aware-one-coin at every label count: privtd.inference.AWARE_METHOD.
        default_for=RANDOMIZED_RESPONSE,
        executors=MEMORY_AND_DASK,
    )

    iterative = True
    warm_starts = True

    def __init__(
        self,
        mechanism: Any = None,
        *,
        prior_strength: float = 5.0,
        prior_diagonal: float = 0.7,
        class_prior: str = "auto",
        decision: str | None = None,
        max_iter: int = 100,
        tol: float | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.prior_strength = prior_strength
        self.prior_diagonal = prior_diagonal
        self.class_prior = class_prior
        self.decision = decision
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        _check_float(name, "prior_strength", self.prior_strength, 0.0, low_open=True)
        _check_float(
            name, "prior_diagonal", self.prior_diagonal, 0.0, 1.0, low_open=True, high_open=True
        )
        _check_choice(name, "class_prior", self.class_prior, ("auto", "learned", "uniform"))
        check_decision(name, self.decision)

    def _model(self, shape: Shape, mirror: bool = False) -> AwareDawidSkeneModel:
        """The EM from the soft majority vote (or a warm start's posteriors and class prior),
        or with ``mirror`` from the last fit's posteriors with the labels swapped."""
        k = shape.n_labels
        flips, flip_weight = flip_law(self.mechanism, k, owner=type(self).__name__)
        typical = np.full((k, k), (1.0 - self.prior_diagonal) / (k - 1))
        np.fill_diagonal(typical, self.prior_diagonal)
        alpha = self.prior_strength * typical
        prior_start = None
        if self._warm is not None and not mirror:
            prior_start = self._warm.array("class_prior", (k,))
        channel = report_channel(flips, k)
        return AwareDawidSkeneModel(
            self, shape, (channel, np.log(flip_weight), alpha), prior_start, mirror
        )

    def _run(self, executor: Executor, shape: Shape) -> Fit:
        """The EM, and without gold over two labels the orientation check
        (:func:`~.perturbation_aware.majority_orientation`)."""
        k = shape.n_labels
        self.class_prior_ = resolve_class_prior(self.class_prior, k, self.mechanism)
        flips, _ = flip_law(self.mechanism, k, owner=type(self).__name__)
        self.tol_ = (1e-6 if flips.size == 1 else 1e-5) if self.tol is None else self.tol
        return run_oriented(self, executor, shape)

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        assert mu is not None
        k = answers.n_labels
        flips, _ = flip_law(self.mechanism, k, owner=type(self).__name__)
        pi, q, prior = fit.params[:3]
        self.confusions_ = confusion_frame(answers, pi)
        self.priors_ = pd.Series(prior, index=answers.labels, name="prior")
        observed = (q[:, :, None, None] * compose(pi, report_channel(flips, k))).sum(axis=1)
        self.decision_ = default_decision(self.decision, self.mechanism)
        self._set_results(
            answers,
            decision_codes(mu, self.decision_, prior),
            proba=mu,
            weight=(np.diagonal(pi, axis1=1, axis2=2) * prior).sum(axis=1),
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={
                "flip": q @ flips,
                "observed_accuracy": (np.diagonal(observed, axis1=1, axis2=2) * prior).sum(axis=1),
            },
            model_state={"class_prior": prior},
        )


class AwareDawidSkeneModel(Model):
    """AwareDawidSkene's EM (see module doc) as sufficient statistics: Dawid-Skene's pass
    (:func:`~.dawid_skene.ds_pass`) on the expected log confusions, whose report-truth counts
    per worker give the worker steps (:func:`~._kernels.aware_ds_workers`). Parameters: a
    :data:`State`. Its objective: the bound EM climbs, per answer; it stops when that moves by
    less than ``tol_`` over one plain pass.

    Truths, flips, confusions and the class prior move together in small steps for tens of
    passes (more under one-layer RR, where the class prior and the workers' biases trade off
    along a ridge the noise flattens), so SQUAREM (Varadhan and Roland 2008) extrapolates every
    two passes along the path they trace (:func:`_jump`)."""

    start = staticmethod(ds_start)
    step = staticmethod(ds_pass)
    accelerated = True

    def __init__(
        self,
        est: AwareDawidSkene,
        shape: Shape,
        channel_law: tuple[tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray],
        prior_start: np.ndarray | None,
        mirror: bool,
    ) -> None:
        super().__init__(est.tol_)
        self.start_arg = mirror
        self.shape, self.prior_start = shape, prior_start
        self.channel, self.log_h, self.alpha = channel_law
        self.learned = est.class_prior_ == "learned"

    def init(self, stats: Any) -> State:
        n_t, n_w, k = self.shape.n_tasks, self.shape.n_workers, self.shape.n_labels
        channel, log_h, alpha = self.channel, self.log_h, self.alpha
        flat_counts, mu_sum = (np.asarray(a, dtype=np.float64) for a in stats)
        if not self.learned:
            prior = np.full(k, 1.0 / k)
        else:
            # mu_sum / n_t is mu.mean(axis=0) to the bit; a cluster sums it shard by shard.
            prior = mu_sum / n_t if self.prior_start is None else self.prior_start.copy()
        counts = flat_counts.reshape(n_w, k, k)
        typical = alpha / alpha.sum(axis=0)
        pi = np.broadcast_to(typical, (n_w, k, k)).copy()
        # Every worker starts as the typical one: one composed confusion gives the flip step.
        log_typical = np.log(compose(typical[None], channel)[0]).reshape(-1, k * k)
        loglik = counts.reshape(n_w, k * k) @ log_typical.T + log_h
        q = np.exp(loglik - loglik.max(axis=1, keepdims=True))
        q /= q.sum(axis=1, keepdims=True)
        # From the typical worker the confusions need a few steps to reach the start's counts;
        # each step is cheap (per worker, not per answer).
        for _ in range(5):
            pi, q, log_conf, bound = _kernels.aware_ds_workers(counts, pi, q, channel, log_h, alpha)
        return pi, q, prior, log_conf, bound

    def step_params(self, state: State) -> tuple[np.ndarray, np.ndarray]:
        n_w, k = self.shape.n_workers, self.shape.n_labels
        return state[3].reshape(n_w * k, k), np.log(np.maximum(state[2], EPS))

    def update(self, stats: Any, used: State) -> tuple[float, State]:
        n_w, k = self.shape.n_workers, self.shape.n_labels
        pi, q, prior, _, bound = used
        flat_counts, prior_sum = (np.asarray(a, dtype=np.float64) for a in stats[:2])
        # The bound EM climbs: the truth step's log-likelihood, plus the Dirichlet prior's log
        # density of the confusions, less each worker's flip posterior's divergence from the
        # flip law (zero with a public flip).
        objective = (float(stats[2]) + bound) / self.shape.n_answers
        if self.learned:
            prior = prior_sum / self.shape.n_tasks
        counts = flat_counts.reshape(n_w, k, k)
        pi, q, log_conf, bound = _kernels.aware_ds_workers(
            counts, pi, q, self.channel, self.log_h, self.alpha
        )
        return objective, (pi, q, prior, log_conf, bound)

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return len(objective) > 1 and abs(objective[-1] - objective[-2]) < self.tol

    def jump(self, start: State, first: State, second: State) -> State:
        return _jump(start, first, second, self.learned, self.channel, self.log_h, self.alpha)
