"""What every platform reader shares: the result type, reading a text table as text, and
turning a long frame plus golden answers into :class:`~privtd.answers.Answers`."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..answers import Answers
from ..errors import SchemaError, ValidationError

__all__ = ["Imported", "FORMAT_LABELS"]

#: Each format's name as users know it, for messages.
FORMAT_LABELS = {
    "long": "long table",
    "toloka": "Toloka",
    "mturk": "MTurk",
    "label-studio": "Label Studio",
    "appen": "Appen",
}


class Note(str):
    """A reader's note, a plain string that also names the parameter it is about (``param``,
    as :class:`privtd.errors.PrivtdError` does), for a front end to point at its own
    spelling."""

    param: str | None

    def __new__(cls, text: str, param: str | None = None) -> Note:
        note = super().__new__(cls, text)
        note.param = param
        return note

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:  # pickles with its param
        return type(self), (str(self), self.param)


@dataclass(frozen=True, eq=False)
class Imported:
    """Answers read from a file, with the golden tasks the file carries.

    Attributes
    ----------
    answers : Answers
        The workers' answers; its ``notes`` say which rows the reader left out and why.
    gold : pandas.Series or None
        Known truths by task id (index ``task``, values the truth), from the platform's control
        tasks (Toloka ``GOLDEN:``, Appen ``<question>_gold``, Label Studio ground-truth
        annotations, an MTurk ``gold=`` column); None when the file carries none. Pass it to an
        estimator's ``fit(answers, gold=...)``.
    format : str
        The format read: ``long``, ``toloka``, ``mturk``, ``label-studio`` or ``appen``.
    """

    answers: Answers
    gold: pd.Series | None
    format: str

    @property
    def notes(self) -> tuple[str, ...]:
        return self.answers.notes

    @property
    def n_gold(self) -> int:
        return 0 if self.gold is None else len(self.gold)

    def __repr__(self) -> str:
        return (
            f"Imported({FORMAT_LABELS[self.format]}: {self.answers!r}, {self.n_gold} golden tasks)"
        )


def read_text_table(
    path: str, delimiter: str, what: str, usecols: Sequence[str] | None = None
) -> pd.DataFrame:
    """Every cell as text, empty cells as missing; a UTF-8 byte-order mark (what Excel and some
    platforms write) is dropped so that the first column keeps its name. ``usecols``: the
    columns to keep (the others are parsed but never made into columns, which keeps a file of
    many columns fast)."""
    try:
        return pd.read_csv(
            path,
            sep=delimiter,
            usecols=None if usecols is None else list(usecols),
            dtype=str,
            keep_default_na=False,
            na_values=[""],
            encoding="utf-8-sig",
        )
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationError(f"Cannot parse {path!r} as a {what} export: {first}.") from None


def text_header(path: str, delimiter: str, what: str) -> list[str]:
    """The column names of a text table's header (its first record, however long)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            names = next(csv.reader(handle, delimiter=delimiter), None)
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except IsADirectoryError:
        raise ValidationError(f"{path!r} is a directory. Pass a file.") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValidationError(f"Cannot parse {path!r} as {what} CSV: {exc}.") from None
    if not names:
        raise ValidationError(f"Cannot parse {path!r} as {what} CSV: it has no header line.")
    return names


def require_columns(
    names: Sequence[Any] | pd.Index, columns: Sequence[str], fmt: str, path: str
) -> None:
    """Refuse a table whose column ``names`` lack any of ``columns``."""
    missing = [c for c in columns if c not in names]
    if missing:
        found = list(map(str, names))
        shown = found if len(found) <= 12 else [*found[:12], "..."]
        raise SchemaError(
            f"{path!r} is not a usable {FORMAT_LABELS[fmt]} export: it lacks column(s) "
            f"{missing} (found {shown}). Name the right column (task, worker), or check the "
            "file's format (format; docs/formats.md).",
            param=("task", "worker", "format"),
        )


def pick_one(options: Sequence[str], chosen: str | None, what: str, fmt: str, param: str) -> str:
    """The one answer field among ``options``: ``chosen`` when given (as the reader's
    parameter ``param``), the only one otherwise."""
    if chosen is not None:
        if chosen not in options:
            raise SchemaError(
                f"The {FORMAT_LABELS[fmt]} export has no {what} {chosen!r}; it has "
                f"{list(options)}. Pass one of them as {param}.",
                param=param,
            )
        return chosen
    if not options:
        raise SchemaError(f"The {FORMAT_LABELS[fmt]} export has no {what}; nothing to read.")
    if len(options) > 1:
        raise SchemaError(
            f"The {FORMAT_LABELS[fmt]} export has several {what}s {list(options)}; pick one "
            f"with {param}.",
            param=param,
        )
    return options[0]


#: Platform booleans, stripped and lower-cased, that mean true.
TRUE_TEXTS = frozenset(("true", "1", "on", "yes"))


def is_true(column: pd.Series) -> pd.Series:
    """Platform booleans (``true``, ``TRUE``, ``1``, ``on``) as a bool mask; missing is false."""
    return column.fillna("").astype(str).str.strip().str.lower().isin(TRUE_TEXTS)


def build(
    frame: pd.DataFrame,
    gold: pd.Series | None,
    fmt: str,
    notes: list[str],
    path: str,
    kwargs: dict[str, Any],
) -> Imported:
    """Code the long ``task, worker, answer`` frame, with the reader's ``notes`` first, and keep
    the golden tasks that have answers."""
    label = FORMAT_LABELS[fmt]
    if frame.shape[0] == 0:
        why = f" ({'; '.join(notes)})" if notes else ""
        raise ValidationError(f"The {label} export {path!r} has no usable answers{why}.")
    kwargs = dict(kwargs)
    if gold is not None and len(gold):
        answered = pd.Index(frame["task"].unique())
        lost = ~gold.index.isin(answered)
        if lost.any():
            notes.append(f"left out {int(lost.sum())} golden task(s) that have no usable answers")
            gold = gold[~lost]
        # The truth domain includes golden labels nobody gave, so that fit(gold=...) accepts
        # them; numbers stay numbers.
        if kwargs.get("kind", "auto") != "numeric" and kwargs.get("labels") is None:
            labels = pd.Index(frame["answer"].unique()).union(pd.Index(gold.unique()))
            kwargs["labels"] = list(labels)
            kwargs.setdefault("kind", "categorical")
    if gold is not None and not len(gold):
        gold = None
    answers = Answers.from_frame(frame, **kwargs)
    if notes:
        answers = dataclasses.replace(answers, notes=(*notes, *answers.notes))
    if gold is not None and answers.kind == "numeric":
        gold = pd.to_numeric(gold, errors="coerce").dropna()
    if gold is not None:
        gold = gold.rename("truth").rename_axis("task")
    return Imported(answers=answers, gold=gold, format=fmt)


def drop_rows(
    frame: pd.DataFrame, mask: pd.Series, notes: list[str], why: str, param: str | None = None
) -> pd.DataFrame:
    """Leave out the rows of ``mask``, saying how many and why (and ``param``, the parameter
    that would keep them), so that nothing goes silently."""
    n = int(mask.sum())
    if n:
        notes.append(Note(f"left out {n} row(s) {why}", param))
        return frame[~mask.to_numpy()]
    return frame


def gold_from(tasks: pd.Series, values: pd.Series, fmt: str) -> pd.Series | None:
    """One known truth per task from (task, golden value) pairs; empty values are no gold, and
    a task given two different golden answers is an error rather than a guess."""
    keep = values.notna().to_numpy()
    if not keep.any():
        return None
    pairs = pd.DataFrame({"task": tasks[keep].to_numpy(), "truth": values[keep].to_numpy()})
    pairs = pairs.drop_duplicates()
    clash = pairs["task"].duplicated(keep=False)
    if clash.any():
        task = pairs["task"][clash].iloc[0]
        truths = pairs["truth"][pairs["task"] == task].tolist()
        raise ValidationError(
            f"The {FORMAT_LABELS[fmt]} export gives task {task!r} different golden answers "
            f"{truths}. Fix the control task, or give the fit's gold with one truth per task.",
            param="gold",
        )
    return pairs.set_index("task")["truth"]
