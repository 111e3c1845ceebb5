"""Amazon Mechanical Turk batch results: the CSV of "Download CSV" on a batch's results page
(docs/formats.md#amazon-mechanical-turk).

One row per assignment: ``HITId``, ``AssignmentId``, ``WorkerId``, ``AssignmentStatus``
(``Submitted``, ``Approved``, ``Rejected``), the batch's input as ``Input.<name>`` and the
worker's form fields as ``Answer.<name>``. A field that is a group of radio buttons or
checkboxes comes as one boolean column per option, ``Answer.<option>.on`` (or
``Answer.<question>.<option>.on``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..errors import ValidationError
from ._base import (
    Imported,
    build,
    drop_rows,
    gold_from,
    is_true,
    pick_one,
    read_text_table,
    require_columns,
)

__all__ = ["read_mturk"]

_ON = ".on"


def _questions(columns: list[str]) -> dict[str, list[str]]:
    """Each answer field's name -> its columns: one ``Answer.x`` column, or the ``.on``
    columns of one option group (named after the part before the option, ``choice`` when
    the options sit at the top level)."""
    out: dict[str, list[str]] = {}
    for column in columns:
        if not column.startswith("Answer."):
            continue
        name = column[len("Answer.") :]
        if name.endswith(_ON) and name.count(".") >= 1:
            stem = name[: -len(_ON)]
            group = stem.rsplit(".", 1)[0] if "." in stem else "choice"
            out.setdefault(group, []).append(column)
        else:
            out.setdefault(name, []).append(column)
    return out


def read_mturk(
    path: str,
    *,
    answer: str | None = None,
    task: str | None = None,
    worker: str | None = None,
    gold: str | None = None,
    keep_rejected: bool = False,
    **kwargs: Any,
) -> Imported:
    """Read an MTurk batch results CSV.

    Parameters
    ----------
    path : str
        The batch results CSV.
    answer : str, optional
        The answer field (``sentiment`` or ``Answer.sentiment``; ``choice`` for top-level
        ``Answer.<option>.on`` radio buttons) when there are several.
    task : str, optional
        The column identifying a task. Default ``HITId``; name an ``Input.`` column when one
        item was posted in several HITs.
    worker : str, optional
        Default ``WorkerId``.
    gold : str, optional
        An ``Input.`` column holding the known answer of honeypot items (MTurk has no gold of
        its own); its non-empty cells become ``.gold``.
    keep_rejected : bool
        Also use ``Rejected`` assignments (left out by default: the requester judged them bad).
    **kwargs
        Passed to :meth:`privtd.Answers.from_frame`.
    """
    frame = read_text_table(path, ",", "MTurk")
    task = task or "HITId"
    worker = worker or "WorkerId"
    require_columns(frame, [task, worker], "mturk", path)
    questions = _questions([str(c) for c in frame.columns])
    if answer is not None and answer.startswith("Answer.") and answer not in frame.columns:
        answer = answer[len("Answer.") :]
    elif answer is not None and answer.startswith("Answer."):
        answer = next((q for q, cols in questions.items() if cols == [answer]), answer)
    field = pick_one(
        list(questions), answer, "answer field", "mturk", "--answer-col (Python: answer=)"
    )
    notes: list[str] = []
    if "AssignmentStatus" in frame.columns and not keep_rejected:
        rejected = frame["AssignmentStatus"].fillna("").str.strip().str.lower() == "rejected"
        frame = drop_rows(
            frame, rejected, notes, "of Rejected assignments (--keep-rejected uses them)"
        )
    columns = questions[field]
    if len(columns) == 1 and not columns[0].endswith(_ON):
        values = frame[columns[0]]
    elif len(columns) == 1:
        # One checkbox on its own is a yes/no question: unchecked is an answer too.
        values = is_true(frame[columns[0]]).map({True: "true", False: "false"})
        values = values.where(frame[columns[0]].notna(), None)
    else:
        values = _checked_option(frame, columns, field)
    frame = drop_rows(frame, values.isna(), notes, f"with no answer to {field!r}")
    values = values[values.notna().to_numpy()]
    golden = None
    if gold is not None:
        require_columns(frame, [gold], "mturk", path)
        golden = gold_from(frame[task], frame[gold], "mturk")
    long = pd.DataFrame(
        {
            "task": frame[task].to_numpy(),
            "worker": frame[worker].to_numpy(),
            "answer": values.to_numpy(),
        }
    )
    return build(long, golden, "mturk", notes, path, kwargs)


def _checked_option(frame: pd.DataFrame, columns: list[str], field: str) -> pd.Series:
    """The one checked option per row of an ``.on`` group (missing when none is)."""
    options = [c[len("Answer.") : -len(_ON)].rsplit(".", 1)[-1] for c in columns]
    checked = np.column_stack([is_true(frame[c]).to_numpy() for c in columns])
    several = checked.sum(axis=1) > 1
    if several.any():
        row = int(np.flatnonzero(several)[0])
        picked = [o for o, on in zip(options, checked[row], strict=True) if on]
        raise ValidationError(
            f"MTurk answer field {field!r} has several options checked in one assignment (row "
            f"{row + 2}: {picked}); privtd reads one label per answer. Make it a radio group, "
            "or split the checkboxes into yes/no questions and pick one with --answer-col."
        )
    picked_index = checked.argmax(axis=1)
    values = pd.Series(np.asarray(options, dtype=object)[picked_index], index=frame.index)
    any_checked = pd.Series(checked.any(axis=1), index=frame.index)
    return values.where(any_checked, None)
