"""GLAD: worker ability times task difficulty (Whitehill et al., NIPS 2009).

Worker ``i`` with ability ``alpha_i`` answers task ``j`` of inverse difficulty ``beta_j > 0``
correctly with probability ``sigma(alpha_i beta_j)``, and otherwise uniformly among the other
``K - 1`` labels. EM as in the paper: the E-step gives task posteriors; the M-step climbs the
expected complete log-likelihood plus Gaussian priors ``alpha ~ N(1, 1)`` and
``log beta ~ N(1, 1)`` by conjugate gradients (the paper's code, and crowd-kit's ``GLAD``).

Through a randomized-response channel ``C`` (``GLAD(mechanism=...)``), the answer likelihood is
composed with it (``privtd.inference._channel``): ``P(r | l) = c C[r, l] + (1 - s) / (K - 1)``
with ``s = sigma(alpha beta)`` and ``c = s - (1 - s) / (K - 1)``, and the gradient goes through
the composition.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from ._base import Estimator, Gold, _check_float, _check_int
from ._channel import channel_matrix, report_likelihood
from ._em import InMemory, MemoryPart, Model, run_em
from ._tags import RANDOMIZED_RESPONSE, Tags
from ._truth_step import task_incidence, truth_step

_LOG_2PI = float(np.log(2 * np.pi))


#: Why GLAD and its aware form stay in memory (docs/scale.md).
_NOT_DISTRIBUTED = (
    "its M-step fits each task's difficulty jointly with the workers' abilities by "
    "conjugate gradients: each gradient would be a pass over the shards"
)


class GLAD(Estimator):
    """GLAD (Whitehill et al. 2009): ``P(correct) = sigma(alpha_i beta_j)`` (see module doc).

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None, default None
        The mechanism that produced the answers, whose channel is composed into the answer
        likelihood (method ``aware-glad``; see module doc). Two-layer RR enters through the
        flip all its workers share, ``R_a`` (the rest each worker's parameters absorb;
        ``docs/inference.md``). None: the plain model (method ``glad``).
    max_iter : int, default 100
        EM iterations (each: one M-step, then one E-step).
    tol : float, default 1e-6
        On the change of the objective per answer: the log marginal likelihood plus the log
        prior densities of ``alpha`` and ``log beta`` (the MAP objective EM climbs). At 1e-5
        the fits on Sentiment and Duchenne stopped about 5e-6 per answer below crowd-kit's own
        stopping point (benchmarks/results/glad_objective.txt); at 1e-6 they end above it.
    alpha_prior : float, default 1
        Mean of the Gaussian prior (variance 1) on each worker's ability; also its start.
    beta_prior : float, default 1
        Mean of the Gaussian prior (variance 1) on each task's ``log beta``; also its start.
    m_step_max_iter : int, default 25
        Conjugate-gradient iterations per M-step (crowd-kit's default).
    m_step_tol : float, default 1e-2
        Gradient tolerance of each M-step.

    Notes
    -----
    The class prior is uniform and fixed, as in the paper.

    Fitted: ``truths_``, ``probas_``, ``weights_`` (``weight`` = ability ``alpha``),
    ``betas_`` (inverse difficulty per task), ``difficulties_`` (``1 / beta``),
    ``n_iter_``, ``converged_``, ``objective_``.
    """

    __privtd_tags__ = Tags(
        "glad",
        not_distributed=_NOT_DISTRIBUTED,
        aware_form=Tags(
            "aware-glad", mechanisms=RANDOMIZED_RESPONSE, not_distributed=_NOT_DISTRIBUTED
        ),
    )

    iterative = True

    def __init__(
        self,
        mechanism: Any = None,
        *,
        max_iter: int = 100,
        tol: float = 1e-6,
        alpha_prior: float = 1.0,
        beta_prior: float = 1.0,
        m_step_max_iter: int = 25,
        m_step_tol: float = 1e-2,
    ) -> None:
        self.mechanism = mechanism
        self.max_iter = max_iter
        self.tol = tol
        self.alpha_prior = alpha_prior
        self.beta_prior = beta_prior
        self.m_step_max_iter = m_step_max_iter
        self.m_step_tol = m_step_tol

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        _check_float(name, "alpha_prior", self.alpha_prior)
        _check_float(name, "beta_prior", self.beta_prior)
        _check_int(name, "m_step_max_iter", self.m_step_max_iter, low=1)
        _check_float(name, "m_step_tol", self.m_step_tol, 0.0, low_open=True)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        channel = channel_matrix(self.mechanism, answers.n_labels, type(self).__name__)
        executor = InMemory(MemoryPart(answers, gold, None))
        fit = run_em(
            GLADModel(self, channel, answers.n_answers), executor, self.max_iter, self._tick
        )
        _, mu, log_beta = executor.state
        beta = pd.Series(np.exp(log_beta), index=answers.tasks, name="beta")
        self.betas_ = beta
        self.difficulties_ = (1.0 / beta).rename("difficulty")
        self._set_results(
            answers,
            mu.argmax(axis=1),
            proba=mu,
            weight=fit.params,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
        )


class GLADTerms:
    """A part's answers as GLAD's steps read them, built once by its start: the likelihood
    of each answer, the E-step and the M-step's objective and gradient."""

    def __init__(self, part: Any, est: GLAD, channel: np.ndarray | None) -> None:
        self.t, self.w, self.r = part.task, part.worker, part.value
        self.n_t, self.n_w, self.k = part.n_tasks, part.n_workers, int(part.n_labels)
        self.gold = part.gold
        self.channel = channel
        self.alpha_prior, self.beta_prior = est.alpha_prior, est.beta_prior
        self.m_step_max_iter, self.m_step_tol = est.m_step_max_iter, est.m_step_tol
        k, r = self.k, self.r
        self.incidence = task_incidence(self.t, self.n_t)
        self.row_sum = np.ones(k) if channel is None else channel.sum(axis=1)
        # dP(r | l) / ds per answer and label: K / (K - 1) C[r, l] - rowsum(C)[r] / (K - 1).
        self.d_lik = None
        if channel is not None:
            self.d_lik = np.full((r.size, k), -1.0 / (k - 1)) * self.row_sum[r][:, None]
            self.d_lik += k / (k - 1) * channel[r]
        self.log_prior = np.full(k, -np.log(k))
        self.log_k1 = np.log(k - 1)

    def likelihood(self, alpha: np.ndarray, log_beta: np.ndarray) -> tuple[np.ndarray, ...]:
        from scipy.special import expit  # scipy loads on first fit: privtd imports light

        t, w, r, k = self.t, self.w, self.r, self.k
        beta = np.exp(log_beta)[t]
        z = alpha[w] * beta
        s, wrong = expit(z), expit(-z) / (k - 1)
        lik = report_likelihood(self.channel, r, s - wrong, wrong * self.row_sum[r], k)
        return lik, beta, s

    def prior_term(self, alpha: np.ndarray, log_beta: np.ndarray) -> float:
        da, db = alpha - self.alpha_prior, log_beta - self.beta_prior
        # Elementwise sums, not BLAS dot products: these run in every gradient evaluation,
        # and OpenBLAS's threads on a busy machine made a 40,000-answer fit 10x slower.
        return -0.5 * float((da * da).sum() + (db * db).sum()) - 0.5 * _LOG_2PI * (
            self.n_w + self.n_t
        )

    def log_right_wrong(self, alpha: np.ndarray, log_beta: np.ndarray) -> tuple[np.ndarray, ...]:
        """Without a channel: per answer ``beta``, ``s = sigma(z)``, ``log s`` and
        ``log((1 - s) / (K - 1))``, stable for large ``|z|``, from one ``exp`` and one
        ``log1p`` (this runs in every gradient evaluation)."""
        beta = np.exp(log_beta)[self.t]
        z = alpha[self.w] * beta
        e = np.exp(-np.abs(z))
        soft = np.log1p(e)  # softplus(z) = max(z, 0) + log1p(exp(-|z|))
        log_right = -(np.maximum(-z, 0.0) + soft)
        log_wrong = -(np.maximum(z, 0.0) + soft) - self.log_k1
        s = np.where(z >= 0, 1.0, e) / (1.0 + e)
        return beta, s, log_right, log_wrong

    def e_step(self, alpha: np.ndarray, log_beta: np.ndarray) -> tuple[np.ndarray, float]:
        """The posteriors and the log marginal likelihood."""
        r = self.r
        if self.channel is None:
            # log P(r | l) = log_wrong + [r = l] (log_right - log_wrong): two scatter-adds.
            _, _, log_right, log_wrong = self.log_right_wrong(alpha, log_beta)
            log_lik = np.zeros((r.size, self.k))
            log_lik += log_wrong[:, None]
            log_lik[np.arange(r.size), r] = log_right
        else:
            log_lik = np.log(self.likelihood(alpha, log_beta)[0])
        return truth_step(log_lik, self.incidence, self.log_prior, self.gold)

    def negative_q(self, x: np.ndarray, mu: np.ndarray) -> tuple[float, np.ndarray]:
        """Minus the expected complete log-posterior, and its gradient in (alpha, log beta)."""
        t, w, r, n_w = self.t, self.w, self.r, self.n_w
        alpha, log_beta = x[:n_w], x[n_w:]
        if self.channel is None:
            # Only the posterior of the given label matters: Q's answer term is
            # m log s + (1 - m) log((1 - s) / (K - 1)), and dQ/dz = m - s.
            beta, s, log_right, log_wrong = self.log_right_wrong(alpha, log_beta)
            m = mu[t, r]
            q = float((m * log_right).sum() + ((1.0 - m) * log_wrong).sum())
            g = m - s
        else:
            lik, beta, s = self.likelihood(alpha, log_beta)
            post = mu[t]
            q = float((post * np.log(lik)).sum())
            # dQ/dz per answer: sum_l mu_l dP_l/ds / P_l, times ds/dz = s (1 - s).
            g = (post * self.d_lik / lik).sum(axis=1) * s * (1.0 - s)
        q += self.prior_term(alpha, log_beta)
        grad_alpha = np.bincount(w, g * beta, minlength=n_w) - (alpha - self.alpha_prior)
        grad_beta = np.bincount(t, g * alpha[w] * beta, minlength=self.n_t) - (
            log_beta - self.beta_prior
        )
        return -q, -np.concatenate([grad_alpha, grad_beta])

    def m_step(self, x: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """(alpha, log beta) by conjugate gradients from ``x``, the posteriors ``mu`` fixed."""
        from scipy.optimize import minimize  # scipy loads on first fit: privtd imports light

        res = minimize(
            self.negative_q,
            x,
            args=(mu,),
            jac=True,
            method="CG",
            tol=self.m_step_tol,
            options={"maxiter": self.m_step_max_iter},
        )
        return res.x


def glad_start(part: Any, previous: Any, arg: tuple[GLAD, np.ndarray | None]) -> tuple[Any, Any]:
    """The part's terms, the abilities and log inverse difficulties at their priors' means,
    and the posteriors they give."""
    terms = GLADTerms(part, *arg)
    alpha = np.full(terms.n_w, float(terms.alpha_prior))
    log_beta = np.full(terms.n_t, float(terms.beta_prior))
    mu, _ = terms.e_step(alpha, log_beta)
    return (terms, mu, log_beta), alpha


def glad_step(part: Any, previous: Any, alpha: np.ndarray) -> tuple[Any, Any]:
    """The M-step over the abilities and the part's log inverse difficulties together, then
    the E-step: the new state, the abilities, the log marginal likelihood and log prior."""
    terms, mu, log_beta = previous[0]
    x = terms.m_step(np.concatenate([alpha, log_beta]), mu)
    alpha, log_beta = x[: terms.n_w], x[terms.n_w :]
    mu, loglik = terms.e_step(alpha, log_beta)
    return (terms, mu, log_beta), (alpha, loglik, terms.prior_term(alpha, log_beta))


class GLADModel(Model):
    """GLAD on :func:`~._em.run_em`: the state of a part is its posteriors and its tasks' log
    inverse difficulties; the parameters are the workers' abilities. The M-step optimises both
    together, so its step runs it on the part: exact on one part (in memory) only."""

    start = staticmethod(glad_start)
    step = staticmethod(glad_step)

    def __init__(self, est: GLAD, channel: np.ndarray | None, n_answers: int) -> None:
        super().__init__(est.tol)
        self.start_arg = (est, channel)
        self.n_answers = n_answers

    def init(self, stats: Any) -> np.ndarray:
        return np.asarray(stats)

    def m_step(self, stats: Any) -> np.ndarray:
        return np.asarray(stats[0])

    def objective(self, stats: Any) -> float:
        return (stats[1] + stats[2]) / self.n_answers


class AwareGLAD(GLAD):
    """Deprecated alias of ``GLAD(mechanism=...)``, kept for one release: it fits and
    reports as that, and constructing one warns (``FutureWarning``)."""

    def __init__(self, mechanism: Any = None, **params: Any) -> None:
        warnings.warn(
            "AwareGLAD is deprecated; use GLAD(mechanism=...).", FutureWarning, stacklevel=2
        )
        super().__init__(mechanism, **params)
