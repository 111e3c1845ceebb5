"""Privacy of a worker's whole release when all its answers share one private draw.

P0's two-layer mechanism draws a flip probability ``f ~ U(a, b)`` once per draw and flips every
answer under it with ``f``. Over ``k`` answers, a report that agrees with the answers in ``m``
places has probability ``L(m) = E[(1 - f)^m (f / (s - 1))^(k - m)]`` (``s`` labels), a function of
``m`` alone, so two figures follow from ``l(m) = ln L(m)``, ``m = 0..k``:

- one answer given the worker's other ``k - 1`` reports: changing that answer moves ``m`` by one
  (or leaves ``L`` unchanged, for ``s > 2``, between two labels the report differs from), so the
  loss is ``max_m |l(m) - l(m - 1)|``;
- the whole release: every pair ``(m, m')`` in ``[0, k]^2`` is reached by some pair of answer
  vectors and report (for two labels too), so the loss is ``max l - min l``.

For one answer both are P0's marginal figure; as ``k`` grows (``a = 0``, two labels) the first
grows like ``ln k`` (the draw is learned from the other reports) and the second like ``k ln 2``
while ``b >= 1/2``, ``k ln(1 / b)`` for smaller ``b``.

P3's two-layer with NULL has the same shape with a private budget ``eps ~ U(0, top)`` in place of
``f`` (:func:`shared_budget_epsilons`); P1's exponential variance is handled beside its mechanism
(``ExpGaussian.answer_epsilon``), whose reports enter through their sum of squared offsets.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# Gauss-Legendre nodes for each panel of the window around the integrand's peak.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(48)
_PANELS = 8
# Half-width of the window, in the integrand's own length scale (its peak's curvature or, at an
# end of [a, b], its slope): the log-concave integrand is below e^-200 of its peak outside it.
_WIDTH = 40.0
# Release sizes integrated at a time: each takes _PANELS * 48 nodes, so a worker with 10^5
# answers would otherwise hold several arrays of 3.8e7 doubles (gigabytes) at once.
_CHUNK = 4096


def log_uniform_moments(m: np.ndarray, n: np.ndarray, a: float, b: float) -> np.ndarray:
    """``ln E[(1 - f)^m f^n]`` for ``f ~ U(a, b)`` (``f = a`` when ``a == b``), elementwise.

    The integrand ``exp(n ln f + m ln(1 - f))`` is log-concave; each one is integrated by
    Gauss-Legendre over a window around its peak scaled to its own width, in log space, so the
    figure stays accurate where the moment itself underflows (``k`` in the thousands).
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    m, n = np.broadcast_arrays(m, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        if b - a <= 0.0:
            return _log_power(n, a) + _log_power(m, 1.0 - a)
        total = m + n
        peak = np.where(total > 0, n / np.where(total > 0, total, 1.0), a)
        peak = np.clip(peak, a, b)
        # The length scale: 1/sqrt(curvature) at an interior peak, 1/slope at an end.
        fp = np.clip(peak, 1e-300, 1.0 - 1e-16)
        curvature = n / fp**2 + m / (1.0 - fp) ** 2
        slope = np.abs(n / fp - m / (1.0 - fp))
        scale = np.minimum(
            np.where(curvature > 0, 1.0 / np.sqrt(curvature), np.inf),
            np.where(slope > 0, 1.0 / slope, np.inf),
        )
        scale = np.where(np.isfinite(scale), scale, b - a)
        lo = np.maximum(a, peak - _WIDTH * scale)
        hi = np.minimum(b, peak + _WIDTH * scale)
        # Panels of the window, each with its Gauss-Legendre nodes: shape (..., panels, nodes).
        edges = lo[..., None] + (hi - lo)[..., None] * np.linspace(0.0, 1.0, _PANELS + 1)
        left, right = edges[..., :-1, None], edges[..., 1:, None]
        half = (right - left) / 2.0
        x = left + half * (_NODES + 1.0)
        log_f = _log_power(n[..., None, None], x)
        log_g = _log_power(m[..., None, None], 1.0 - x)
        terms = log_f + log_g + np.log(_WEIGHTS * half)
        top = terms.max(axis=(-2, -1))
        top = np.where(np.isfinite(top), top, 0.0)
        summed = np.exp(terms - top[..., None, None]).sum(axis=(-2, -1))
        return top + np.log(summed) - math.log(b - a)


def _log_power(p: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    """``p ln x`` with ``0 ln 0 = 0``."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p == 0, 0.0, p * np.log(x))


def report_log_likelihoods(k: int, n_labels: int, a: float, b: float) -> np.ndarray:
    """``l(m) = ln E[(1 - f)^m (f / (s - 1))^(k - m)]`` for ``m = 0..k``, ``f ~ U(a, b)``."""
    m = np.arange(k + 1, dtype=float)
    moments = np.concatenate([log_uniform_moments(part, k - part, a, b) for part in _chunks(m)])
    return moments - (k - m) * math.log(n_labels - 1)


def _chunks(m: np.ndarray) -> list[np.ndarray]:
    return [m[i : i + _CHUNK] for i in range(0, m.size, _CHUNK)]


@functools.lru_cache(maxsize=512)
def shared_flip_epsilons(k: int, n_labels: int, a: float, b: float) -> tuple[float, float]:
    """(one answer given the other ``k - 1``, the whole release of ``k``) under one ``f ~ U(a, b)``.

    Infinite where some report has probability 0 under one answer vector but not another (``a = 0``
    with ``b = 1`` is finite; ``a = b = 0`` never flips and is infinite)."""
    if k < 1:
        return 0.0, 0.0
    ell = report_log_likelihoods(k, n_labels, a, b)
    if not np.isfinite(ell).all():
        return math.inf, math.inf
    step = float(np.abs(np.diff(ell)).max())
    return step, float(ell.max() - ell.min())


def log_budget_moments(m: np.ndarray, k: int, others: int, top: float) -> np.ndarray:
    """``ln E[e^(eps m) / (g + e^eps)^k]`` for ``eps ~ U(0, top)`` (``g = others``), elementwise.

    P3's two-layer with NULL keeps a cell's symbol with ``e^eps / (g + e^eps)`` and moves it to
    each other symbol with ``1 / (g + e^eps)``; a report of ``k`` cells that agrees with the row in
    ``m`` of them has this probability. The log-integrand ``eps m - k ln(g + e^eps)`` is concave,
    so it is integrated as :func:`log_uniform_moments` is: Gauss-Legendre over a window around its
    peak, in log space.
    """
    m = np.asarray(m, dtype=float)
    g = float(others)
    with np.errstate(divide="ignore", invalid="ignore"):
        # The peak: m = k e^eps / (g + e^eps), so e^eps = g m / (k - m), clipped to [0, top].
        peak = np.clip(np.log(g * m / np.where(k - m > 0, k - m, 1.0)), 0.0, top)
        peak = np.where(m >= k, top, np.where(m <= 0, 0.0, peak))
        share = np.exp(peak) / (g + np.exp(peak))
        curvature = k * share * (1.0 - share)
        slope = np.abs(m - k * share)
        scale = np.minimum(
            np.where(curvature > 0, 1.0 / np.sqrt(curvature), np.inf),
            np.where(slope > 0, 1.0 / slope, np.inf),
        )
    scale = np.where(np.isfinite(scale), scale, top)
    lo = np.maximum(0.0, peak - _WIDTH * scale)
    hi = np.minimum(top, peak + _WIDTH * scale)
    edges = lo[..., None] + (hi - lo)[..., None] * np.linspace(0.0, 1.0, _PANELS + 1)
    left, right = edges[..., :-1, None], edges[..., 1:, None]
    half = (right - left) / 2.0
    x = left + half * (_NODES + 1.0)
    terms = m[..., None, None] * x - k * np.logaddexp(math.log(g), x) + np.log(_WEIGHTS * half)
    peak_term = terms.max(axis=(-2, -1))
    summed = np.exp(terms - peak_term[..., None, None]).sum(axis=(-2, -1))
    return peak_term + np.log(summed) - math.log(top)


@functools.lru_cache(maxsize=512)
def shared_budget_epsilons(k: int, others: int, top: float) -> tuple[float, float]:
    """(one cell given the other ``k - 1``, the whole row of ``k``) under one ``eps ~ U(0, top)``
    and randomized response over ``others + 1`` symbols.

    ``l(m) = ln E[e^(eps m) / (g + e^eps)^k]`` depends on the agreements ``m`` alone; changing
    one cell moves ``m`` by at most one, and every pair ``(m, m')`` is reached by some pair of
    rows (``g >= 1`` other symbols), so the figures are ``max_m |l(m) - l(m - 1)|`` and
    ``max l - min l``. Both stay below ``top`` and ``k top``, the figures given ``eps`` itself.
    """
    if k < 1:
        return 0.0, 0.0
    ell = np.concatenate(
        [log_budget_moments(part, k, others, top) for part in _chunks(np.arange(k + 1.0))]
    )
    return float(np.abs(np.diff(ell)).max()), float(ell.max() - ell.min())
