"""exp-gaussian's epsilon and the tail of the secret variance, as sampled.

privtd states ``epsilon = n g sqrt(2 rate)`` per exp-gaussian report: over ``v_u ~ Exp(rate)``
the discrete Gaussian mixture has a Laplace-like law whose loss ``ln m(j) / m(j + n)`` tends to
``epsilon`` from below as ``j`` grows. That needs the exponential's whole tail. A sampler that
draws ``v_u = -ln(u) / rate`` from a 53-bit ``u`` in (0, 1] never exceeds ``53 ln 2 / rate``;
the mixture over such ``v_u`` is Gaussian in its far tail, and its loss grows without bound
there. A release that far out (probability about ``e^-60`` at epsilon 1) tells the requester
more than epsilon allows: the guarantee is only ``(epsilon, delta)`` with a tiny ``delta``.

This script (1) finds the largest ``v_u`` the real sampler can produce, by feeding it the most
extreme random bits (all zeros, all ones, for a while), and (2) computes the report loss of the
mixture truncated there, at 10 to 150 noise scales (``beta``) from the answer.

    python benchmarks/attacks/attack_expgauss_tail.py
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np

from privtd.mechanisms import ExpGaussian
from privtd.mechanisms._discrete import dgaussian_log_norm
from privtd.mechanisms._random import Draws


@contextmanager
def extreme_bits(byte: int, calls: int) -> Iterator[None]:
    """The OS generator answers its first ``calls`` requests with ``byte`` repeated."""
    real = os.urandom
    left = [calls]

    def fake(n: int) -> bytes:
        if left[0] > 0:
            left[0] -= 1
            return bytes([byte]) * n
        return real(n)

    with mock.patch("privtd.mechanisms._random.os.urandom", fake):
        yield


def largest_variance(mech: ExpGaussian) -> float:
    """The largest ``v_u * rate`` the real sampler gave over the extreme bit streams."""
    out = []
    for byte in (0x00, 0xFF):
        with extreme_bits(byte, 4):
            out.append(float(mech.worker_variances(np.zeros(1, np.uint64), Draws(None))[0]))
    return max(out) * mech.rate


def report_loss(mech: ExpGaussian, offsets: np.ndarray, cap: float, nodes: int = 20000):
    """``ln m(a) / m(a + n)`` for the mixture over ``v ~ Exp(rate)`` truncated at
    ``v <= cap / rate`` (quadrature in ``log w``, ``w = v / g^2``)."""
    lam = mech.rate * mech.step**2
    top = cap / lam
    log_w = np.linspace(math.log(1e-16 / lam), math.log(top), nodes)
    w = np.exp(log_w)
    log_norm = np.array([dgaussian_log_norm(x) if x >= 1e-3 else 0.0 for x in np.sqrt(w)])
    log_weight = math.log(lam) + log_w - lam * w + math.log(log_w[1] - log_w[0])

    def log_m(j: np.ndarray) -> np.ndarray:
        terms = log_weight[None, :] - j[:, None] ** 2 / (2 * w[None, :]) - log_norm[None, :]
        peak = terms.max(axis=1, keepdims=True)
        return (peak + np.log(np.exp(terms - peak).sum(axis=1, keepdims=True)))[:, 0]

    a = np.asarray(offsets, dtype=float)
    return log_m(a) - log_m(a + mech.n_steps)


def main() -> None:
    mech = ExpGaussian.from_epsilon(1.0, 0.0, 10.0)
    beta = mech.n_steps / mech.epsilon
    cap = largest_variance(mech)
    print(
        f"exp-gaussian eps {mech.epsilon:g} on [0, 10], {mech.n_steps} steps, beta {beta:g} "
        f"steps; largest rate * v_u the real sampler gave: {cap:.1f} (53 ln 2 = "
        f"{53 * math.log(2):.1f})"
    )
    scales = np.array([10, 40, 60, 73, 100, 150])
    loss = report_loss(mech, scales * beta, max(cap, 1e-300))
    for k, value in zip(scales, loss, strict=True):
        print(f"  {k:4d} beta from the answer (probability ~ e^-{k}): report loss {value:.4f}")


if __name__ == "__main__":
    main()
