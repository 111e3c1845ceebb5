"""Private Dawid-Skene under local attribute DP (Wang & Xu, P4 Algorithm 1).

Formulas and choices: docs/algorithms.md#private-dawid-skene.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..answers import Answers
from ..errors import ValidationError
from ._base import _check_float
from ._em import EMEstimator, Fit, Largest, Model, Shape
from ._ops import per_worker, shares, vote_matrix
from ._tags import MEMORY_AND_DASK, Tags


def pds_start(part: Any, previous: Any, init: str | np.ndarray) -> tuple[np.ndarray, Any]:
    """Per part: the starting soft labels (the soft majority vote or ``init``, gold fixed)
    and each worker's agreement with them."""
    n_t = part.n_tasks
    if isinstance(init, str):
        y = shares(vote_matrix(part.task, part.value, n_t, 2))[:, 1]
    else:
        y = np.asarray(init, dtype=np.float64)
        if y.shape != (n_t,) or not (
            isinstance(y[0], numbers.Real) and ((0 <= y) & (y <= 1)).all()
        ):
            raise ValidationError(
                f"init must be {n_t} soft labels in [0, 1], one per task. Got shape {y.shape}."
            )
        y = y.copy()
    y = part.fix_labels(y)
    return y, _agreement(part, y)


def pds_pass(part: Any, previous: Any, log_odds: np.ndarray) -> tuple[np.ndarray, Any]:
    """Per part: the soft labels from the workers' log-odds (Eqs. 7-8, gold fixed), their
    largest change, and each worker's agreement with them."""
    from scipy.special import expit  # on use: costs ~0.5 s to import

    y, t = previous[0], part.task
    sign = 2.0 * part.value_floats() - 1.0
    new = expit(np.bincount(t, weights=sign * log_odds[part.worker], minlength=part.n_tasks))
    new = part.fix_labels(new)
    change = Largest(np.abs(new - y).max(initial=0.0))
    return new, (change, _agreement(part, new))


def pds_finish(part: Any, previous: Any, _: Any) -> tuple[Any, None]:
    """Per part: the labels rounded, ``1(y >= 1/2)``, and the soft labels as probabilities."""
    y = previous[0]
    return ((y >= 0.5).astype(np.int64), np.column_stack([1.0 - y, y])), None


def _agreement(part: Any, y: np.ndarray) -> np.ndarray:
    """Per worker ``sum_q x_uq y_q + (1 - x_uq)(1 - y_q)`` (Eq. 10's numerator)."""
    x, t = part.value_floats(), part.task
    agree = x * y[t] + (1.0 - x) * (1.0 - y[t])
    return np.bincount(part.worker, weights=agree, minlength=part.n_workers)


class PrivateDawidSkeneModel(Model):
    """P4's binary one-coin EM: the statistics are each worker's agreement with the soft
    labels and their largest change; the parameters the projected abilities. Stops when no
    soft label moved by ``tol`` or more."""

    start = staticmethod(pds_start)
    step = staticmethod(pds_pass)
    finish = staticmethod(pds_finish)

    def __init__(self, est: PrivateDawidSkene, shape: Shape) -> None:
        super().__init__(est.tol)
        self.projection = est.projection
        self.counts = shape.counts
        self.start_arg = est.init

    def init(self, stats: Any) -> np.ndarray:
        ability = per_worker(np.asarray(stats, dtype=np.float64), self.counts, 0.5)
        return np.clip(ability, self.projection, 1.0 - self.projection)

    def step_params(self, p: np.ndarray) -> np.ndarray:
        return np.log(p) - np.log1p(-p)

    def m_step(self, stats: Any) -> np.ndarray:
        return self.init(stats[1])

    def objective(self, stats: Any) -> float:
        return float(stats[0])

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return objective[-1] < self.tol


class PrivateDawidSkene(EMEstimator):
    """The server side of P4: binary one-coin EM on randomized-response answers, with projected
    abilities, rescaled abilities and rounding (docs/algorithms.md#private-dawid-skene).

    For ``t = 1..max_iter``: ``p_u = clip(mean_q [x_uq y_q + (1 - x_uq)(1 - y_q)], projection,
    1 - projection)`` (Eq. 10, averaged over the tasks the worker answered), then
    ``y_q = sigmoid(sum_u (2 x_uq - 1) log(p_u / (1 - p_u)))`` (Eqs. 7-8). Stops early when the
    largest change of any ``y_q`` is below ``tol``. Then abilities are rescaled to undo the
    randomized response, ``p_hat = (e^eps + 1) / (e^eps - 1) * (p - 1 / (e^eps + 1))`` (Eq. 19),
    and labels rounded, ``1(y >= 1/2)`` (ties go to the positive label).

    Parameters
    ----------
    epsilon : float > 0
        The per-answer epsilon of the binary randomized response that perturbed the answers.
    projection : float in (0, 0.5)
        Projection interval for abilities; default 0.01 (P4 leaves it open; its Eq. 16 interval is
        often empty at realistic sizes).
    init : "mv" or array of shape (n_tasks,)
        The starting soft labels ``y^(0)``; default the soft majority vote on the perturbed answers.
    clip : bool
        Clip rescaled abilities to [0, 1] (not in the paper; off by default).

    Notes
    -----
    ``weights_`` has ``ability`` (the projected ``p_u``), ``ability_rescaled`` (``p_hat``) and
    ``weight`` (the vote log-odds). ``objective_`` records the largest change of ``y`` per step.
    """

    __privtd_tags__ = Tags("private-ds", binary_only=True, executors=MEMORY_AND_DASK)

    def __init__(
        self,
        epsilon: float = 1.0,
        projection: float = 0.01,
        max_iter: int = 50,
        tol: float = 1e-6,
        init: str | np.ndarray = "mv",
        clip: bool = False,
    ) -> None:
        self.epsilon = epsilon
        self.projection = projection
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.clip = clip

    def _validate_params(self) -> None:
        super()._validate_params()
        _check_float("PrivateDawidSkene", "epsilon", self.epsilon, 0.0, low_open=True)
        _check_float(
            "PrivateDawidSkene",
            "projection",
            self.projection,
            0.0,
            0.5,
            low_open=True,
            high_open=True,
        )
        if isinstance(self.init, str) and self.init != "mv":
            raise ValidationError(
                f"The 'init' parameter of PrivateDawidSkene must be 'mv' or an array of soft "
                f"labels. Got {self.init!r}."
            )

    def _model(self, shape: Shape) -> PrivateDawidSkeneModel:
        if shape.n_labels != 2:
            raise ValidationError(
                f"PrivateDawidSkene is binary; these answers have {shape.n_labels} labels."
            )
        return PrivateDawidSkeneModel(self, shape)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        # The abilities the final soft labels were computed with.
        p = fit.used
        e = np.exp(self.epsilon)
        rescaled = (e + 1.0) / (e - 1.0) * (p - 1.0 / (e + 1.0))
        if self.clip:
            rescaled = np.clip(rescaled, 0.0, 1.0)
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=np.log(p) - np.log1p(-p),
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
            worker_columns={"ability": p, "ability_rescaled": rescaled},
        )
