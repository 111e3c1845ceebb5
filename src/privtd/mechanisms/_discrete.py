"""Exact discrete noise laws for numeric releases on a public grid.

Floating-point noise (``-scale * log(u)`` on a 2^-53 grid, Box-Muller) leaves holes in the set
of doubles a release can take, and the holes depend on the true answer, so a release can rule
out a neighbouring answer with certainty (Mironov, "On significance of the least significant
bits for differential privacy", CCS 2012). privtd's numeric releases are instead integers on a
public grid, with integer noise from an exact law:

- the discrete Laplace law ``DL(t)``: ``P(J = j)`` proportional to ``exp(-|j| / t)``;
- the discrete Gaussian ``N_Z(0, s^2)``: ``P(J = j)`` proportional to ``exp(-j^2 / (2 s^2))``
  (Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020).

Two samplers of the same laws:

- real releases (``rng=None``): OpenDP's vetted samplers (exact rational arithmetic, the OS
  cryptographic generator), imported lazily from the ``dp`` extra;
- simulation (an integer seed or a numpy Generator): vectorised numpy samplers driven by
  privtd's keyed draws. ``DL(t)`` is the difference of two geometric draws, ``N_Z`` is
  Canonne-Kamath-Steinke's rejection from ``DL(floor(s) + 1)`` (their Algorithm 3), run in
  rounds, each round on its own streams. These use floating-point logs and exps, so their
  probabilities are exact only up to double rounding: fast and reproducible, not a release.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ValidationError
from ._random import Draws

__all__ = [
    "dlaplace_log_pmf",
    "dgaussian_log_pmf",
    "dgaussian_log_norm",
    "sample_dlaplace",
    "sample_dgaussian",
    "opendp_laplace",
    "opendp_gaussian",
]

#: Rounds of rejection run vectorised before the (rare) stragglers get more.
_MAX_ROUNDS = 10_000


def _opendp() -> Any:
    """OpenDP's prelude with its contributed measurements enabled, or one clear line."""
    try:
        import opendp.prelude as dp
    except ImportError:  # pragma: no cover - exercised by the message test via monkeypatch
        raise ValidationError(
            "A real numeric release samples its noise with OpenDP, which is not installed: "
            "pip install 'privtd[dp]' (or pass an integer seed for a simulation)."
        ) from None
    dp.enable_features("contrib")
    return dp


def opendp_laplace(codes: np.ndarray, scale: float) -> np.ndarray:
    """``codes + DL(scale)``, each entry independently, from OpenDP's exact sampler."""
    dp = _opendp()
    meas = dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale=float(scale)
    )
    return np.asarray(meas([int(c) for c in codes]), dtype=np.int64)


def opendp_gaussian(codes: np.ndarray, sigma: float) -> np.ndarray:
    """``codes + N_Z(0, sigma^2)``, each entry independently, from OpenDP's exact sampler
    (``sigma = 0`` adds nothing)."""
    dp = _opendp()
    meas = dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64"), scale=float(sigma)
    )
    return np.asarray(meas([int(c) for c in codes]), dtype=np.int64)


def dlaplace_log_pmf(j: np.ndarray, t: float) -> np.ndarray:
    """``log P(J = j)`` for ``J ~ DL(t)``: ``log((1 - p) / (1 + p)) - |j| / t``, ``p = e^-1/t``."""
    p = math.exp(-1.0 / t)
    return math.log((1.0 - p) / (1.0 + p)) - np.abs(np.asarray(j, dtype=float)) / t


def dgaussian_log_norm(s: float) -> float:
    """``log sum_k exp(-k^2 / (2 s^2))``; by Poisson summation, for ``s >= 1``,
    ``sqrt(2 pi) s (1 + 2 sum_m exp(-2 pi^2 s^2 m^2))``."""
    if s >= 1.0:
        m = np.arange(1, 6)
        return math.log(math.sqrt(2 * math.pi) * s) + math.log1p(
            2 * np.exp(-2 * math.pi**2 * s * s * m * m).sum()
        )
    k = np.arange(-40, 41)
    return math.log(np.exp(-(k * k) / (2 * s * s)).sum())


def dgaussian_log_pmf(j: np.ndarray, s: float) -> np.ndarray:
    """``log P(J = j)`` for ``J ~ N_Z(0, s^2)`` (``s = 0``: all mass at 0)."""
    j = np.asarray(j, dtype=float)
    if s == 0:
        return np.where(j == 0, 0.0, -np.inf)
    return -(j * j) / (2 * s * s) - dgaussian_log_norm(s)


def _geometric(u: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    """``floor(-t log u)`` for ``u`` in (0, 1]: ``P(G >= k) = exp(-k / t)``."""
    return np.floor(-np.asarray(t) * np.log(u)).astype(np.int64)


def sample_dlaplace(
    t: np.ndarray | float,
    draws: Draws,
    streams: tuple[int, int],
    worker_hash: np.ndarray,
    task_hash: np.ndarray,
) -> np.ndarray:
    """``DL(t)`` per cell as the difference of two geometric draws (simulation only)."""
    u1 = 1.0 - draws.uniform(streams[0], worker_hash, task_hash)  # in (0, 1]
    u2 = 1.0 - draws.uniform(streams[1], worker_hash, task_hash)
    return _geometric(u1, t) - _geometric(u2, t)


def sample_dgaussian(
    sigma: np.ndarray,
    draws: Draws,
    first_stream: int,
    worker_hash: np.ndarray,
    task_hash: np.ndarray,
) -> np.ndarray:
    """``N_Z(0, sigma^2)`` per cell (``sigma`` per cell, 0 meaning no noise) by Canonne,
    Kamath and Steinke's Algorithm 3: ``Y ~ DL(floor(sigma) + 1)``, accepted with probability
    ``exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))``. Round ``r`` uses streams ``first_stream + 3r``
    to ``+ 3r + 2``, so a cell's draw depends only on its own ids (simulation only)."""
    sigma = np.asarray(sigma, dtype=float)
    shape = np.broadcast_shapes(sigma.shape, np.shape(worker_hash), np.shape(task_hash))
    sigma = np.broadcast_to(sigma, shape)
    wh = np.broadcast_to(np.asarray(worker_hash), shape)
    th = np.broadcast_to(np.asarray(task_hash), shape)
    out = np.zeros(shape, dtype=np.int64)
    pending = np.flatnonzero(sigma.ravel() > 0)
    sig_flat, wh_flat, th_flat = sigma.ravel(), wh.ravel(), th.ravel()
    flat = out.ravel()
    for r in range(_MAX_ROUNDS):
        if pending.size == 0:
            break
        s = sig_flat[pending]
        t = np.floor(s) + 1.0
        stream = first_stream + 3 * r
        y = sample_dlaplace(t, draws, (stream, stream + 1), wh_flat[pending], th_flat[pending])
        accept_p = np.exp(-((np.abs(y) - s * s / t) ** 2) / (2 * s * s))
        accept = draws.uniform(stream + 2, wh_flat[pending], th_flat[pending]) < accept_p
        flat[pending[accept]] = y[accept]
        pending = pending[~accept]
    if pending.size:  # probability below 0.6^10000: a broken draw source, not bad luck
        raise RuntimeError("discrete Gaussian rejection did not finish")
    return flat.reshape(shape)
