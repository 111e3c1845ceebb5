"""Where a mechanism's randomness comes from.

With an integer seed, every random draw is a counter-based function of (seed, stream, worker
id, task id): a SplitMix64 hash of the ids' stable 64-bit hashes. A worker perturbing its own
answers on its device and a simulation perturbing the whole answer set therefore draw the very
same numbers, in any order, fully vectorised. With a Generator the draws come from that
generator in order. Both are simulation: fast, reproducible, not cryptographic.

With ``rng=None`` (a real release: ``privtd perturb`` without ``--seed``, ``privtd.client``,
the service's workers) the uniforms come from the operating system's cryptographic generator
(``os.urandom``), never from numpy's PCG64, whose state an observer of enough outputs could
reconstruct.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .._rng import RNGLike, check_rng

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix(x: np.ndarray | np.uint64) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return np.asarray(z ^ (z >> np.uint64(31)))


def id_hashes(ids: Sequence[Any] | pd.Index | np.ndarray) -> np.ndarray:
    """Stable 64-bit hashes of ids (pandas' keyed SipHash of the values' text, same everywhere)."""
    if isinstance(ids, pd.Index):
        values = ids.astype(str).to_numpy(dtype=object)
    elif isinstance(ids, np.ndarray):
        values = ids.astype(str).astype(object)
    else:  # a client's short list: skip building an Index
        values = np.array([str(x) for x in ids], dtype=object)
    return pd.util.hash_array(values, categorize=False)


def secure_uniform(shape: int | tuple[int, ...]) -> np.ndarray:
    """Uniform [0, 1) doubles on the 2^-53 grid from the OS cryptographic generator."""
    n = int(np.prod(shape))
    bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
    return (bits.astype(np.float64) * (1.0 / 9007199254740992.0)).reshape(shape)


def _bit_length(x: np.ndarray) -> np.ndarray:
    """The bit length of each uint64 (0 for 0), by exact integer halving."""
    x = x.copy()
    n = np.zeros(x.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = x >= (np.uint64(1) << np.uint64(shift))
        n[big] += shift
        x[big] >>= np.uint64(shift)
    return n + (x > 0)


def secure_exponential(shape: int | tuple[int, ...]) -> np.ndarray:
    """Exp(1) draws from the OS cryptographic generator, with the law's whole tail.

    ``-ln(u)`` with ``u`` a 53-bit uniform stops at ``53 ln 2``: a mixture over such draws has
    no components beyond, and privtd's per-report epsilon for exp-gaussian, which holds for
    the exponential's unbounded tail, fails far out in the noise's tail. Here ``u = 2^-e (1 +
    f)``, ``e >= 1`` the position of the first 1 in an unbounded stream of random bits
    (``P(e = k) = 2^-k``) and ``f`` a 53-bit uniform in [0, 1): ``u`` is uniform on (0, 1) to
    any depth, and ``-ln u = e ln 2 - log1p(f)``.
    """
    n = int(np.prod(shape))
    e = np.ones(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        words = np.frombuffer(os.urandom(8 * pending.size), dtype=np.uint64)
        zero = words == 0
        e[pending[~zero]] += 64 - _bit_length(words[~zero])
        e[pending[zero]] += 64
        pending = pending[zero]
    return (e * np.log(2.0) - np.log1p(secure_uniform(n))).reshape(shape)


class Draws:
    """Uniform [0, 1) draws for (worker, task) cells: keyed by a seed, from a Generator
    (simulation), or from the OS cryptographic generator (``None``: a real release)."""

    def __init__(self, rng: RNGLike) -> None:
        self.seed: int | None = None
        self.generator: np.random.Generator | None = None
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            check_rng(rng)  # validates the seed (non-negative)
            self.seed = int(rng)
        elif rng is not None:
            self.generator = check_rng(rng)

    @property
    def keyed(self) -> bool:
        return self.seed is not None

    @property
    def real(self) -> bool:
        """A real release: draws from the OS cryptographic generator, exact noise via OpenDP."""
        return self.seed is None and self.generator is None

    def uniform(self, stream: int, worker_hash: np.ndarray, task_hash: np.ndarray) -> np.ndarray:
        """One draw per cell; ``worker_hash`` and ``task_hash`` broadcast against each other."""
        if self.seed is None:
            shape = np.broadcast_shapes(np.shape(worker_hash), np.shape(task_hash))
            if self.generator is None:
                return secure_uniform(shape)
            return self.generator.random(shape)
        with np.errstate(over="ignore"):
            key = _splitmix(np.uint64(self.seed) ^ _splitmix(np.uint64(stream) + _GOLDEN))
            x = _splitmix(key ^ np.asarray(worker_hash, dtype=np.uint64))
            x = _splitmix(x ^ np.asarray(task_hash, dtype=np.uint64))
        return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
