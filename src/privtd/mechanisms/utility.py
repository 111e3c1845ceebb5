"""What a numeric mechanism's noise does to the answers: its scale against their spread, and
the error it leaves in a task's answers, before and after averaging."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..answers import Answers

__all__ = ["noise_against_spread", "noise_warning"]


def noise_against_spread(mechanism: Any, answers: Answers) -> dict[str, float] | None:
    """The noise of an additive numeric mechanism (``noise_std``, ``noise_mae``) beside the
    spread of the perturbed ``answers``; None for a mechanism that adds no noise of a known
    scale (randomized response, matrix factorisation).

    ``noise_share`` is the part of the released answers' variance the noise accounts for
    (the noise is independent of the answer, so the variances add), capped at 1: above 1/2 the
    noise is wider than what the workers said. ``mae_of_mean`` is the noise's expected
    absolute error in the mean of a task's median number of answers ``per_task``,
    ``sqrt(2 / pi) std / sqrt(per_task)`` (normal limit).
    """
    std = getattr(mechanism, "noise_std", None)
    mae = getattr(mechanism, "noise_mae", None)
    if std is None or mae is None or answers.is_categorical or answers.n_answers < 2:
        return None
    value = np.asarray(answers.value, dtype=np.float64)
    observed = float(value.std(ddof=1))
    per_task = max(1.0, float(np.median(answers.task_counts())))
    return {
        "noise_std": float(std),
        "noise_mae": float(mae),
        "observed_std": observed,
        "noise_share": min(1.0, float(std) ** 2 / observed**2) if observed > 0 else 1.0,
        "per_task": per_task,
        "mae_of_mean": math.sqrt(2.0 / math.pi) * float(std) / math.sqrt(per_task),
    }


def noise_warning(mechanism: Any, answers: Answers) -> str | None:
    """One line, with the numbers, when the mechanism's noise is wider than the answers'
    own spread (more than half the released answers' variance): the truths then follow the
    noise more than the workers, and predicting one number for every task may do better."""
    figures = noise_against_spread(mechanism, answers)
    if figures is None or figures["noise_share"] <= 0.5:
        return None
    r = figures["per_task"]
    return (
        f"the {mechanism.name} noise (std {figures['noise_std']:.4g} per answer at epsilon "
        f"{mechanism.epsilon:.3g}) exceeds the spread of the answers: the released answers' "
        f"std is {figures['observed_std']:.4g}, mostly the noise's; expected error "
        f"{figures['noise_mae']:.4g} per answer "
        f"(MAE of the noise) and about {figures['mae_of_mean']:.4g} in the mean of a task's "
        f"{r:g} answers. Raise epsilon, collect more answers per task, or clip the answers to "
        "a narrower range before the mechanism."
    )
