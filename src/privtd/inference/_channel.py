"""The randomized-response channel, and how a worker model's answer likelihood goes through it.

A mechanism that perturbs each categorical answer on the worker's device is a public channel
``C[r, a] = P(report r | answer a)``. A worker model gives ``P(answer a | truth l)``; the server
sees reports, whose likelihood is the composition ``P(r | l) = sum_a C[r, a] P(a | l)``.

The one-coin family (GLAD, ZenCrowd, one-coin Dawid-Skene) and MACE all have answer
likelihoods of the shape ``P(a | l) = c [a = l] + d(a)``: a weight on the truth plus a
distribution that does not depend on it (``c = s - (1 - s) / (K - 1)`` and
``d = (1 - s) / (K - 1)`` for an accuracy ``s``; ``c = theta`` and ``d = (1 - theta) xi`` for
MACE's trust and spamming strategy). Composition keeps the shape:
``P(r | l) = c C[r, l] + (C d)[r]``, so the report likelihood of every answer costs ``O(K)``
(:func:`report_likelihood`). Derivation and use in ``docs/inference.md``.

Randomized response at flip probability ``f`` is ``R_f = (1 - f K / (K - 1)) I + f / (K - 1)``
(:func:`report_channel`), which keeps every column sum, so composing a confusion is affine
(:func:`compose`; Perturbation-aware Dawid-Skene uses it per point of the flip law).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ValidationError


def flip_law(
    mechanism: Any, n_labels: int, n_points: int = 32, owner: str = "AwareOneCoin"
) -> tuple[np.ndarray, np.ndarray]:
    """The mechanism's flip probabilities on a grid and their weights
    (:meth:`~privtd.mechanisms.Mechanism.flip_law`: one point for one-layer RR and binary RR,
    ``n_points`` quantile midpoints of ``U(a, b)`` for two-layer RR), no flip without a
    mechanism."""
    if mechanism is None:
        return np.zeros(1), np.ones(1)
    _check_flips_labels(mechanism, n_labels, owner)
    flips, weights = mechanism.flip_law(n_points)
    return flips, weights


def _check_flips_labels(mechanism: Any, n_labels: int, owner: str) -> None:
    """A ValidationError unless ``mechanism`` is randomized response over ``n_labels`` labels."""
    expected = getattr(mechanism, "n_labels", n_labels)
    if expected != n_labels:
        raise ValidationError(
            f"The mechanism was built for {expected} labels; these answers have {n_labels}. "
            f"Build it with n_labels={n_labels}.",
            param="n_labels",
        )
    if not getattr(mechanism, "flips_labels", False):
        raise ValidationError(
            f"{owner} models randomized response (one-layer, binary, two-layer); got "
            f"{type(mechanism).__name__}. Use a matching estimator, or no mechanism."
        )


def report_channel(flips: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Generalized randomized response at flip probability ``f`` is
    ``R_f = (1 - f K / (K - 1)) I + f / (K - 1)``, and every column of a confusion sums to 1,
    so ``(R_f pi)[z, y] = scale_f pi[z, y] + spread_f``: the composition is affine, with no
    matrix product. Returns ``scale`` and ``spread`` per point of the flip grid."""
    return 1.0 - flips * k / (k - 1), flips / (k - 1)


def compose(pi: np.ndarray, channel: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``(R_s pi_w)[z, y]`` as ``[w, s, z, y]``: what worker ``w`` reports at flip ``s``."""
    scale, spread = channel
    composed = scale[:, None, None] * pi[:, None] + spread[:, None, None]
    np.maximum(composed, 1e-300, out=composed)
    return composed


def channel_matrix(mechanism: Any, k: int, owner: str) -> np.ndarray | None:
    """The mechanism's channel ``C[r, a] = P(report r | answer a)`` that every worker shares
    (:meth:`~privtd.mechanisms.Mechanism.shared_channel`), as a ``K x K`` matrix, or None
    without a mechanism (the identity; callers take a faster path).

    One-layer (and binary) RR: ``R_f``. Two-layer RR draws each worker's flip ``f_u`` from
    ``U(a, b)`` once; RR channels compose by multiplying their scales ``1 - f K / (K - 1)``, so
    ``R_{f_u} = R_g R_a`` with a worker-specific ``R_g``: the shared part is ``R_a``, and the
    rest is a symmetric RR that each worker's own parameters absorb (``docs/inference.md``)."""
    if mechanism is None:
        return None
    _check_flips_labels(mechanism, k, owner)
    matrix: np.ndarray = mechanism.shared_channel(k)
    return matrix


def report_likelihood(
    channel: np.ndarray | None,
    report: np.ndarray,
    match: np.ndarray,
    spread: np.ndarray,
    k: int,
) -> np.ndarray:
    """``P(report_n | truth l)`` as an ``(answers, K)`` array, for answer likelihoods
    ``P(a | l) = match_n [a = l] + d_n(a)``: ``match_n C[r_n, l] + spread_n``, where the caller
    gives ``spread_n = (C d_n)[r_n]`` (for a ``d_n`` that is flat over labels, ``d_n`` times the
    channel's row sum). ``channel`` None is the identity: ``match_n [r_n = l] + spread_n``."""
    out = np.repeat(spread[:, None], k, axis=1)
    if channel is None:
        out[np.arange(report.size), report] += match
    else:
        out += match[:, None] * channel[report]
    np.maximum(out, 1e-300, out=out)
    return out


def compose_confusions(
    channel: np.ndarray | None, match: np.ndarray, base: np.ndarray
) -> np.ndarray:
    """Each worker's report likelihood ``P(r | l)`` as ``[worker, report, truth]``, for answer
    likelihoods ``P(a | l) = match_w [a = l] + base_w(a)`` (``base`` is ``(workers, K)``):
    ``match_w C[r, l] + (C base_w)[r]``. Models whose parameters are per worker only (MACE,
    ZenCrowd) then run the Dawid-Skene pass on these confusions."""
    k = base.shape[1]
    c = np.eye(k) if channel is None else channel
    out = match[:, None, None] * c[None] + (base @ c.T)[:, :, None]
    np.maximum(out, 1e-300, out=out)
    return out


def truth_part(
    channel: np.ndarray | None, counts: np.ndarray, composed: np.ndarray, weight: np.ndarray
) -> np.ndarray:
    """Per worker, the expected number of reports whose own answer came from the truth part
    ``weight_w [a = l]`` of the answer likelihood: ``sum_{r, l} N[w, r, l] weight_w C[r, l] /
    P_w(r | l)``, with ``N`` the reports' expected report-truth counts."""
    ratio = counts / composed
    if channel is None:
        inner = np.diagonal(ratio, axis1=1, axis2=2).sum(axis=1)
    else:
        inner = (ratio * channel[None]).sum(axis=(1, 2))
    out: np.ndarray = weight * inner
    return out
