"""Measuring inferred truths against known ones."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import ValidationError

__all__ = ["evaluate"]


def evaluate(
    truths: pd.Series, reference: pd.Series, *, kind: str = "auto"
) -> dict[str, float | int]:
    """Compare inferred ``truths`` with ``reference`` truths on the tasks they share.

    Categorical: ``accuracy`` and ``error_rate``. Numeric: ``mae`` and ``rmse``. Both report
    ``n_evaluated`` (tasks with a reference truth and an inferred one) and ``n_missing``
    (reference tasks that got no inferred truth), as ints: a count stays a count in JSON.
    """
    if reference.index.has_duplicates:
        raise ValidationError(
            f"The reference names task {reference.index[reference.index.duplicated()][0]!r} twice."
        )
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
    out: dict[str, float | int] = {
        "n_evaluated": len(common),
        "n_missing": len(reference) - len(common),
    }
    if kind == "numeric":
        err = inferred.to_numpy(dtype=float) - ref.to_numpy(dtype=float)
        out["mae"] = float(np.mean(np.abs(err)))
        out["rmse"] = float(np.sqrt(np.mean(err**2)))
    else:
        _check_label_overlap(inferred, ref)
        same = inferred.astype(str).to_numpy() == ref.astype(str).to_numpy()
        out["accuracy"] = float(same.mean())
        out["error_rate"] = 1.0 - out["accuracy"]
    return out


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
        "same labels; for numbers compare as numbers (kind='numeric'; CLI: --kind numeric)."
    )
