"""ZeroBasedSkill: skills re-estimated with a decaying learning rate (crowd-kit's
``ZeroBasedSkill``)."""

from __future__ import annotations

import numpy as np

from ..answers import Answers
from ._base import Estimator, Gold, _check_float, _check_int
from ._ops import shares
from ._skill_vote import accuracy_against, decide, skill_votes


class ZeroBasedSkill(Estimator):
    """A skill-weighted vote whose skills move towards each worker's agreement with it.

    Skills start at ``1/K + eps`` (every worker alike, so the first vote is the majority vote).
    Iteration ``n`` (from 1) halves the learning rate first when ``n`` is a multiple of
    ``lr_steps_to_reduce`` (times ``lr_reduce_factor``), then takes the skill-weighted vote
    (ties to the smallest label) and moves each skill by ``lr * (agreement - skill)``, where
    ``agreement`` is the fraction of the worker's answers equal to that vote. The result is the
    vote with the final skills. These are crowd-kit's steps and defaults.

    Parameters
    ----------
    max_iter : int, default 100
        crowd-kit's ``n_iter``, which always runs to the end.
    tol : float, default 1e-8
        Stop when no skill moves by more than ``tol`` in one iteration (max-norm of the skill
        change, which ``objective_`` records). The skills only move while the vote changes or
        while they are still approaching their agreement, so once the vote is stable for a
        few steps they stay put and crowd-kit's remaining iterations change nothing up to
        ``(1 - lr)`` times the last move. ``tol=0`` stops only when the skills stop moving
        exactly, after which crowd-kit's further steps change nothing either.
    lr_init, lr_steps_to_reduce, lr_reduce_factor, eps : as crowd-kit (1.0, 20, 0.5, 1e-5).

    Notes
    -----
    ``weights_["weight"]`` (also ``skills_``) is the skill; ``probas_`` the weighted vote shares.
    """

    iterative = True

    def __init__(
        self,
        max_iter: int = 100,
        tol: float = 1e-8,
        lr_init: float = 1.0,
        lr_steps_to_reduce: int = 20,
        lr_reduce_factor: float = 0.5,
        eps: float = 1e-5,
    ) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.lr_init = lr_init
        self.lr_steps_to_reduce = lr_steps_to_reduce
        self.lr_reduce_factor = lr_reduce_factor
        self.eps = eps

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        _check_float(name, "lr_init", self.lr_init, 0.0, 1.0, low_open=True)
        _check_int(name, "lr_steps_to_reduce", self.lr_steps_to_reduce, low=1)
        _check_float(name, "lr_reduce_factor", self.lr_reduce_factor, 0.0, 1.0, low_open=True)
        _check_float(name, "eps", self.eps, 0.0)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        skill = np.full(answers.n_workers, 1.0 / answers.n_labels + self.eps)
        rate = float(self.lr_init)
        objective: list[float] = []
        converged = False
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007
            self._tick(n_iter)
            if n_iter % self.lr_steps_to_reduce == 0:
                rate *= self.lr_reduce_factor
            truth, _ = decide(answers, skill_votes(answers, skill), None, gold)
            step = rate * (accuracy_against(answers, truth) - skill)
            skill = skill + step
            objective.append(float(np.abs(step).max(initial=0.0)))
            if objective[-1] <= self.tol and n_iter > 1:
                converged = True
                break
        scores = skill_votes(answers, skill)
        truth, proba = decide(answers, scores, shares(scores), gold)
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=skill,
            n_iter=n_iter,
            converged=converged,
            objective=objective,
        )
