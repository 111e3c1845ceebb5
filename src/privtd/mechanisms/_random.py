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
