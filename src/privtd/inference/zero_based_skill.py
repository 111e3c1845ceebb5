"""ZeroBasedSkill: skills re-estimated with a decaying learning rate (crowd-kit's
``ZeroBasedSkill``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..answers import Answers
from . import _kernels
from ._base import _check_float, _check_int
from ._em import EMEstimator, Fit, Model, Shape
from ._ops import shares
from ._skill_vote import decide, skill_votes
from ._tags import MEMORY_AND_DASK, Tags


def zbs_start(part: Any, previous: Any, arg: Any) -> tuple[None, None]:
    """Nothing to read of the answers: the skills start alike."""
    return None, None


def zbs_pass(part: Any, previous: Any, skill: np.ndarray) -> tuple[np.ndarray, Any]:
    """Per part: the skill-weighted vote (ties to the smallest label, gold fixed) and each
    worker's number of answers equal to it."""
    truth = _vote(part, skill_votes(part, skill), None)[0]
    return truth, _kernels.agreement(part.task, part.worker, part.value, truth, part.n_workers)


def zbs_finish(part: Any, previous: Any, skill: np.ndarray) -> tuple[Any, None]:
    """Per part: the vote with the final skills and its shares."""
    scores = skill_votes(part, skill)
    return _vote(part, scores, shares(scores)), None


def _vote(
    part: Any, scores: np.ndarray, proba: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    truth, proba = decide(part, scores, proba, None)
    return part.fix_labels(truth), None if proba is None else part.fix_rows(proba)


class ZeroBasedSkillModel(Model):
    """Not EM: a skill-weighted vote whose skills move towards their agreement with it, by a
    learning rate that decays with the iterations. The statistics are each worker's agreement
    count; the parameters the skills. Stops when no skill moved by more than ``tol``."""

    start = staticmethod(zbs_start)
    step = staticmethod(zbs_pass)
    finish = staticmethod(zbs_finish)

    def __init__(self, est: ZeroBasedSkill, shape: Shape) -> None:
        super().__init__(est.tol)
        self.est = est
        self.n_labels = shape.n_labels
        self.counts = np.maximum(shape.counts, 1)
        self.rate = float(est.lr_init)
        self.n_steps = 0

    def init(self, stats: Any) -> np.ndarray:
        return np.full(len(self.counts), 1.0 / self.n_labels + self.est.eps)

    def step_params(self, skill: np.ndarray) -> np.ndarray:
        self.skill = skill
        return skill

    def objective(self, stats: Any) -> float:
        # The update is made here, where its size (the objective) is known: m_step returns it.
        est = self.est
        self.n_steps += 1
        if self.n_steps % est.lr_steps_to_reduce == 0:
            self.rate *= est.lr_reduce_factor
        move = self.rate * (stats / self.counts - self.skill)
        self.next = self.skill + move
        return float(np.abs(move).max(initial=0.0))

    def m_step(self, stats: Any) -> np.ndarray:
        return self.next

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return objective[-1] <= self.tol and n_iter > 1

    def finish_params(self, fit: Fit) -> np.ndarray:
        return fit.params


class ZeroBasedSkill(EMEstimator):
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

    __privtd_tags__ = Tags("zbs", executors=MEMORY_AND_DASK)

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

    def _model(self, shape: Shape) -> ZeroBasedSkillModel:
        return ZeroBasedSkillModel(self, shape)

    def _finish(
        self, answers: Answers, fit: Fit, truth: np.ndarray, proba: np.ndarray | None
    ) -> None:
        self._set_results(
            answers,
            truth,
            proba=proba,
            weight=fit.params,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
        )
