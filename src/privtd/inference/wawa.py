"""Wawa: worker agreement with aggregate (crowd-kit's ``Wawa``)."""

from __future__ import annotations

from ..answers import Answers
from ._base import Estimator, Gold
from ._ops import shares, vote_matrix
from ._skill_vote import accuracy_against, decide, skill_votes
from ._tags import Tags


class Wawa(Estimator):
    """Majority vote, then a vote weighted by each worker's agreement with it.

    Three steps, as crowd-kit's ``Wawa`` defines them: the majority vote (ties to the smallest
    label); each worker's skill, the fraction of their answers equal to it; the vote with each
    answer weighted by its worker's skill. ``probas_`` are the weighted vote shares;
    ``weights_["weight"]`` (also ``skills_``) the skill. A task whose workers all have skill 0
    keeps its plain majority vote (crowd-kit leaves it undefined). Gold tasks count at their
    gold label in both votes.

    Examples
    --------
    >>> from privtd import datasets
    >>> from privtd.inference import Wawa
    >>> est = Wawa().fit(datasets.load("dog").answers)
    >>> round(float(est.skills_.mean()), 3)
    0.787
    """

    __privtd_tags__ = Tags("wawa")

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        votes = vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels)
        first = shares(votes).argmax(axis=1)
        if gold is not None:
            first[gold.index] = gold.value
        skill = accuracy_against(answers, first)
        scores = skill_votes(answers, skill)
        truth, proba = decide(answers, scores, shares(scores), gold)
        self._set_results(answers, truth, proba=proba, weight=skill)
