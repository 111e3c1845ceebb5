"""Empirical privacy audit: sample a mechanism on neighbouring inputs and bound its privacy loss
from below with exact (Clopper-Pearson) confidence intervals.

A claim passes when no output's estimated loss provably exceeds it; for a tight mechanism the
lower bound should approach the claim as the sample grows. :func:`audit` takes one answer of
one worker (per-worker secrets marginalised: the papers' per-answer figures);
:func:`audit_worker` takes a worker's ``k`` answers as one release, under one private draw,
against ``answer_epsilon(k)`` (one answer changed) or ``release_epsilon(k)`` (several).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from .answers import Answers
from .errors import ValidationError
from .mechanisms import Mechanism, MFPerturbation

__all__ = ["AuditResult", "WorkerAuditResult", "audit", "audit_worker", "clopper_pearson"]


def clopper_pearson(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided (1 - alpha) binomial confidence intervals for ``k`` successes in ``n``."""
    k = np.asarray(k, dtype=float)
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    return lo, hi


@dataclass(frozen=True)
class AuditResult:
    claimed_epsilon: float
    lower_bound: float
    point_estimate: float
    samples: int
    confidence: float

    @property
    def holds(self) -> bool:
        """No output's loss is provably above the claim (at the stated confidence)."""
        return self.lower_bound <= self.claimed_epsilon + 1e-12

    @property
    def tight(self) -> bool:
        """The lower bound reaches 90% of the claim."""
        return self.lower_bound >= 0.9 * self.claimed_epsilon

    @property
    def verdict(self) -> str:
        if not self.holds:
            return "VIOLATED: the measured loss exceeds the claim"
        if self.tight:
            return "holds (tight)"
        return "holds (measured loss below 90% of the claim: conservative, or too few samples)"


def _samples(mechanism: Mechanism, which: int, n: int, seed: int) -> np.ndarray:
    """``n`` independent outputs of the mechanism on one of two neighbouring inputs (0 or 1):
    labels 0 and 1 for categorical mechanisms, ``low`` and ``high`` for numeric ones. Each sample
    is a different one-answer worker, so per-worker secrets (two-layer's ``f_u``, P1's ``v_u``,
    P3's ``eps_u``) are marginalised, which is what the per-answer claims cover. NaN = NULL."""
    if isinstance(mechanism, MFPerturbation):
        return _mf_samples(mechanism, which, n, seed)
    if mechanism.kind == "categorical":
        value = np.full(n, which, dtype=np.int8)
        labels: pd.Index | None = pd.RangeIndex(getattr(mechanism, "n_labels", 2))
    else:
        params = mechanism.params()
        low, high = params["low"], params["high"]
        value, labels = np.full(n, float(high if which else low)), None
    answers = Answers(
        task=np.zeros(n, dtype=np.int32),
        worker=np.arange(n, dtype=np.int32),
        value=value,
        tasks=pd.Index(["q"]),
        workers=pd.RangeIndex(n),
        labels=labels,
    )
    out = mechanism.perturb(answers, rng=seed)
    result = np.full(n, np.nan)
    result[out.worker] = out.value  # workers whose cell came out NULL stay NaN
    return result


def _mf_samples(mechanism: MFPerturbation, which: int, n: int, seed: int) -> np.ndarray:
    """MF releases a whole row; the neighbours differ in the first task's answer (``low`` vs
    ``high``, every task answered) and the event space is the first released cell, a valid
    (if not tight) projection of the output."""
    n_t = int(np.shape(mechanism.profiles)[1])
    if n * n_t > 50_000_000:
        raise ValidationError(
            f"Auditing MF over {n_t} tasks with {n} samples is too large; use profiles with "
            "fewer tasks or fewer samples."
        )
    value = np.full((n, n_t), float(mechanism.low))
    value[:, 0] = mechanism.high if which else mechanism.low
    answers = Answers(
        task=np.tile(np.arange(n_t, dtype=np.int32), n),
        worker=np.repeat(np.arange(n, dtype=np.int32), n_t),
        value=value.ravel(),
        tasks=pd.RangeIndex(n_t),
        workers=pd.RangeIndex(n),
    )
    out = mechanism.perturb(answers, rng=seed)
    return out.value.reshape(n, n_t)[:, 0]


def _events(a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Output events to test: each symbol (NULL included) for discrete outputs; for continuous
    ones, the upper tails ``z > t`` at 40 pooled quantiles (where Laplace-type losses peak)."""
    pooled = np.concatenate([a, b])
    finite = pooled[~np.isnan(pooled)]
    symbols = np.unique(finite)
    if symbols.size <= 64:
        events = [(a == v, b == v) for v in symbols]
        if np.isnan(pooled).any():
            events.append((np.isnan(a), np.isnan(b)))
        return events
    cuts = np.quantile(finite, np.linspace(0.025, 0.975, 40))
    return [(a > t, b > t) for t in cuts] + [(a <= t, b <= t) for t in cuts]


def audit(
    mechanism: Mechanism, samples: int = 1_000_000, seed: int = 0, confidence: float = 0.95
) -> AuditResult:
    """Audit a mechanism's per-unit epsilon on two neighbouring inputs.

    For each output event ``E`` the loss ``ln P(E | x) / P(E | x')`` (both ways) is bounded below
    with Clopper-Pearson intervals, Bonferroni-corrected over the events, so the reported bound
    holds with the stated confidence simultaneously.
    """
    if not isinstance(samples, int) or samples < 100:
        raise ValidationError(f"samples must be an int >= 100. Got {samples!r}.")
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must be in (0, 1). Got {confidence!r}.")
    a, b = _samples(mechanism, 0, samples, seed), _samples(mechanism, 1, samples, seed + 1)
    events = _events(a, b)
    counts0 = np.array([ea.sum() for ea, _ in events])
    counts1 = np.array([eb.sum() for _, eb in events])
    lower, point = _loss_bounds(counts0, counts1, samples, confidence)
    return AuditResult(
        claimed_epsilon=mechanism.epsilon,
        lower_bound=lower,
        point_estimate=point,
        samples=samples,
        confidence=confidence,
    )


def _loss_bounds(
    counts0: np.ndarray,
    counts1: np.ndarray,
    samples: int,
    confidence: float,
    n_tests: int | None = None,
) -> tuple[float, float]:
    """The largest lower confidence bound on ``|ln P(E | x) / P(E | x')|`` over the events (both
    ways, Bonferroni over ``n_tests`` events, by default those given), and the largest finite
    point estimate (inf if an event was seen under one input only)."""
    alpha = (1 - confidence) / (2 * (n_tests or len(counts0)))
    (lo0, hi0), (lo1, hi1) = (clopper_pearson(c, samples, alpha) for c in (counts0, counts1))
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.maximum(np.log(lo0) - np.log(hi1), np.log(lo1) - np.log(hi0))
        point = np.abs(np.log(counts0 / samples) - np.log(counts1 / samples))
    finite = np.isfinite(lower)
    return (
        float(max(0.0, lower[finite].max())) if finite.any() else 0.0,
        float(np.nanmax(np.where(np.isfinite(point), point, np.nan)))
        if np.isfinite(point).any()
        else math.inf,
    )


@dataclass(frozen=True)
class WorkerAuditResult(AuditResult):
    """An audit of one worker's ``answers`` released together, neighbours differing in
    ``differ`` of them; the claim is ``answer_epsilon`` (one) or ``release_epsilon`` (more)."""

    answers: int = 1
    differ: int = 1
    #: What the claim covers, with its unit.
    claim: str = ""


def _worker_rows(
    mechanism: Mechanism, k: int, differ: int, which: int, n: int, seed: int
) -> tuple[np.ndarray, float, float]:
    """``n`` workers' releases of ``k`` answers (one row each; NaN = NULL) on answer vector
    ``which``: 0 gives every answer the first label (``low``), 1 the second (``high``) in its
    first ``differ`` places. Returns the rows and the two answer values."""
    tasks = pd.RangeIndex(k)
    if mechanism.kind == "categorical":
        base, other = 0.0, 1.0
        labels: pd.Index | None = pd.RangeIndex(getattr(mechanism, "n_labels", 2))
    else:
        params = mechanism.params()
        base, other = float(params["low"]), float(params["high"])
        labels = None
    row = np.full(k, base)
    if which:
        row[:differ] = other
    value = np.tile(row, n)
    if labels is not None:
        value = value.astype(np.int8)
    answers = Answers(
        task=np.tile(np.arange(k, dtype=np.int32), n),
        worker=np.repeat(np.arange(n, dtype=np.int32), k),
        value=value,
        tasks=tasks,
        workers=pd.RangeIndex(n),
        labels=labels,
    )
    out = mechanism.perturb(answers, rng=seed)
    grid = np.full((n, k), np.nan)
    grid[out.worker, out.task] = out.value  # cells that came out NULL stay NaN
    return grid, base, other


def audit_worker(
    mechanism: Mechanism,
    answers: int,
    differ: int = 1,
    samples: int = 100_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> WorkerAuditResult:
    """Audit a worker's whole release of ``answers`` units under one private draw.

    ``samples`` simulated workers answer the first label (``low``) everywhere, as many answer the
    second (``high``) in their first ``differ`` places; each worker draws its own secret once
    (``f_u``, ``eps_u``, ``v_u``) and perturbs all its answers with it, as :meth:`perturb` does.
    The events are the joint counts, per worker, of unchanged places whose release equals the
    answer, and of changed places whose release equals the first or the second answer: a
    function of the release, so every event's loss is a valid lower bound on the worker's.
    The claim is ``answer_epsilon(answers)`` for ``differ = 1`` (one answer given the others)
    and ``release_epsilon(answers)`` otherwise (the whole release).
    """
    if isinstance(mechanism, MFPerturbation):
        raise ValidationError(
            "The worker-level audit covers mechanisms that perturb each answer with the worker's "
            "draw; mf solves one objective per worker. Audit mf per answer (audit, not "
            "audit_worker).",
            param="per_worker",
        )
    for name, value, least in (("answers", answers, 1), ("differ", differ, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValidationError(f"{name} must be an int >= {least}. Got {value!r}.")
    if differ > answers:
        raise ValidationError(
            f"differ must be at most answers: the neighbours differ in {differ} of {answers} "
            "answers. Lower differ or raise answers.",
            param=("differ", "answers"),
        )
    if not isinstance(samples, int) or samples < 100:
        raise ValidationError(f"samples must be an int >= 100. Got {samples!r}.")
    if samples * answers > 50_000_000:
        raise ValidationError(
            f"{samples} workers of {answers} answers is too large to simulate; use fewer."
        )
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must be in (0, 1). Got {confidence!r}.")
    width = differ + 1
    counts = []
    for which in (0, 1):
        grid, base, other = _worker_rows(mechanism, answers, differ, which, samples, seed + which)
        kept = np.count_nonzero(grid[:, differ:] == base, axis=1)
        first = np.count_nonzero(grid[:, :differ] == base, axis=1)
        second = np.count_nonzero(grid[:, :differ] == other, axis=1)
        event = (kept * width + first) * width + second
        counts.append(np.bincount(event, minlength=(answers - differ + 1) * width * width))
    seen = (counts[0] > 0) | (counts[1] > 0)
    # Bonferroni over every event possible before sampling (first + second <= differ), not over
    # those the samples happened to show: a count chosen by the data would not bound the error.
    possible = (answers - differ + 1) * (differ + 1) * (differ + 2) // 2
    lower, point = _loss_bounds(
        counts[0][seen], counts[1][seen], samples, confidence, n_tests=possible
    )
    if differ == 1:
        claimed = mechanism.answer_epsilon(answers)
        claim = f"one {mechanism.unit} given the worker's other {answers - 1}"
    else:
        claimed = mechanism.release_epsilon(answers)
        claim = f"the worker's whole release of {answers} {mechanism.unit}(s), per worker"
    return WorkerAuditResult(
        claimed_epsilon=claimed,
        lower_bound=lower,
        point_estimate=point,
        samples=samples,
        confidence=confidence,
        answers=answers,
        differ=differ,
        claim=claim,
    )
