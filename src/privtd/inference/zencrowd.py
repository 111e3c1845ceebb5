"""ZenCrowd: one reliability per worker (Demartini et al., WWW 2012).

Worker ``u`` gives the truth with probability ``p_u`` (its reliability) and otherwise one of the
other ``K - 1`` labels uniformly: ``P(a | l) = p_u [a = l] + (1 - p_u) / (K - 1) [a != l]``.
ZenCrowd's factor graph has no class prior (every candidate starts equal), so the truth step
uses a uniform one; EM alternates task posteriors and ``p_u`` = the expected share of the
worker's answers that are right (the truth-inference survey's form, Zheng et al., VLDB 2017).
It is one-coin Dawid-Skene without the learned class prior, which on skewed data keeps EM from
collapsing onto the majority class.

Through a randomized-response channel ``C`` (:class:`AwareZenCrowd`) the report likelihood is
``c C[r, l] + (1 - p) / (K - 1)`` with ``c = p - (1 - p) / (K - 1)``
(``privtd.inference._channel``), and a report is right with posterior
``sum_l mu_l p C[r, l] / P(r | l)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold
from ._channel import channel_matrix, compose_confusions, truth_part
from ._ops import per_worker, shares, vote_matrix
from .dawid_skene import fix_gold, gold_array

_CLIP = 1e-6


class ZenCrowd(Estimator):
    """ZenCrowd (Demartini et al. 2012): one reliability per worker (see module doc).

    Start: soft majority vote (or a warm start's posteriors), then the reliability step.

    Parameters
    ----------
    max_iter : int, default 100
    tol : float, default 1e-5
        On the change of the log marginal likelihood per answer.

    Notes
    -----
    Fitted: ``truths_``, ``probas_``, ``weights_`` (``weight`` = reliability ``p_u``).
    """

    iterative = True
    warm_starts = True

    def __init__(self, *, max_iter: int = 100, tol: float = 1e-5) -> None:
        self.max_iter = max_iter
        self.tol = tol

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        n_t, n_w, k = answers.n_tasks, answers.n_workers, answers.n_labels
        channel = channel_matrix(getattr(self, "mechanism", None), k, type(self).__name__)
        t, w, r = answers.task, answers.worker, answers.value
        counts = answers.worker_counts().astype(np.float64)
        log_prior = np.full(k, -np.log(k))

        mu = shares(vote_matrix(t, r, n_t, k))
        if self._warm is not None:
            self._warm.apply(mu)
        fix_gold(mu, gold)
        # The start: the share of each worker's reports that match, taken through the channel
        # (observed accuracy A = p (1 - f) + (1 - p) f / (K - 1) under RR at flip f).
        reliability = per_worker(np.bincount(w, mu[t, r], minlength=n_w), counts, 1.0 / k)
        if channel is not None:
            f = 1.0 - float(channel[0, 0])
            reliability = (reliability - f / (k - 1)) / (1.0 - f * k / (k - 1))
        reliability = np.clip(reliability, _CLIP, 1.0 - _CLIP)

        layout = _kernels.TaskLayout(t, w, r, n_t)
        wx = layout.worker.astype(np.int64) * k + layout.value
        gold_labels = gold_array(gold, n_t)
        objective: list[float] = []
        converged = False
        n_iter = 0
        used = reliability
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            wrong = (1.0 - reliability) / (k - 1)
            # Per worker P(r | l) through the channel; the Dawid-Skene pass on it gives the
            # posteriors and each worker's report-truth counts.
            composed = compose_confusions(
                channel, reliability - wrong, np.repeat(wrong[:, None], k, axis=1)
            )
            mu, flat, _, loglik = _kernels.ds_step(
                layout, wx, np.log(composed).reshape(n_w * k, k), log_prior, gold_labels
            )
            objective.append(loglik / answers.n_answers)
            # Reported: the reliabilities the final posteriors were computed with.
            used = reliability
            # A report's own answer is the truth with weight p C[r, l] / P(r | l).
            right = truth_part(channel, flat.reshape(n_w, k, k), composed, reliability)
            reliability = np.clip(per_worker(right, counts, 1.0 / k), _CLIP, 1 - _CLIP)
            if n_iter > 1 and abs(objective[-1] - objective[-2]) < self.tol:
                converged = True
                break
        self._set_results(
            answers,
            mu.argmax(axis=1),
            proba=mu,
            weight=used,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
        )


class AwareZenCrowd(ZenCrowd):
    """ZenCrowd with the public randomized-response channel in the likelihood (see module doc).

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None
        The mechanism that produced the answers. Two-layer RR enters through the flip all its
        workers share, ``R_a`` (the rest each worker's parameters absorb; ``docs/inference.md``).
        None: plain :class:`ZenCrowd`.
    **params
        As :class:`ZenCrowd`.
    """

    def __init__(self, mechanism: Any = None, **params: Any) -> None:
        self.mechanism = mechanism
        super().__init__(**params)
