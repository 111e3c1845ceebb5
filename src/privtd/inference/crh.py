"""CRH: conflict resolution on heterogeneous data (Li et al., SIGMOD 2014;
docs/algorithms.md#crh)."""

from __future__ import annotations

import numpy as np

from .._rng import RNGLike
from ._base import _check_choice
from ._loss_weighted import LossWeightedEstimator
from ._tags import MEMORY_AND_DASK, Tags


class CRH(LossWeightedEstimator):
    """CRH truth discovery for categorical or numeric answers.

    Minimises ``sum_u w_u sum_q d(truth_q, x_uq)`` subject to ``sum_u exp(-w_u) = 1``, which gives
    ``w_u = log(sum_u' L_u' / L_u)``.

    Parameters
    ----------
    loss : {"squared", "absolute"}
        Numeric answers: the normalised squared loss ``(x* - x)^2 / std_q`` with weighted-mean
        truths, or the normalised absolute deviation with weighted-median truths. Categorical
        answers always use the 0-1 loss and a weighted vote.
    weight_norm : {"sum", "max"}
        Normalise losses by their sum (the paper, P1 Eq. 3) or their maximum (the crowd_truth_infer
        implementation).
    max_iter, tol : see :class:`LossWeightedEstimator` for the stopping rule.
    tie_break, rng : how tied weighted votes are broken (categorical).

    Notes
    -----
    Edge cases (the paper is silent): a loss of 0 is clamped to ``1e-12 * max(1, sum L)``; when
    every loss is 0 or every weight is 0 (one worker), weights fall back to 1.
    """

    __privtd_tags__ = Tags("crh", executors=MEMORY_AND_DASK)

    normalize_by_std = True

    def __init__(
        self,
        loss: str = "squared",
        weight_norm: str = "sum",
        max_iter: int = 100,
        tol: float = 1e-6,
        tie_break: str = "first",
        rng: RNGLike = None,
    ) -> None:
        self.loss = loss
        self.weight_norm = weight_norm
        self.max_iter = max_iter
        self.tol = tol
        self.tie_break = tie_break
        self.rng = rng

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_choice("CRH", "loss", self.loss, ("squared", "absolute"))
        _check_choice("CRH", "weight_norm", self.weight_norm, ("sum", "max"))

    def _numeric_loss(self) -> str:
        return str(self.loss)  # a parameter here, not fixed by the class

    def _weights(self, loss: np.ndarray, counts: np.ndarray) -> np.ndarray:
        total = float(loss.sum())
        if total <= 0.0:
            return np.ones_like(loss)
        norm = total if self.weight_norm == "sum" else float(loss.max())
        weight = np.log(norm / np.maximum(loss, 1e-12 * max(1.0, total)))
        if not (weight > 0).any():
            return np.ones_like(loss)
        return weight
