"""CATD: confidence-aware truth discovery for long-tail data (Li et al., PVLDB 2014;
docs/algorithms.md#catd)."""

from __future__ import annotations

import numpy as np

from .._rng import RNGLike
from ._base import _check_float
from ._loss_weighted import LossWeightedEstimator
from ._tags import MEMORY_AND_DASK, Tags


class CATD(LossWeightedEstimator):
    """CATD for numeric (squared residuals) or categorical (0-1 loss) answers.

    ``w_u = chi2.ppf(alpha / 2, |Q_u|) / (sum_q (x_uq - x*_q)^2 + 1e-9)``: ``1 / w_u`` is the upper
    end of a (1 - alpha) confidence interval for the worker's error variance, so workers with few
    answers are discounted (the long-tail correction). Truths are weighted means (votes) divided
    per task by the weights of the workers who answered it.

    Parameters
    ----------
    alpha : float in (0, 1)
        Significance level of the confidence interval; default 0.05.
    max_iter, tol, tie_break, rng : as in :class:`CRH`.
    """

    __privtd_tags__ = Tags("catd", executors=MEMORY_AND_DASK)

    def __init__(
        self,
        alpha: float = 0.05,
        max_iter: int = 100,
        tol: float = 1e-6,
        tie_break: str = "first",
        rng: RNGLike = None,
    ) -> None:
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.tie_break = tie_break
        self.rng = rng

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float("CATD", "alpha", self.alpha, 0.0, 1.0, low_open=True, high_open=True)

    def _weights(self, loss: np.ndarray, counts: np.ndarray) -> np.ndarray:
        from scipy import stats  # here, not at import: scipy.stats costs ~1 s to import

        return stats.chi2.ppf(self.alpha / 2.0, counts) / (loss + 1e-9)
