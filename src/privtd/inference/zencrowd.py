"""ZenCrowd: one reliability per worker (Demartini et al., WWW 2012).

Worker ``u`` gives the truth with probability ``p_u`` (its reliability) and otherwise one of the
other ``K - 1`` labels uniformly: ``P(a | l) = p_u [a = l] + (1 - p_u) / (K - 1) [a != l]``.
ZenCrowd's factor graph has no class prior (every candidate starts equal), so the truth step
uses a uniform one; EM alternates task posteriors and ``p_u`` = the expected share of the
worker's answers that are right (the truth-inference survey's form, Zheng et al., VLDB 2017).
It is one-coin Dawid-Skene without the learned class prior, which on skewed data keeps EM from
collapsing onto the majority class.

Through a randomized-response channel ``C`` (``ZenCrowd(mechanism=...)``) the report likelihood is
``c C[r, l] + (1 - p) / (K - 1)`` with ``c = p - (1 - p) / (K - 1)``
(``privtd.inference._channel``), and a report is right with posterior
``sum_l mu_l p C[r, l] / P(r | l)``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..answers import Answers
from ._channel import channel_matrix, compose_confusions, truth_part
from ._em import EMEstimator, Fit, Model, Shape
from ._ops import per_worker
from ._tags import MEMORY_AND_DASK, RANDOMIZED_RESPONSE, Tags
from .dawid_skene import ds_pass

_CLIP = 1e-6


def zencrowd_start(part: Any, previous: Any, arg: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per part: the EM start (label frequencies, a warm start's posteriors, gold) and each
    worker's posterior mass on the reports it gave."""
    mu = part.soft_start()
    return mu, np.bincount(part.worker, mu[part.task, part.value], minlength=part.n_workers)


class ZenCrowdModel(Model):
    """ZenCrowd's sufficient statistics: Dawid-Skene's pass (:func:`~.dawid_skene.ds_pass`)
    under the one-reliability confusions, with a uniform class prior; parameters: each
    worker's reliability."""

    start = staticmethod(zencrowd_start)
    step = staticmethod(ds_pass)

    def __init__(self, tol: float, shape: Shape, channel: np.ndarray | None) -> None:
        super().__init__(tol)
        self.shape, self.channel = shape, channel
        k = shape.n_labels
        self.log_prior = np.full(k, -np.log(k))
        self.counts = shape.counts.astype(np.float64)

    def init(self, stats: Any) -> np.ndarray:
        # The share of each worker's reports that match, taken through the channel (observed
        # accuracy A = p (1 - f) + (1 - p) f / (K - 1) under RR at flip f).
        k = self.shape.n_labels
        reliability = per_worker(np.asarray(stats, dtype=np.float64), self.counts, 1.0 / k)
        if self.channel is not None:
            f = 1.0 - float(self.channel[0, 0])
            reliability = (reliability - f / (k - 1)) / (1.0 - f * k / (k - 1))
        return np.clip(reliability, _CLIP, 1.0 - _CLIP)

    def step_params(self, reliability: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, n_w = self.shape.n_labels, self.shape.n_workers
        wrong = (1.0 - reliability) / (k - 1)
        # Per worker P(r | l) through the channel, kept for the M-step.
        self.composed = compose_confusions(
            self.channel, reliability - wrong, np.repeat(wrong[:, None], k, axis=1)
        )
        self.reliability = reliability
        return np.log(self.composed).reshape(n_w * k, k), self.log_prior

    def m_step(self, stats: Any) -> np.ndarray:
        # A report's own answer is the truth with weight p C[r, l] / P(r | l).
        k, n_w = self.shape.n_labels, self.shape.n_workers
        flat = np.asarray(stats[0], dtype=np.float64)
        right = truth_part(self.channel, flat.reshape(n_w, k, k), self.composed, self.reliability)
        return np.clip(per_worker(right, self.counts, 1.0 / k), _CLIP, 1 - _CLIP)

    def objective(self, stats: Any) -> float:
        return float(stats[2]) / self.shape.n_answers

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return n_iter > 1 and abs(objective[-1] - objective[-2]) < self.tol


class ZenCrowd(EMEstimator):
    """ZenCrowd (Demartini et al. 2012): one reliability per worker (see module doc).

    Start: soft majority vote (or a warm start's posteriors), then the reliability step.

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None, default None
        The mechanism that produced the answers, whose channel is composed into the report
        likelihood (method ``aware-zencrowd``; see module doc). Two-layer RR enters through the
        flip all its workers share, ``R_a`` (the rest each worker's parameters absorb;
        ``docs/inference.md``). None: the plain model (method ``zencrowd``).
    max_iter : int, default 100
    tol : float, default 1e-5
        On the change of the log marginal likelihood per answer.

    Notes
    -----
    Fitted: ``truths_``, ``probas_``, ``weights_`` (``weight`` = reliability ``p_u``).
    """

    __privtd_tags__ = Tags(
        "zencrowd",
        executors=MEMORY_AND_DASK,
        aware_form=Tags(
            "aware-zencrowd", mechanisms=RANDOMIZED_RESPONSE, executors=MEMORY_AND_DASK
        ),
    )

    warm_starts = True

    def __init__(self, mechanism: Any = None, *, max_iter: int = 100, tol: float = 1e-5) -> None:
        self.mechanism = mechanism
        self.max_iter = max_iter
        self.tol = tol

    @property
    def _warm_name(self) -> str:
        # The aware form's warm states are named AwareZenCrowd, as its deprecated alias's are:
        # a state the service saved for its next run resumes it, and a plain fit's state
        # (reliabilities of the reports, not of the workers' own answers) does not start it.
        return type(self).__name__ if self.mechanism is None else "AwareZenCrowd"

    def _model(self, shape: Shape) -> ZenCrowdModel:
        channel = channel_matrix(self.mechanism, shape.n_labels, type(self).__name__)
        return ZenCrowdModel(self.tol, shape, channel)

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        self._set_results(
            answers,
            truth,
            proba=mu,
            # Reported: the reliabilities the final posteriors were computed with.
            weight=fit.used,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
        )


class AwareZenCrowd(ZenCrowd):
    """Deprecated alias of ``ZenCrowd(mechanism=...)``, kept for one release: it fits and
    reports as that, and constructing one warns (``FutureWarning``)."""

    def __init__(self, mechanism: Any = None, **params: Any) -> None:
        warnings.warn(
            "AwareZenCrowd is deprecated; use ZenCrowd(mechanism=...).", FutureWarning, stacklevel=2
        )
        super().__init__(mechanism, **params)
