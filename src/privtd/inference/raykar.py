"""Raykar et al.'s real-valued model without features, and P2's regularised variant
(docs/algorithms.md#raykar)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ._base import _check_choice, _check_float
from ._loss_weighted import LossWeightedEstimator
from ._ops import per_worker
from ._tags import MEMORY_AND_DASK, Tags


class Raykar(LossWeightedEstimator):
    """Answers ``x_uq ~ N(y_q, 1 / tau_u)``; EM alternates precision-weighted means and precisions.

    With ``gamma`` (P2 appendix 1.2) the effective precision is
    ``lambda_u = 1 / (1/tau_u + 1/gamma)``, capped at ``gamma``; we set
    ``lambda_u = min(1 / mean_sq_residual_u, gamma)`` (our reading of P2;
    docs/algorithms.md#raykar), which also handles workers with zero residual. Without
    ``gamma`` a zero residual is floored at 1e-12, and unregularised ML can collapse onto one
    near-exact worker.

    ``weights_["weight"]`` is the precision used in the truth step.
    """

    __privtd_tags__ = Tags("raykar", executors=MEMORY_AND_DASK)

    kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    numeric_loss = "squared"

    def __init__(
        self,
        gamma: float | None = None,
        init: str = "mean",
        max_iter: int = 100,
        tol: float = 1e-6,
    ) -> None:
        self.gamma = gamma
        self.init = init
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_choice("Raykar", "init", self.init, ("mean", "median"))
        if self.gamma is not None:
            _check_float("Raykar", "gamma", self.gamma, 0.0, low_open=True)

    def _weights(self, loss: np.ndarray, counts: np.ndarray) -> np.ndarray:
        # A worker without answers has no precision to speak of: infinite variance, weight 0.
        precision = 1.0 / np.maximum(per_worker(loss, counts, np.inf), 1e-12)
        if self.gamma is not None:
            precision = np.minimum(precision, self.gamma)
        return precision
