"""Private Dawid-Skene under local attribute DP (Wang & Xu, P4 Algorithm 1).

Formulas and choices: docs/algorithms.md#private-dawid-skene.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..answers import Answers
from ..errors import ValidationError
from ._base import Estimator, Gold, _check_float
from ._ops import per_worker, shares, vote_matrix


class PrivateDawidSkene(Estimator):
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

    iterative = True

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

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        from scipy.special import expit  # on use: costs ~0.5 s to import

        if answers.n_labels != 2:
            raise ValidationError(
                f"PrivateDawidSkene is binary; these answers have {answers.n_labels} labels."
            )
        t, w = answers.task, answers.worker
        x = answers.value.astype(np.float64)
        n_t, n_w = answers.n_tasks, answers.n_workers
        counts = answers.worker_counts()
        if isinstance(self.init, str):
            y = shares(vote_matrix(t, answers.value, n_t, 2))[:, 1]
        else:
            y = np.asarray(self.init, dtype=np.float64)
            if y.shape != (n_t,) or not (
                isinstance(y[0], numbers.Real) and ((0 <= y) & (y <= 1)).all()
            ):
                raise ValidationError(
                    f"init must be {n_t} soft labels in [0, 1], one per task. Got shape {y.shape}."
                )
            y = y.copy()
        if gold is not None:
            y[gold.index] = gold.value
        sign = 2.0 * x - 1.0
        objective: list[float] = []
        converged = False
        p = np.full(n_w, 0.5)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            agree = np.bincount(w, weights=x * y[t] + (1.0 - x) * (1.0 - y[t]), minlength=n_w)
            p = np.clip(per_worker(agree, counts, 0.5), self.projection, 1.0 - self.projection)
            log_odds = np.log(p) - np.log1p(-p)
            new = expit(np.bincount(t, weights=sign * log_odds[w], minlength=n_t))
            if gold is not None:
                new[gold.index] = gold.value
            change = float(np.max(np.abs(new - y)))
            objective.append(change)
            y = new
            if change < self.tol:
                converged = True
                break
        e = np.exp(self.epsilon)
        rescaled = (e + 1.0) / (e - 1.0) * (p - 1.0 / (e + 1.0))
        if self.clip:
            rescaled = np.clip(rescaled, 0.0, 1.0)
        self._set_results(
            answers,
            (y >= 0.5).astype(np.int64),
            proba=np.column_stack([1.0 - y, y]),
            weight=np.log(p) - np.log1p(-p),
            n_iter=n_iter,
            converged=converged,
            objective=objective,
            worker_columns={"ability": p, "ability_rescaled": rescaled},
        )
