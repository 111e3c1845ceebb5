"""The floating-point consistency attack on numeric releases (Mironov, CCS 2012).

For each release ``y`` of an answer ``x``, the attacker asks: could ``y`` have come out of the
mechanism, exactly as it computes, had the answer been the neighbouring ``x'``? A release that
is unreachable from ``x'`` rules ``x'`` out with certainty, whatever epsilon promises.

- Continuous Laplace as privtd computed it before the fix (``base + (-scale * sign(u) *
  log1p(-2|u|))`` with ``u = m / 2^53 - 1/2``): the sampler is inverted exactly, by a binary
  search over the 2^53 values of ``m`` (the noise is monotone in ``m``).
- Any release computed as ``fl(x + z)`` with a real-valued noise ``z`` (exp-gaussian before
  the fix: Box-Muller times the worker's secret standard deviation): whatever law ``z``
  follows, ``y`` is reachable from ``x'`` only if some double ``z`` has ``fl(x' + z) == y``.
  Rounding is monotone in ``z``, so checking the doubles around ``y - x'`` decides it exactly;
  this needs no knowledge of the secret variance.
- Grid releases (``low + J * g`` with ``J`` from an exact discrete law): ``y`` is reachable from
  ``x'`` iff it is exactly a grid point and the law gives its offset from ``x'``'s code a
  positive probability (a finite log-probability).

Run: ``python benchmarks/attacks/float_laplace.py`` (prints the fraction of releases that
exclude the neighbouring answer, per mechanism; ``--releases`` sets how many).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from privtd import Answers  # noqa: E402
from privtd.mechanisms import ExpGaussian, LaplaceNull  # noqa: E402

_TWO53 = 2.0**53


def continuous_laplace_noise(m: np.ndarray, scale: float) -> np.ndarray:
    """The old sampler's noise for the integer draw ``m`` in [0, 2^53)."""
    u = m.astype(np.float64) * (1.0 / _TWO53) - 0.5
    return -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))


def reachable_continuous_laplace(y: np.ndarray, base: float, scale: float) -> np.ndarray:
    """Whether ``fl(base + noise(m)) == y`` for some ``m`` in [0, 2^53): binary search for the
    smallest ``m`` whose release is ``>= y`` (release is non-decreasing in ``m``)."""
    lo = np.zeros(y.shape, dtype=np.int64)
    hi = np.full(y.shape, 2**53, dtype=np.int64)  # search in [lo, hi)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        open_ = lo < hi
        below = (base + continuous_laplace_noise(np.minimum(mid, 2**53 - 1), scale)) < y
        lo = np.where(open_ & below, mid + 1, lo)
        hi = np.where(open_ & ~below, mid, hi)
    m = np.minimum(lo, 2**53 - 1)
    return (base + continuous_laplace_noise(m, scale)) == y


def reachable_by_addition(y: np.ndarray, x_other: float, width: int = 4) -> np.ndarray:
    """Whether some double ``z`` gives ``fl(x_other + z) == y``. The doubles ``z`` within
    ``width`` steps of ``fl(y - x_other)`` are tried; if none hits ``y`` and the window's ends
    fall on both sides of ``y``, none outside does (``z -> fl(x_other + z)`` is monotone)."""
    z = y - x_other
    lo, hi = z.copy(), z.copy()
    hit = (x_other + z) == y
    for _ in range(width):
        lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
        hit |= ((x_other + lo) == y) | ((x_other + hi) == y)
    straddled = ((x_other + lo) < y) & ((x_other + hi) > y)
    # Not hit and not certified either way counts as reachable: the attack claims only certainty.
    return hit | ~straddled


def _cells(value: float, n: int, per_worker: int) -> Answers:
    n_w = -(-n // per_worker)
    return Answers(
        task=(np.arange(n) % per_worker).astype(np.int32),
        worker=(np.arange(n) // per_worker).astype(np.int32),
        value=np.full(n, float(value)),
        tasks=pd.RangeIndex(min(n, per_worker)),
        workers=pd.RangeIndex(n_w),
    )


def releases(mechanism, value: float, n: int, rng) -> np.ndarray:
    """``n`` releases of ``value``. Simulated (``rng`` an int seed): each by a different
    one-answer worker, so per-worker secrets are marginalised. Real (``rng=None``): 1,000 per
    worker, as each real worker needs its own exact sampler (OpenDP), built once per worker."""
    answers = _cells(value, n, 1 if rng is not None else 1000)
    out = mechanism.perturb(answers, rng=rng)
    return np.asarray(out.value, dtype=float)


def excluded_fraction(mechanism, x: float, x_other: float, n: int, rng) -> float:
    """The fraction of ``n`` releases of ``x`` that are unreachable from ``x_other``."""
    y = releases(mechanism, x, n, rng)
    grid_law = getattr(mechanism, "grid_log_pmf", None)
    if grid_law is None and isinstance(mechanism, LaplaceNull):  # the old continuous sampler
        return float(1.0 - reachable_continuous_laplace(y, x_other, mechanism.scale).mean())
    if grid_law is None:  # the old exp-gaussian: x + real noise
        return float(1.0 - reachable_by_addition(y, x_other).mean())
    return float(1.0 - grid_reachable(mechanism, y, x_other).mean())


def grid_reachable(mechanism, y: np.ndarray, x_other: float) -> np.ndarray:
    """Grid releases: ``y`` on the public grid exactly, with positive probability from
    ``x_other``'s code under the mechanism's exact law."""
    low, g = mechanism.grid_origin, mechanism.grid_step
    j = np.round((y - low) / g)
    on_grid = np.isfinite(j) & (low + j * g == y)
    k_other = mechanism.grid_code(np.array([x_other]))[0]
    logp = mechanism.grid_log_pmf(np.where(on_grid, j, 0).astype(np.int64) - k_other)
    return on_grid & np.isfinite(logp)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real", action="store_true", help="real (unseeded) releases")
    args = parser.parse_args(argv)
    rng = None if args.real else args.seed
    lap = LaplaceNull(5.0, low=0, high=4)  # the reported case: scale 5 (P3: epsilon 1)
    print(f"laplace {lap.params()} epsilon {lap.epsilon:g}")
    for x, x2 in ((0.0, 1.0), (2.0, 3.0), (0.0, 4.0)):
        frac = excluded_fraction(lap, x, x2, args.releases, rng)
        print(f"  answer {x:g}, neighbour {x2:g}: {frac:.4f} of releases exclude the neighbour")
    eg = ExpGaussian.from_epsilon(1.0, low=0.0, high=10.0)
    print(f"exp-gaussian {eg.params()} epsilon {eg.epsilon:g}")
    for x, x2 in ((0.0, 10.0), (10.0, 0.0), (3.3, 3.31)):
        frac = excluded_fraction(eg, x, x2, args.releases, rng)
        print(f"  answer {x:g}, neighbour {x2:g}: {frac:.4f} of releases exclude the neighbour")


if __name__ == "__main__":
    main()
