"""Appen (formerly Figure Eight, CrowdFlower) full reports: one row per judgment
(docs/formats.md#appen--figure-eight).

Columns used: ``_unit_id`` (the row of source data, the task), ``_worker_id``, ``_golden``
(the unit is a test question), ``_tainted`` (the contributor later failed quality control),
the question's column named after its field, and ``<question>_gold`` with the test question's
answer. The other ``_`` columns (``_id``, ``_started_at``, ``_trust``, ``_country``, ...) and the
source data columns are not needed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ._base import (
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

__all__ = ["read_appen"]


def read_appen(
    path: str,
    *,
    question: str | None = None,
    task: str | None = None,
    worker: str | None = None,
    keep_rejected: bool = False,
    delimiter: str = ",",
    **kwargs: Any,
) -> Imported:
    """Read an Appen / Figure Eight full report.

    Parameters
    ----------
    path : str
        The full report CSV (unzipped).
    question : str, optional
        The question's column. Default: the one column with a ``<question>_gold`` partner.
    task, worker : str, optional
        Default ``_unit_id`` and ``_worker_id``.
    keep_rejected : bool
        Also use ``_tainted`` judgments (left out by default: their contributor failed the
        job's quality control after giving them).
    delimiter : str
        ``","``; a report saved as TSV reads with ``"\\t"``.
    **kwargs
        Passed to :meth:`privtd.Answers.from_frame`.

    Returns
    -------
    Imported
        ``.answers``, and ``.gold``: the ``<question>_gold`` answer of every test question that
        has exactly one accepted answer.
    """
    names = text_header(path, delimiter, "Appen")
    task = task or "_unit_id"
    worker = worker or "_worker_id"
    require_columns(names, [task, worker], "appen", path)
    columns = names
    if question is None:
        present = set(columns)
        candidates = [c for c in columns if f"{c}_gold" in present]
        if not candidates:
            plain = [c for c in columns if not c.startswith("_")]
            candidates = plain if len(plain) == 1 else []
            if not candidates:
                from ..errors import SchemaError

                raise SchemaError(
                    f"The Appen report {path!r} has no <question>_gold column to find the "
                    f"question by; name it as question among {plain}.",
                    param="question",
                )
    else:
        candidates = columns
    field = pick_one(candidates, question, "question column", "appen", "question")
    used = {task, worker, "_tainted", "_golden", field, f"{field}_gold"}
    frame = read_text_table(path, delimiter, "Appen", usecols=[c for c in names if c in used])
    notes: list[str] = []
    if "_tainted" in frame.columns and not keep_rejected:
        frame = drop_rows(
            frame,
            is_true(frame["_tainted"]),
            notes,
            "of tainted judgments (keep_rejected uses them)",
            "keep_rejected",
        )
    frame = drop_rows(frame, frame[field].isna(), notes, f"with an empty {field!r}")
    gold = None
    gold_column = f"{field}_gold"
    if gold_column in frame.columns:
        golden = frame[gold_column]
        if "_golden" in frame.columns:
            golden = golden.where(is_true(frame["_golden"]), None)
        # Several accepted answers (one per line) make no single truth: those stay out.
        several = golden.fillna("").str.contains("\n")
        if several.any():
            n = frame.loc[several.to_numpy(), task].nunique()
            notes.append(f"left out {n} golden task(s) with several accepted answers")
            golden = golden.where(~several, None)
        gold = gold_from(frame[task], golden, "appen")
    long = pd.DataFrame(
        {
            "task": frame[task].to_numpy(),
            "worker": frame[worker].to_numpy(),
            "answer": frame[field].to_numpy(),
        }
    )
    return build(long, gold, "appen", notes, path, kwargs)
