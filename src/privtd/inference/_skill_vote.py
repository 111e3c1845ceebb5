"""Votes weighted by a per-worker skill, the last step of Wawa, ZeroBasedSkill and MMSR."""

from __future__ import annotations

import numpy as np

from ..answers import Answers
from . import _kernels
from ._base import Gold
from ._ops import shares, vote_matrix


def skill_votes(answers: Answers, skill: np.ndarray) -> np.ndarray:
    """``S[t, k]`` = summed skill of the workers who gave task ``t`` label ``k`` (one bincount)."""
    k = answers.n_labels
    flat = answers.task.astype(np.int64) * k + answers.value
    return np.bincount(flat, weights=skill[answers.worker], minlength=answers.n_tasks * k).reshape(
        answers.n_tasks, k
    )


def mute_tasks(scores: np.ndarray) -> np.ndarray:
    """Tasks where every voter weighs 0 (skills of 0, a lone worker): nothing to weigh by."""
    return ~np.any(scores != 0.0, axis=1)


def decide(
    answers: Answers, scores: np.ndarray, proba: np.ndarray | None, gold: Gold | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Labels (arg-max, ties to the smallest label as crowd-kit's ``idxmax`` does) and
    probabilities; a task whose voters all weigh 0 falls back to the plain majority vote rather
    than to the first label (crowd-kit leaves it NaN); gold rows are one-hot."""
    mute = mute_tasks(scores)
    if mute.any():
        plain = shares(vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels))
        scores = scores.copy()
        scores[mute] = plain[mute]
        if proba is not None:
            proba[mute] = plain[mute]
    truth = scores.argmax(axis=1)
    if gold is not None:
        truth[gold.index] = gold.value
        if proba is not None:
            proba[gold.index] = np.eye(answers.n_labels)[gold.value]
    return truth, proba


def accuracy_against(answers: Answers, truth: np.ndarray) -> np.ndarray:
    """Each worker's fraction of answers equal to ``truth`` (crowd-kit's ``get_accuracy``)."""
    matches = _kernels.agreement(
        answers.task, answers.worker, answers.value, truth, answers.n_workers
    )
    return matches / np.maximum(answers.worker_counts(), 1)
