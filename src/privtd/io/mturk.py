"""Amazon Mechanical Turk batch results: the CSV of "Download CSV" on a batch's results page
(docs/formats.md#amazon-mechanical-turk).

One row per assignment: ``HITId``, ``AssignmentId``, ``WorkerId``, ``AssignmentStatus``
(``Submitted``, ``Approved``, ``Rejected``), the batch's input as ``Input.<name>`` and the
worker's form fields as ``Answer.<name>``. A field that is a group of radio buttons or
checkboxes comes as one boolean column per option, ``Answer.<option>.on`` (or
``Answer.<question>.<option>.on``).
"""

from __future__ import annotations

import array
import csv
import operator
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ValidationError
from ._base import (
    TRUE_TEXTS,
    Imported,
    build,
    drop_rows,
    gold_from,
    is_true,
    pick_one,
    read_text_table,
    require_columns,
    text_header,
)

__all__ = ["read_mturk"]

_ON = ".on"
#: Files up to this many columns are read by pandas, wider ones row by row.
_NARROW = 256


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
    path = str(path)
    names = text_header(path, ",", "MTurk")
    task = task or "HITId"
    worker = worker or "WorkerId"
    require_columns(names, [task, worker], "mturk", path)
    questions = _questions(names)
    if answer is not None and answer.startswith("Answer.") and answer not in names:
        answer = answer[len("Answer.") :]
    elif answer is not None and answer.startswith("Answer."):
        answer = next((q for q, cols in questions.items() if cols == [answer]), answer)
    field = pick_one(list(questions), answer, "answer field", "mturk", "answer")
    if gold is not None:
        require_columns(names, [gold], "mturk", path)
    columns = questions[field]
    group = columns if len(columns) > 1 else []
    wanted = [task, worker, "AssignmentStatus", *([gold] if gold else []), *columns[: not group]]
    frame, checked = _read_rows(path, names, [c for c in wanted if c in names], group)
    notes: list[str] = []
    if "AssignmentStatus" in frame.columns and not keep_rejected:
        rejected = frame["AssignmentStatus"].fillna("").str.strip().str.lower() == "rejected"
        checked = checked[~rejected.to_numpy()]
        frame = drop_rows(
            frame,
            rejected,
            notes,
            "of Rejected assignments (keep_rejected uses them)",
            "keep_rejected",
        )
    if group:
        values = _checked_option(path, frame, checked, group, field)
    elif not columns[0].endswith(_ON):
        values = frame[columns[0]]
    else:
        # One checkbox on its own is a yes/no question: unchecked is an answer too.
        values = is_true(frame[columns[0]]).map({True: "true", False: "false"})
        values = values.where(frame[columns[0]].notna(), None)
    frame = drop_rows(frame, values.isna(), notes, f"with no answer to {field!r}")
    values = values[values.notna().to_numpy()]
    golden = gold_from(frame[task], frame[gold], "mturk") if gold is not None else None
    long = pd.DataFrame(
        {
            "task": frame[task].to_numpy(),
            "worker": frame[worker].to_numpy(),
            "answer": values.to_numpy(),
        }
    )
    return build(long, golden, "mturk", notes, path, kwargs)


def _read_rows(
    path: str, names: list[str], wanted: list[str], group: list[str]
) -> tuple[pd.DataFrame, np.ndarray]:
    """The ``wanted`` columns as text (empty cells missing; the index is each row's number,
    the header being row 1, blank lines not counted), and for each row the position in
    ``group`` of its checked option: -1 when none is, -2 when several are (the error then
    reads the row again).

    pandas reads a file of the usual width. A wider one (an option group can have tens of
    thousands of columns) is read in one pass of the standard CSV reader instead, keeping only
    the used cells and the checked option's position: one pandas column per column would cost
    about a millisecond each. Either way time is linear in the file's size and memory in the
    rows' used cells.
    """
    if len(names) <= _NARROW:
        frame = read_text_table(path, ",", "MTurk")
        frame.index = pd.RangeIndex(2, len(frame) + 2, name="row")
        if not group:
            return frame, np.full(len(frame), -1)
        ticked = np.column_stack([is_true(frame[c]).to_numpy() for c in group])
        count = ticked.sum(axis=1)
        return frame, np.where(count == 1, ticked.argmax(axis=1), np.where(count == 0, -1, -2))
    n = len(names)
    position = {name: i for i, name in reversed(list(enumerate(names)))}  # the first of a name
    get_cells = operator.itemgetter(*[position[c] for c in wanted])
    options = [position[c] for c in group]
    get_options = operator.itemgetter(*options) if len(options) > 1 else None
    kept: list[Any] = []
    positions = array.array("q")
    rows = array.array("q")  # each row's number, the header being row 1, for messages
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        try:
            next(reader, None)
            for row in reader:
                if len(row) != n:
                    line = reader.line_num
                    if not row:
                        continue  # a blank line, as pandas skips it
                    if len(row) > n:
                        raise ValidationError(
                            f"Cannot parse {path!r} as an MTurk export: line {line} has "
                            f"{len(row)} cells, the header {n}. Download the batch's CSV again."
                        )
                    row += [""] * (n - len(row))
                rows.append(len(rows) + 2)
                kept.append(get_cells(row))
                if get_options is not None:
                    chosen = get_options(row)
                    filled = np.flatnonzero(
                        np.fromiter(map(len, chosen), dtype=np.intp, count=len(chosen))
                    )
                    on = [int(j) for j in filled if _truthy(chosen[j])]
                    positions.append(-1 if not on else on[0] if len(on) == 1 else -2)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ValidationError(
                f"Cannot parse {path!r} as an MTurk export (near line {reader.line_num}): {exc}."
            ) from None
    cells = list(zip(*kept, strict=True)) if kept else [() for _ in wanted]
    frame = pd.DataFrame(
        {
            name: pd.Series(column, dtype=object).replace("", None).astype(str)
            for name, column in zip(wanted, cells, strict=True)
        }
    )
    frame.index = pd.Index(np.frombuffer(rows, dtype=np.int64), name="row")
    return frame, np.frombuffer(positions, dtype=np.int64) if group else np.full(len(frame), -1)


def _truthy(cell: str) -> bool:
    return cell.strip().lower() in TRUE_TEXTS


def _checked_option(
    path: str, frame: pd.DataFrame, checked: np.ndarray, columns: list[str], field: str
) -> pd.Series:
    """The one checked option per row of an ``.on`` group (missing when none is)."""
    options = [c[len("Answer.") : -len(_ON)].rsplit(".", 1)[-1] for c in columns]
    several = checked == -2
    if several.any():
        number = int(frame.index[int(np.flatnonzero(several)[0])])
        with open(path, encoding="utf-8-sig", newline="") as handle:
            records = (r for r in csv.reader(handle) if r)
            row = next(r for n, r in enumerate(records, start=1) if n == number)
        names = text_header(path, ",", "MTurk")
        position = {name: i for i, name in reversed(list(enumerate(names)))}
        picked = [o for o, c in zip(options, columns, strict=True) if _truthy(row[position[c]])]
        raise ValidationError(
            f"MTurk answer field {field!r} has several options checked in one assignment (row "
            f"{number}: {picked}); privtd reads one label per answer. Make it a radio group, or "
            "split the checkboxes into yes/no questions and pick one as answer.",
            param="answer",
        )
    values = pd.Series(np.asarray(options, dtype=object)[checked], index=frame.index)
    return values.where(pd.Series(checked >= 0, index=frame.index), None)
