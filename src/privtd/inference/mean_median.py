"""Per-task mean and median of numeric answers (docs/algorithms.md#mean-and-median)."""

from __future__ import annotations

from ..answers import Answers
from ._base import Estimator, Gold
from ._ops import SortedByTask, task_mean
from ._tags import MEMORY_AND_DASK, Tags


class Mean(Estimator):
    """The plain mean of the answers to each task."""

    __privtd_tags__ = Tags("mean", executors=MEMORY_AND_DASK)

    kinds = ("numeric",)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        truth = task_mean(answers.task, answers.value, answers.n_tasks)
        if gold is not None:
            truth[gold.index] = gold.value
        self._set_results(answers, truth)


class Median(Estimator):
    """The median of the answers to each task (mean of the two middle ones for an even count)."""

    __privtd_tags__ = Tags("median", executors=MEMORY_AND_DASK)

    kinds = ("numeric",)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        truth = SortedByTask(answers.task, answers.value, answers.n_tasks).median()
        if gold is not None:
            truth[gold.index] = gold.value
        self._set_results(answers, truth)
