"""Measuring inferred truths against known ones, beside what a trivial guess scores.

Accuracy alone flatters a method on skewed classes: with 88% of the truths one class, labelling
every task that class scores 0.88. So every score comes with the trivial baseline (the best
constant guess) and the method's margin over it, and categorical scores with the balanced
accuracy, the macro-F1, each class's recall and the confusion matrix.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from .errors import ValidationError

__all__ = ["evaluate"]


def evaluate(
    truths: pd.Series,
    reference: pd.Series,
    *,
    kind: str = "auto",
    gold: pd.Series | Iterable[Hashable] | None = None,
    answers: Any = None,
) -> dict[str, Any]:
    """Compare inferred ``truths`` with ``reference`` truths on the tasks they share.

    Parameters
    ----------
    truths, reference : Series
        Truths by task id.
    kind : {"auto", "categorical", "numeric"}
        "auto": numbers where either side holds floats, labels otherwise.
    gold : Series or task ids, optional
        Tasks whose truth the fit held fixed (the ``gold`` given to ``fit``; a Series' index is
        used): left out of every score, since their inferred truth is the reference by
        construction, and counted in ``n_gold``.
    answers : Answers or long DataFrame, optional
        The answers the truths were inferred from: for numbers, the baseline is then the median
        of the answers (the guess a requester can make for every task without any model); without
        them, the median of the reference.

    Returns
    -------
    dict
        Both kinds: ``n_evaluated`` (tasks scored), ``n_missing`` (reference tasks with no
        inferred truth), ``n_gold`` (reference tasks left out as gold; only when ``gold`` is
        given), as ints.

        Categorical: ``accuracy``, ``error_rate``, ``balanced_accuracy`` (the mean of the recall
        of each class the reference has), ``macro_f1`` (the mean F1 over the labels either side
        uses), ``baseline`` (what the baseline is), ``baseline_label`` (the reference's majority
        class, as a string), ``baseline_accuracy`` (its share) and ``baseline_balanced_accuracy``
        (``1 / classes``), ``accuracy_margin`` and ``balanced_accuracy_margin`` (the method's
        score less the baseline's), ``n_predicted_labels`` (1 when every scored task got one
        label), ``recall`` (``{label: recall}``) and ``confusion`` (``{reference label:
        {inferred label: count}}``; ``pd.DataFrame(m["confusion"]).T`` has the reference labels
        as rows). Labels are compared, and keyed, as strings.

        Numeric: ``mae``, ``rmse``, ``baseline`` (what the baseline is), ``baseline_value``,
        ``baseline_mae``, ``baseline_rmse``, and ``mae_margin`` and ``rmse_margin`` (the
        baseline's error less the method's: below 0, the constant guess does better).

    Examples
    --------
    >>> import pandas as pd
    >>> from privtd import evaluate
    >>> ref = pd.Series(["no"] * 8 + ["yes"] * 2, index=range(10))
    >>> m = evaluate(pd.Series("no", index=range(10)), ref)
    >>> m["accuracy"], m["balanced_accuracy"], m["accuracy_margin"]
    (0.8, 0.5, 0.0)
    """
    if reference.index.has_duplicates:
        raise ValidationError(
            f"The reference names task {reference.index[reference.index.duplicated()][0]!r} twice."
        )
    out: dict[str, Any] = {}
    held: pd.Index | None = None
    if gold is not None:
        gold_tasks = gold.index if isinstance(gold, pd.Series) else pd.Index(list(gold))
        held = reference.index.intersection(gold_tasks)
        if len(held) and len(held) == len(reference):
            raise ValidationError(
                f"Every reference task ({len(held)}) had its truth held fixed as gold, so the "
                "score would be perfect by construction. Score against tasks the fit was not "
                "given: leave them out of the fit's gold.",
                param="gold",
            )
        reference = reference.drop(held)
    common = reference.index.intersection(truths.index)
    if len(common) == 0:
        raise ValidationError(
            "No task has both an inferred truth and a reference truth; "
            "check that the task ids match."
        )
    inferred, ref = truths.loc[common], reference.loc[common]
    if kind == "auto":
        # Float on either side means numbers; labels (int, str, bool) compare for equality.
        both_numeric = all(pd.api.types.is_numeric_dtype(s.dtype) for s in (ref, inferred))
        any_float = any(pd.api.types.is_float_dtype(s.dtype) for s in (ref, inferred))
        kind = "numeric" if both_numeric and any_float else "categorical"
    out["n_evaluated"] = len(common)
    out["n_missing"] = len(reference) - len(common)
    if held is not None:
        out["n_gold"] = len(held)
    if kind == "numeric":
        out.update(_numeric_scores(inferred, ref, answers))
    else:
        _check_label_overlap(inferred, ref)
        out.update(_label_scores(inferred.astype(str).to_numpy(), ref))
    return out


def _label_scores(inferred: np.ndarray, ref: pd.Series) -> dict[str, Any]:
    """Accuracy, balanced accuracy, macro-F1, the baseline, recalls and the confusion matrix."""
    labels = _ordered_labels(ref, inferred)
    truth = ref.astype(str).to_numpy()
    codes = {label: i for i, label in enumerate(labels)}
    t = np.fromiter((codes[x] for x in truth), dtype=np.int64, count=truth.size)
    p = np.fromiter((codes[x] for x in inferred), dtype=np.int64, count=inferred.size)
    k = len(labels)
    confusion = confusions(p, t, k)
    support, predicted, right = confusion.sum(axis=1), confusion.sum(axis=0), np.diag(confusion)
    present = support > 0  # the classes the reference has
    recall = right[present] / support[present]
    # F1 = 2 TP / (2 TP + FP + FN), 0 for a label one side uses and the other never gets right.
    f1 = 2 * right / np.maximum(support + predicted, 1)
    used = (support + predicted) > 0
    accuracy = float(right.sum() / t.size)
    majority = int(np.argmax(support))
    baseline_accuracy = float(support[majority] / t.size)
    balanced = float(balanced_accuracy(confusion))
    chance = 1.0 / int(present.sum())
    return {
        "accuracy": accuracy,
        "error_rate": 1.0 - accuracy,
        "balanced_accuracy": balanced,
        "macro_f1": float(f1[used].mean()),
        "baseline": "the reference's majority class",
        "baseline_label": labels[majority],
        "baseline_accuracy": baseline_accuracy,
        "baseline_balanced_accuracy": chance,
        "accuracy_margin": accuracy - baseline_accuracy,
        "balanced_accuracy_margin": balanced - chance,
        "n_predicted_labels": int((predicted > 0).sum()),
        "recall": {
            label: float(r) for label, r in zip(np.array(labels)[present], recall, strict=True)
        },
        "confusion": {
            labels[i]: {labels[j]: int(confusion[i, j]) for j in range(k)}
            for i in range(k)
            if present[i]
        },
    }


def confusions(predicted: np.ndarray, truth: np.ndarray, n_labels: int) -> np.ndarray:
    """Confusion counts of integer-coded labels, reference codes as rows and inferred codes as
    columns. ``predicted`` may carry leading axes (one row of codes per trial, say) against one
    ``truth``: one ``n_labels x n_labels`` matrix per leading index, from one ``bincount``."""
    predicted = np.asarray(predicted, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    lead = predicted.shape[:-1]
    rows = predicted.reshape(-1, predicted.shape[-1])
    k = n_labels
    cells = (np.arange(rows.shape[0])[:, None] * k + truth[None, :]) * k + rows
    counts = np.bincount(cells.ravel(), minlength=rows.shape[0] * k * k)
    return counts.reshape(*lead, k, k)


def balanced_accuracy(confusion: np.ndarray) -> np.ndarray:
    """The mean, over the classes the reference has (rows with a count), of each class's recall,
    for each confusion matrix in the last two axes of ``confusion`` (see :func:`confusions`)."""
    support = confusion.sum(axis=-1)
    right = np.diagonal(confusion, axis1=-2, axis2=-1)
    present = support > 0
    recall = np.divide(right, support, out=np.zeros(right.shape), where=present)
    return recall.sum(axis=-1) / present.sum(axis=-1)


def _ordered_labels(ref: pd.Series, inferred: np.ndarray) -> list[str]:
    """The reference's labels in their natural order (numbers as numbers), then any label only
    the inferred truths use, all as strings."""
    values: list[Any] = list(pd.unique(ref.to_numpy()))
    try:
        values = sorted(values)
    except TypeError:  # mixed types: the strings' order
        values = sorted(values, key=str)
    labels = list(dict.fromkeys(str(v) for v in values))
    seen = set(labels)
    return labels + sorted(set(inferred.tolist()) - seen)


def _numeric_scores(inferred: pd.Series, ref: pd.Series, answers: Any) -> dict[str, Any]:
    """MAE and RMSE, and those of the baseline: the median of the answers, or of the
    reference."""
    truth = ref.to_numpy(dtype=float)
    err = inferred.to_numpy(dtype=float) - truth
    if answers is not None:
        from .answers import as_answers

        values = np.asarray(as_answers(answers, kind="numeric").value, dtype=float)
        values = values[np.isfinite(values)]
        if values.size == 0:
            raise ValidationError("The answers hold no number to take the median of.")
        source = "the median of the answers"
    else:
        values, source = truth, "the median of the reference"
    constant = float(np.median(values))
    base = constant - truth
    mae, rmse = float(np.mean(np.abs(err))), float(np.sqrt(np.mean(err**2)))
    base_mae, base_rmse = float(np.mean(np.abs(base))), float(np.sqrt(np.mean(base**2)))
    return {
        "mae": mae,
        "rmse": rmse,
        "baseline": source,
        "baseline_value": constant,
        "baseline_mae": base_mae,
        "baseline_rmse": base_rmse,
        "mae_margin": base_mae - mae,
        "rmse_margin": base_rmse - rmse,
    }


def _check_label_overlap(inferred: pd.Series, ref: pd.Series) -> None:
    """Refuse to score labels of which not one inferred value is a reference value, when that
    is surely a mismatch of spelling or type (``1.0`` against ``yes``, or ``1.0`` against
    ``1``) rather than a run that got every task wrong: the two sides differ in type, or each
    has several labels and they share none."""
    mine, theirs = pd.unique(inferred.astype(str)), pd.unique(ref.astype(str))
    if set(mine) & set(theirs):
        return
    numeric = [pd.api.types.is_numeric_dtype(s.dtype) for s in (inferred, ref)]
    if numeric[0] == numeric[1] and (len(mine) < 2 or len(theirs) < 2):
        return
    raise ValidationError(
        f"No inferred label is a reference label (inferred: {sorted(mine)[:4]}, reference: "
        f"{sorted(theirs)[:4]}), so accuracy would be 0 by construction. Write both with the "
        "same labels; for numbers compare as numbers (kind='numeric').",
        param="kind",
    )
