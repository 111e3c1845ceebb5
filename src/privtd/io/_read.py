"""The readers behind :mod:`privtd.io`: format detection and dispatch (docs/formats.md)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from .._files import refuse_spreadsheet
from ..errors import SchemaError, ValidationError
from ._base import FORMAT_LABELS, Imported
from .appen import read_appen
from .label_studio import iter_tasks, read_label_studio
from .mturk import read_mturk
from .toloka import read_toloka

#: Every format :func:`read` knows, ``auto`` aside.
FORMATS = ("long", "toloka", "mturk", "label-studio", "appen")

_PARQUET = (".parquet", ".pq")


def _head(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(65536)
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except IsADirectoryError:
        raise ValidationError(f"{path!r} is a directory. Pass a file.") from None
    return raw.decode("utf-8-sig", errors="replace")


def sniff_delimiter(header: str) -> str:
    """The delimiter of a header line: a tab or a semicolon when the line has one and no
    comma, a comma otherwise."""
    if "\t" in header:
        return "\t"
    if ";" in header and "," not in header:
        return ";"
    return ","


def _header(path: str, delimiter: str | None = None) -> tuple[list[str], str]:
    """The header line's column names, split at ``delimiter`` (default: the sniffed one).

    The whole line is read, however long: a platform export with thousands of columns (an
    MTurk radio group of many options) has its identifying columns wherever they fall."""
    with open(path, "rb") as handle:
        line = handle.readline()
    try:  # strictly: a file that is not text gets the parse error the CSV reader would give
        first = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"Cannot parse {path!r} as csv: {exc}.") from None
    delimiter = delimiter or sniff_delimiter(first)
    names = next(csv.reader([first], delimiter=delimiter), [])
    return [n.strip() for n in names], delimiter


def _looks_like_label_studio(path: str, head: str) -> bool:
    """A JSON list of tasks with annotations. The first 64 KB usually show it; when they do
    not (a task with large data first), the first task alone is parsed."""
    if not head.startswith("["):
        return False
    if '"annotations"' in head or '"completions"' in head:
        return True
    for task in iter_tasks(path):
        return isinstance(task, dict) and ("annotations" in task or "completions" in task)
    return True  # an empty list: read_label_studio says there is nothing to read


def detect(path: str) -> str:
    """The format of the file at ``path``, from its first bytes: a JSON list of tasks with
    ``annotations`` is Label Studio; a header with ``ASSIGNMENT:worker_id`` is Toloka, with
    ``WorkerId`` and ``HITId`` MTurk, with ``_unit_id`` and ``_worker_id`` Appen; anything
    else (and Parquet) is the long table."""
    refuse_spreadsheet(path)
    if str(path).lower().endswith(_PARQUET):
        return "long"
    text = _head(path)
    if text.startswith("PAR1"):
        return "long"
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        if _looks_like_label_studio(path, stripped):
            return "label-studio"
        raise SchemaError(
            f"{path!r} is JSON but not a Label Studio export (a list of tasks with "
            "'annotations'); privtd reads answers from CSV, TSV, Parquet and the exports in "
            "docs/formats.md."
        )
    names, _ = _header(path)
    found = set(names)
    if "ASSIGNMENT:worker_id" in found or any(n.startswith("ASSIGNMENT:") for n in found):
        return "toloka"
    if {"WorkerId", "HITId"} <= found:
        return "mturk"
    if {"_unit_id", "_worker_id"} <= found:
        return "appen"
    return "long"


def read_long(
    path: str,
    *,
    delimiter: str | None = None,
    task: str = "task",
    worker: str = "worker",
    answer: str = "answer",
    detected: bool = False,
    **kwargs: Any,
) -> Imported:
    """Read privtd's long table (CSV, TSV or Parquet) with columns mapped by ``task``,
    ``worker`` and ``answer``; ``delimiter`` defaults to the one the header line uses."""
    from ..answers import Answers, _read_table

    fmt = (
        "parquet"
        if str(path).lower().endswith(_PARQUET) or _head(path).startswith("PAR1")
        else "csv"
    )
    names, sniffed = _header(path, delimiter) if fmt == "csv" else (None, ",")
    if (names is None or GOLD_COLUMN in names) and GOLD_COLUMN not in (task, worker, answer):
        frame = _read_table(path, fmt, {"task": task, "worker": worker}, sniffed)
        if GOLD_COLUMN in frame.columns:
            return _with_gold(frame, path, task, worker, answer, kwargs)
        return Imported(
            answers=Answers.from_frame(frame, task=task, worker=worker, answer=answer, **kwargs),
            gold=None,
            format="long",
        )
    if fmt == "csv":
        names, delimiter = _header(path, delimiter)
        if detected and answer == "answer" and "answer" not in names and "label" in names:
            pass  # crowd-kit's 'label': from_frame takes it
        elif detected:
            wanted = [task, worker, answer]
            missing = [c for c in wanted if c not in names]
            if missing:
                shown = names if len(names) <= 12 else [*names[:12], "..."]
                raise SchemaError(
                    f"{path!r} looks like no known format: a long table needs columns {wanted} "
                    f"(found {shown}; map them with task, worker, answer), and no platform "
                    "export's columns were found (Toloka ASSIGNMENT:worker_id, MTurk WorkerId "
                    "and HITId, Appen _unit_id and _worker_id; docs/formats.md).",
                    param=("task", "worker", "answer"),
                )
        answers = Answers.from_csv(
            path, delimiter=delimiter, task=task, worker=worker, answer=answer, **kwargs
        )
    else:
        answers = Answers.from_parquet(path, task=task, worker=worker, answer=answer, **kwargs)
    return Imported(answers=answers, gold=None, format="long")


#: A long table's column of known truths: the task's truth on its rows, blank elsewhere
#: (what ``privtd perturb`` writes from an export's golden tasks).
GOLD_COLUMN = "gold"


def _with_gold(
    frame: Any, path: str, task: str, worker: str, answer: str, kwargs: dict[str, Any]
) -> Imported:
    """A long table with a ``gold`` column: the answers, and the golden tasks it names."""
    import pandas as pd

    from ._base import build, gold_from

    if answer not in frame.columns and answer == "answer" and "label" in frame.columns:
        answer = "label"  # crowd-kit's name, as Answers.from_frame takes it
    missing = [c for c in (task, worker, answer) if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{path!r} lacks column(s) {missing}: expected {[task, worker, answer]} beside its "
            f"{GOLD_COLUMN!r} column, found {list(map(str, frame.columns))}. Map them with "
            "task, worker, answer.",
            param=("task", "worker", "answer"),
        )
    values = frame[GOLD_COLUMN]
    if isinstance(values.dtype, pd.api.extensions.ExtensionDtype):
        values = values.astype(object).where(values.notna(), None)  # nullable ints: plain ints
    gold = gold_from(frame[task], values, "long")
    if kwargs.get("kind", "auto") == "auto" and pd.api.types.is_float_dtype(frame[answer].dtype):
        kwargs = {**kwargs, "kind": "numeric"}  # as without gold: float answers are numbers
    long = pd.DataFrame({"task": frame[task], "worker": frame[worker], "answer": frame[answer]})
    return build(long, gold, "long", [], path, kwargs)


def read(
    path: str | Path,
    format: str = "auto",  # noqa: A002 - the word users know, as in pandas' to_csv
    *,
    delimiter: str | None = None,
    task: str | None = None,
    worker: str | None = None,
    answer: str | None = None,
    keep_rejected: bool = False,
    **kwargs: Any,
) -> Imported:
    """Read answers from a file in any format privtd knows.

    Parameters
    ----------
    path : str or Path
        The file.
    format : {"auto", "long", "toloka", "mturk", "label-studio", "appen"}
        "auto" detects it from the file (:func:`detect`).
    delimiter : str, optional
        The long table's delimiter (default: the one its header uses); Appen reports saved as
        TSV.
    task, worker : str, optional
        The columns identifying tasks and workers (each format has its default:
        docs/formats.md).
    answer : str, optional
        The answer column (long table), output field (Toloka), answer field (MTurk), Choices
        control (Label Studio) or question column (Appen), when there are several.
    keep_rejected : bool
        Also use what the platform marks as rejected (Toloka, MTurk) or tainted (Appen).
    **kwargs
        Passed to :meth:`privtd.Answers.from_frame` (``kind``, ``on_duplicate``, ...).
    """
    path = str(path)
    if format not in ("auto", *FORMATS):
        raise ValidationError(f"Unknown format {format!r}; use one of auto, {', '.join(FORMATS)}.")
    detected = format == "auto"
    found = detect(path)
    fmt = found if detected or format == "long" else format
    if format == "long":
        fmt = "long"  # a platform's columns mapped by hand (--task-col ...) are the user's call
    elif not detected and found not in ("long", format):
        raise SchemaError(
            f"{path!r} looks like a {FORMAT_LABELS[found]} export, not "
            f"{FORMAT_LABELS[format]}. Pass format={found!r} or 'auto'.",
            param="format",
        )
    if fmt != "long" and delimiter is not None and fmt != "appen":
        raise ValidationError(
            f"delimiter applies to a long table or an Appen report; a {FORMAT_LABELS[fmt]} "
            "export has its own. Leave it out.",
            param="delimiter",
        )
    if fmt == "long":
        if keep_rejected:
            raise ValidationError(
                "keep_rejected applies to platform exports only.", param="keep_rejected"
            )
        return read_long(
            path,
            delimiter=delimiter,
            task=task or "task",
            worker=worker or "worker",
            answer=answer or "answer",
            detected=detected,
            **kwargs,
        )
    if fmt == "label-studio":
        if task is not None or worker is not None:
            raise ValidationError(
                "A Label Studio export names its tasks and annotators itself; leave out "
                "task and worker.",
                param=("task", "worker"),
            )
        return read_label_studio(path, answer=answer, **kwargs)
    if fmt == "appen":
        return read_appen(
            path,
            question=answer,
            task=task,
            worker=worker,
            keep_rejected=keep_rejected,
            delimiter=delimiter or ",",
            **kwargs,
        )
    reader = read_toloka if fmt == "toloka" else read_mturk
    return reader(
        path, answer=answer, task=task, worker=worker, keep_rejected=keep_rejected, **kwargs
    )
