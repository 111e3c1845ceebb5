"""Where a mechanism's randomness comes from.

With an integer seed, every random draw is a counter-based function of (seed, stream, worker
id, task id): a SplitMix64 hash of the ids' stable 64-bit hashes. A worker perturbing its own
answers on its device and a simulation perturbing the whole answer set therefore draw the very
same numbers, in any order, fully vectorised. With a Generator (or None, which draws fresh OS
entropy for real collection) the draws come from that generator in order.
"""

from __future__ import annotations

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


class Draws:
    """Uniform [0, 1) draws for (worker, task) cells, from a seed or from a Generator."""

    def __init__(self, rng: RNGLike) -> None:
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            check_rng(rng)  # validates the seed (non-negative)
            self.seed: int | None = int(rng)
            self.generator: np.random.Generator | None = None
        else:
            self.seed = None
            self.generator = check_rng(rng)

    @property
    def keyed(self) -> bool:
        return self.seed is not None

    def uniform(self, stream: int, worker_hash: np.ndarray, task_hash: np.ndarray) -> np.ndarray:
        """One draw per cell; ``worker_hash`` and ``task_hash`` broadcast against each other."""
        if self.generator is not None:
            shape = np.broadcast_shapes(np.shape(worker_hash), np.shape(task_hash))
            return self.generator.random(shape)
        assert self.seed is not None
        with np.errstate(over="ignore"):
            key = _splitmix(np.uint64(self.seed) ^ _splitmix(np.uint64(stream) + _GOLDEN))
            x = _splitmix(key ^ np.asarray(worker_hash, dtype=np.uint64))
            x = _splitmix(x ^ np.asarray(task_hash, dtype=np.uint64))
        return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
