"""Majority vote (docs/algorithms.md#majority-vote)."""

from __future__ import annotations

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from . import _kernels
from ._base import Estimator, Gold, _check_choice
from ._ops import argmax_ties, shares, vote_matrix
from ._tags import MEMORY_AND_DASK, Tags


class MajorityVote(Estimator):
    """The most frequent answer per task (P0 Eq. 1).

    Parameters
    ----------
    tie_break : {"first", "random"}
        "first" (default) gives a tie to the smallest label, deterministically; "random" picks
        uniformly among the tied labels with ``rng``, as the reference implementations do.
    rng : Generator, int or None
        Only used when ``tie_break="random"``.

    Notes
    -----
    ``probas_`` holds the vote shares; ``weights_["agreement"]`` is each worker's fraction of
    answers equal to the majority.
    """

    __privtd_tags__ = Tags("mv", executors=MEMORY_AND_DASK)

    def __init__(self, tie_break: str = "first", rng: RNGLike = None) -> None:
        self.tie_break = tie_break
        self.rng = rng

    def _validate_params(self) -> None:
        _check_choice("MajorityVote", "tie_break", self.tie_break, ("first", "random"))

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        votes = vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels)
        proba = shares(votes)
        if gold is not None:
            proba[gold.index] = np.eye(answers.n_labels)[gold.value]
        truth = argmax_ties(proba, self.tie_break, self.rng)
        matches = _kernels.agreement(
            answers.task, answers.worker, answers.value, truth, answers.n_workers
        )
        counts = answers.worker_counts()
        # A listed worker without answers has no agreement to report: NaN, not a 0/0 warning.
        agree = np.divide(matches, counts, out=np.full(counts.shape, np.nan), where=counts > 0)
        self._set_results(answers, truth, proba=proba, worker_columns={"agreement": agree})
        # crowd-kit's skills_ for a vote: each worker's agreement with the majority, not the
        # vote weight (1 for everyone, in weights_["weight"]).
        self.skills_ = self.weights_["agreement"].rename("skill").rename_axis("worker")
