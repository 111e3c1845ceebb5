"""P3's truth inference, Algorithm 1: weights inversely proportional to each worker's RMS error
(docs/algorithms.md#p3-truth-inference)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ._loss_weighted import LossWeightedEstimator
from ._ops import per_worker
from ._tags import MEMORY_AND_DASK, Tags


class WeightedAverage(LossWeightedEstimator):
    """``mu_q = sum_u q_u x_uq / sum_u q_u`` with ``q_u = 1 / sigma_u``, ``sigma_u`` the worker's
    root-mean-square deviation from the current truths (Sun et al., BigData 2018, Eqs. 1-2).

    Starts from uniform weights (the plain mean). ``sigma_u`` is floored at 1e-12. Weights are
    normalised to sum to 1 (this does not change the truths).
    """

    __privtd_tags__ = Tags("sigma", executors=MEMORY_AND_DASK)

    kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    numeric_loss = "squared"
    init = "mean"

    def __init__(self, max_iter: int = 100, tol: float = 1e-6) -> None:
        self.max_iter = max_iter
        self.tol = tol

    def _weights(self, loss: np.ndarray, counts: np.ndarray) -> np.ndarray:
        # A worker without answers: infinite spread, weight 0.
        q = 1.0 / np.maximum(np.sqrt(per_worker(loss, counts, np.inf)), 1e-12)
        return q / q.sum()
