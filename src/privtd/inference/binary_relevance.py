"""Multi-label answers through binary relevance: one binary problem per label.

Binary relevance is the standard reduction of multi-label learning to one independent binary
problem per label (Tsoumakas & Katakis, "Multi-label classification: an overview",
International Journal of Data Warehousing and Mining 3(3), 2007); crowd-kit's
``BinaryRelevance`` applies it to crowd answers the same way (docs/inference.md).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from ..errors import SchemaError, ValidationError
from ._base import Estimator, GoldLike, gold_series, missing_attribute


class BinaryRelevance:
    """Multi-label truth inference: for each label, "did the worker choose it?" is a binary
    answer, and any binary method infers whether the task has it (binary relevance, as
    crowd-kit's ``BinaryRelevance``).

    Parameters
    ----------
    method : str, default "mv"
        A name from :data:`privtd.inference.METHODS` that takes categorical answers (``ds``,
        ``one-coin-ds``, ``lc``, ``kos``, ...). One fresh estimator per label.
    **params
        Passed to each estimator.

    Input
    -----
    A long table with columns ``task``, ``worker`` and ``answer`` (crowd-kit's ``label`` is
    accepted too), one row per (task, worker), whose answer is the list, tuple or set of the
    labels the worker chose (crowd-kit's format); an empty list chooses none. A bare label counts
    as a list of one. The label set is every label anyone chose.

    Fitted attributes
    -----------------
    truths_ (also ``labels_``) : Series of set
        Per task, the labels inferred present.
    probas_ : DataFrame or None
        Per task and label, the probability that the task has it (None if the method has none).
    estimators_ : dict
        Per label, the fitted binary estimator (its ``weights_``, ``n_iter_``, ...).
    weights_ : DataFrame
        Per worker, each label's ``weight`` as a column, and ``n_answers``.

    Gold: a Series or mapping of task -> list of labels, fixed in every binary problem.

    Examples
    --------
    >>> import pandas as pd
    >>> from privtd.inference import BinaryRelevance
    >>> frame = pd.DataFrame({"task": [1, 1, 1], "worker": ["a", "b", "c"],
    ...                       "answer": [["cat"], ["cat", "dog"], ["cat", "dog"]]})
    >>> sorted(BinaryRelevance("mv").fit(frame).truths_.loc[1])
    ['cat', 'dog']
    """

    def __init__(self, method: str = "mv", **params: Any) -> None:
        self.method = method
        self.params = params

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"BinaryRelevance(method={self.method!r}{extra})"

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: before fit, NotFittedError; after, the model
        # has no such attribute (as Estimator's).
        raise missing_attribute(self, name, "truths_" in self.__dict__)

    def fit(self, answers: pd.DataFrame, *, gold: GoldLike = None) -> BinaryRelevance:
        """Fit one binary estimator per label on the ``answers`` table (see the class doc)."""
        from . import make_estimator  # the registry imports this module

        frame = self._frame(answers)
        chosen = frame["answer"].explode()
        chosen = chosen[chosen.notna()]
        codes, labels = pd.factorize(chosen, sort=True)
        if len(labels) == 0:
            raise ValidationError("No worker chose any label. Pass answers with labels in them.")
        rows = frame.index.get_indexer(chosen.index)
        member = np.zeros((len(frame), len(labels)), dtype=bool)
        member[rows, codes] = True
        gold_member = self._gold(gold, labels)
        self.estimators_: dict[Hashable, Estimator] = {}
        for j, label in enumerate(labels):
            binary = Answers.from_frame(
                frame[["task", "worker"]].assign(answer=member[:, j]), labels=[False, True]
            )
            est = make_estimator(self.method, **self.params)
            if est.kinds != ("categorical",) and "categorical" not in est.kinds:
                raise ValidationError(
                    f"BinaryRelevance needs a method for labels; {self.method!r} is numeric."
                )
            gold_j = None if gold_member is None else gold_member[label]
            self.estimators_[label] = est.fit(binary, gold=gold_j)
        first = next(iter(self.estimators_.values()))
        tasks = first.truths_.index
        has = pd.DataFrame(
            {label: est.truths_.astype(bool) for label, est in self.estimators_.items()}
        )
        picked = has.to_numpy()
        names = np.asarray(labels, dtype=object)
        self.truths_ = pd.Series(
            [set(names[row]) for row in picked], index=tasks, name="truth", dtype=object
        )
        self.labels_ = self.truths_
        probas = {label: est.probas_ for label, est in self.estimators_.items()}
        self.probas_ = (
            None
            if any(p is None for p in probas.values())
            else pd.DataFrame(
                {label: p[True] for label, p in probas.items() if p is not None}, index=tasks
            )
        )
        weights = pd.DataFrame(
            {label: est.weights_["weight"] for label, est in self.estimators_.items()}
        )
        weights["n_answers"] = first.weights_["n_answers"]
        self.weights_ = weights
        return self

    def fit_predict(self, answers: pd.DataFrame, *, gold: GoldLike = None) -> pd.Series:
        return self.fit(answers, gold=gold).truths_

    def fit_predict_proba(self, answers: pd.DataFrame, *, gold: GoldLike = None) -> pd.DataFrame:
        self.fit(answers, gold=gold)
        if self.probas_ is None:
            raise ValidationError(f"Method {self.method!r} has no per-task probabilities.")
        return self.probas_

    @staticmethod
    def _frame(answers: pd.DataFrame) -> pd.DataFrame:
        if not isinstance(answers, pd.DataFrame):
            raise ValidationError(
                "BinaryRelevance takes a DataFrame with columns task, worker, answer (a list of "
                f"labels per row). Got {type(answers).__name__}."
            )
        column = "answer" if "answer" in answers.columns else "label"
        wanted = ["task", "worker", column]
        missing = [c for c in wanted if c not in answers.columns]
        if missing:
            raise SchemaError(
                f"The answers table lacks column(s) {missing}: expected ['task', 'worker', "
                f"'answer'], found {list(map(str, answers.columns))}. Rename the columns."
            )
        if answers.shape[0] == 0:
            raise ValidationError(
                "The answers table is empty (0 rows). Pass at least one (task, worker, answer) row."
            )
        frame = answers[wanted].rename(columns={column: "answer"}).reset_index(drop=True)
        # A missing cell is not "chose none" (that is an empty list): say so rather than read
        # it as one. isna() is True for a missing scalar only, never for a list.
        absent = frame["answer"].isna().to_numpy()
        if absent.any():
            row = int(np.flatnonzero(absent)[0])
            raise ValidationError(
                f"The answers table has {int(absent.sum())} missing answer(s), the first at "
                f"position {row} (counting from 0; task {frame['task'].iat[row]!r}, worker "
                f"{frame['worker'].iat[row]!r}). "
                "Give an empty list where a worker chose no label, or drop the row."
            )
        return frame

    @staticmethod
    def _gold(gold: GoldLike, labels: pd.Index) -> dict[Hashable, pd.Series] | None:
        series = gold_series(gold)
        if series is None:
            return None
        chosen = series.explode()
        unknown = set(chosen.dropna()) - set(labels)
        if unknown:
            raise ValidationError(
                f"gold names label(s) {sorted(map(str, unknown))} that no worker chose. "
                "Drop them from gold."
            )
        return {
            label: pd.Series(
                chosen.eq(label).groupby(level=0, sort=False).any().reindex(series.index)
            )
            for label in labels
        }
