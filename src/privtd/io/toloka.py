"""Toloka results exports: the TSV of a pool's "Download results" (docs/formats.md#toloka).

One row per task per assignment. ``INPUT:<field>`` columns hold the task's input data,
``OUTPUT:<field>`` the Toloker's response, ``GOLDEN:<field>`` the known response of a control
task, ``HINT:text`` a training task's hint, and ``ASSIGNMENT:<field>`` the assignment
(``worker_id``, ``status``, ``task_id``, ``task_suite_id``, ...).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ._base import (
    Imported,
    build,
    drop_rows,
    gold_from,
    pick_one,
    read_text_table,
    require_columns,
    text_header,
)

__all__ = ["read_toloka", "KEPT_STATUSES"]

#: Assignment statuses whose responses are used: submitted (awaiting review), accepted
#: (``APPROVED`` in the export, ``ACCEPTED`` in the API).
KEPT_STATUSES = ("SUBMITTED", "APPROVED", "ACCEPTED")


def read_toloka(
    path: str,
    *,
    answer: str | None = None,
    task: str | None = None,
    worker: str | None = None,
    keep_rejected: bool = False,
    **kwargs: Any,
) -> Imported:
    """Read a Toloka results TSV.

    Parameters
    ----------
    path : str
        The TSV downloaded from the pool page.
    answer : str, optional
        The output field to read (``result`` or ``OUTPUT:result``) when there are several.
    task : str, optional
        The column identifying a task. Default ``ASSIGNMENT:task_id`` when the export has it,
        else the ``INPUT:`` columns together (the task's input data).
    worker : str, optional
        The column identifying a Toloker. Default ``ASSIGNMENT:worker_id``.
    keep_rejected : bool
        Also use responses of ``REJECTED`` assignments (left out by default: the requester
        judged them bad). ``SKIPPED`` and ``EXPIRED`` assignments carry no response and are
        always left out.
    **kwargs
        Passed to :meth:`privtd.Answers.from_frame` (``kind``, ``on_duplicate``, ...).

    Returns
    -------
    Imported
        ``.answers``, and ``.gold``: the ``GOLDEN:`` response of every control task.
    """
    names = text_header(path, "\t", "Toloka")
    worker = worker or "ASSIGNMENT:worker_id"
    require_columns(names, [worker], "toloka", path)
    outputs = [c[len("OUTPUT:") :] for c in names if c.startswith("OUTPUT:")]
    if answer is not None and answer.startswith("OUTPUT:"):
        answer = answer[len("OUTPUT:") :]
    field = pick_one(outputs, answer, "output field", "toloka", "answer")
    used = {worker, task, "ASSIGNMENT:status", "ASSIGNMENT:task_id"}
    used |= {f"OUTPUT:{field}", f"GOLDEN:{field}"}
    if task is None and "ASSIGNMENT:task_id" not in names:
        used |= {c for c in names if c.startswith("INPUT:")}
    frame = read_text_table(path, "\t", "Toloka", usecols=[c for c in names if c in used])
    notes: list[str] = []
    if "ASSIGNMENT:status" in frame.columns:
        status = frame["ASSIGNMENT:status"].fillna("").str.strip().str.upper()
        rejected = status == "REJECTED"
        if not keep_rejected:
            frame = drop_rows(
                frame,
                rejected,
                notes,
                "of REJECTED assignments (keep_rejected uses them)",
                "keep_rejected",
            )
            status = status[~rejected.to_numpy()]
        other = ~status.isin((*KEPT_STATUSES, "REJECTED"))
        frame = drop_rows(frame, other, notes, "of SKIPPED, EXPIRED or unfinished assignments")
    if task is None:
        if "ASSIGNMENT:task_id" in frame.columns:
            task = "ASSIGNMENT:task_id"
        else:
            inputs = [c for c in frame.columns if str(c).startswith("INPUT:")]
            require_columns(frame.columns, inputs or ["ASSIGNMENT:task_id"], "toloka", path)
            task_ids = frame[inputs[0]].fillna("")
            for column in inputs[1:]:
                task_ids = task_ids + "\t" + frame[column].fillna("")
            frame = frame.assign(**{"INPUT:*": task_ids})
            task = "INPUT:*"
    require_columns(frame.columns, [task], "toloka", path)
    output = f"OUTPUT:{field}"
    frame = drop_rows(frame, frame[output].isna(), notes, f"with an empty {output}")
    frame = drop_rows(frame, frame[task].isna(), notes, f"with an empty {task}")
    frame = drop_rows(frame, frame[worker].isna(), notes, f"with an empty {worker}")
    golden = f"GOLDEN:{field}"
    gold = gold_from(frame[task], frame[golden], "toloka") if golden in frame.columns else None
    long = pd.DataFrame(
        {
            "task": frame[task].to_numpy(),
            "worker": frame[worker].to_numpy(),
            "answer": frame[output].to_numpy(),
        }
    )
    return build(long, gold, "toloka", notes, path, kwargs)
