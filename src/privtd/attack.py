"""The requester's best effort to recover workers' original answers from perturbed ones: the
honest yardstick for mechanisms whose epsilon is per answer (docs/algorithms.md#measured-leakage).

The attack runs signed truth discovery (the log-odds weighted vote,
docs/algorithms.md#weighted-vote) on the perturbed answers. A worker who agrees with the
aggregate significantly less than half the time most likely drew a two-layer flip probability
above 1/2, so the attacker inverts its answers (binary), or takes the aggregate's label (more
labels). Every other answer is taken as reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .answers import Answers
from .errors import ValidationError
from .inference import Estimator, WeightedVote

__all__ = ["AttackResult", "reconstruct", "attack"]


def inverted_workers(perturbed: Answers, wv: Estimator, level: float = 0.05) -> np.ndarray:
    """Workers the attacker inverts: those who agree with the signed aggregate significantly
    less often than half the time (one-sided binomial test at ``level``). A worker better than
    chance agrees less than half the time only if its flip probability exceeds 1/2; the test
    keeps sparse or merely poor workers from being inverted on noise."""
    n = perturbed.worker_counts()
    agree = np.rint(wv.weights_["accuracy"].to_numpy() * n)
    return np.asarray(stats.binom.cdf(agree, n, 0.5) < level)


def reconstruct(perturbed: Answers, level: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's guess of every original answer (label codes, aligned with ``perturbed``),
    and which workers it inverted."""
    if not perturbed.is_categorical:
        raise ValidationError("The attack reconstructs categorical answers; these are numeric.")
    wv = WeightedVote().fit(perturbed)
    flagged = inverted_workers(perturbed, wv, level)
    inverted = flagged[perturbed.worker]
    x = perturbed.value.astype(np.int64)
    if perturbed.n_labels == 2:
        other = 1 - x
    else:
        other = np.asarray(wv._truth_codes)[perturbed.task]
    return np.where(inverted, other, x), flagged


@dataclass(frozen=True)
class AttackResult:
    recovered: float
    """Fraction of original answers the signed-inversion attack recovers."""
    as_reported: float
    """Fraction recovered by trusting the perturbed answers as they are."""
    best: float
    """The better of the two: what a requester who picks its attack well recovers."""
    chance: float
    """Fraction recovered by the best blind guess (the most common original answer)."""
    n_answers: int
    inverted_workers: int

    def as_dict(self) -> dict[str, float | int]:
        return dict(vars(self))


def attack(original: Answers, perturbed: Answers) -> AttackResult:
    """Score the reconstruction against the original answers (same cells, same order)."""
    if (
        original.n_answers != perturbed.n_answers
        or not np.array_equal(original.task, perturbed.task)
        or not np.array_equal(original.worker, perturbed.worker)
    ):
        raise ValidationError(
            "The original and perturbed answers must cover the same (task, worker) cells in the "
            "same order (a per-answer mechanism's output)."
        )
    guess, flagged = reconstruct(perturbed)
    truth = original.value.astype(np.int64)
    counts = np.bincount(truth, minlength=original.n_labels)
    recovered = float((guess == truth).mean())
    as_reported = float((perturbed.value == original.value).mean())
    return AttackResult(
        recovered=recovered,
        as_reported=as_reported,
        best=max(recovered, as_reported),
        chance=float(counts.max() / counts.sum()),
        n_answers=original.n_answers,
        inverted_workers=int(flagged.sum()),
    )
