"""The one answer model: sparse (task, worker, answer) triples, integer-coded once on the way in.

Ids and labels of any type are factorised by hashing (``pandas.factorize``, O(n)) into dense
integer codes; every estimator works on those codes and maps back once on the way out.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from ._csv import read_csv
from ._files import refuse_spreadsheet
from ._repr import short_list
from .errors import NotNumericError, SchemaError, ValidationError

if TYPE_CHECKING:
    from .io import Imported

__all__ = ["Answers", "as_answers"]

Kind = Literal["categorical", "numeric"]
OnDuplicate = Literal["error", "first", "last", "majority", "mean"]
OnMissing = Literal["error", "drop"]
OnSingle = Literal["keep", "drop", "error"]

_DUPLICATE_POLICIES = ("error", "first", "last", "majority", "mean")
_MISSING_POLICIES = ("error", "drop")
_SINGLE_POLICIES = ("keep", "drop", "error")
_KINDS = ("auto", "categorical", "numeric")


def _check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValidationError(
            f"The '{name}' parameter must be one of {', '.join(map(repr, choices))}. Got {value!r}."
        )


def _small_int(n: int) -> type[np.signedinteger[Any]]:
    """The narrowest signed integer dtype that holds codes below ``n``; keeps 1e8 answers small."""
    if n <= np.iinfo(np.int8).max:
        return np.int8
    if n <= np.iinfo(np.int32).max:
        return np.int32
    return np.int64


def _code_dtype(n: int) -> type[np.signedinteger[Any]]:
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


@dataclass(frozen=True, eq=False)
class Answers:
    """Sparse crowd answers, integer-coded.

    Build one with :meth:`from_frame`, :meth:`from_csv`, :meth:`from_parquet` or
    :meth:`from_wide`; the constructor itself trusts its arguments.

    Attributes
    ----------
    task, worker : ndarray of int
        Per answer, the code of its task (into ``tasks``) and of its worker (into ``workers``).
    value : ndarray
        Per answer, the label code (into ``labels``) for categorical answers, or the float value.
    tasks, workers : pandas.Index
        The original ids, in order of first appearance.
    labels : pandas.Index or None
        The answer domain of categorical answers, sorted where the labels allow it.
    value_range : (float, float) or None
        The declared range of numeric answers.
    notes : tuple of str
        What the input policies did (rows dropped, duplicates merged), so nothing happens silently.
    """

    task: np.ndarray
    worker: np.ndarray
    value: np.ndarray
    tasks: pd.Index
    workers: pd.Index
    labels: pd.Index | None = None
    value_range: tuple[float, float] | None = None
    notes: tuple[str, ...] = field(default=())

    # ------------------------------------------------------------------ shape
    @property
    def kind(self) -> Kind:
        return "categorical" if self.labels is not None else "numeric"

    @property
    def is_categorical(self) -> bool:
        return self.labels is not None

    @property
    def n_answers(self) -> int:
        return int(self.task.shape[0])

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    @property
    def n_labels(self) -> int:
        if self.labels is None:
            raise ValidationError(
                "n_labels is defined for categorical answers only; these answers are numeric."
            )
        return len(self.labels)

    def task_counts(self) -> np.ndarray:
        """Number of answers per task code (computed once, read-only)."""
        return self._counts("task")

    def worker_counts(self) -> np.ndarray:
        """Number of answers per worker code (computed once, read-only)."""
        return self._counts("worker")

    def _counts(self, axis: str) -> np.ndarray:
        # Estimators ask for these several times per fit; the arrays never change, so cache them
        # in the instance dict (allowed on a frozen dataclass) and hand out read-only views.
        key = f"_{axis}_counts"
        cached = self.__dict__.get(key)
        if cached is None:
            codes = self.task if axis == "task" else self.worker
            cached = np.bincount(
                codes, minlength=self.n_tasks if axis == "task" else self.n_workers
            )
            cached.flags.writeable = False
            self.__dict__[key] = cached
        return cached

    def __len__(self) -> int:
        return self.n_answers

    def __repr__(self) -> str:
        domain = (
            f"labels={short_list(self.labels)}"
            if self.labels is not None
            else f"numeric, range={self.value_range}"
        )
        return (
            f"Answers({self.n_answers:,} answers, {self.n_tasks:,} tasks, "
            f"{self.n_workers:,} workers, {domain})"
        )

    def _repr_html_(self) -> str:
        """A short summary in a notebook: size, answer domain, answers per task and worker,
        and what the input policies did."""
        from html import escape

        from ._repr import html_table

        per_task, per_worker = self.task_counts(), self.worker_counts()
        rows = [
            ("answers", f"{self.n_answers:,}"),
            ("tasks", f"{self.n_tasks:,}"),
            ("workers", f"{self.n_workers:,}"),
            (
                "labels" if self.labels is not None else "numeric range",
                short_list(self.labels) if self.labels is not None else str(self.value_range),
            ),
        ]
        if self.n_answers:
            rows += [
                ("answers per task", f"{per_task.mean():.1f} (max {per_task.max():,})"),
                ("answers per worker", f"{per_worker.mean():.1f} (max {per_worker.max():,})"),
            ]
        rows += [("note", note) for note in self.notes]
        return html_table("Answers", [(k, escape(v)) for k, v in rows])

    # ------------------------------------------------------------------ out
    def answer_values(self) -> np.ndarray | pd.Index:
        """The answers in their original form (labels, or floats)."""
        if self.labels is None:
            return self.value
        return self.labels.take(self.value)

    def to_frame(self) -> pd.DataFrame:
        """The long table ``task, worker, answer`` with the original ids and labels."""
        return pd.DataFrame(
            {
                "task": self.tasks.take(self.task),
                "worker": self.workers.take(self.worker),
                "answer": self.answer_values(),
            }
        )

    def to_wide(self) -> pd.DataFrame:
        """A task x worker matrix (missing answers are NA). Dense: for small data only."""
        frame = self.to_frame()
        return frame.pivot(index="task", columns="worker", values="answer").reindex(
            index=self.tasks, columns=self.workers
        )

    def to_csv(self, path: str) -> None:
        """Write the long table; text that a spreadsheet would run as a formula (``=x``) is
        written ``'=x``, and :meth:`from_csv` reads it back as ``=x`` (docs/formats.md)."""
        from ._csv import to_csv

        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(to_csv(self.to_frame(), index=False))

    def to_parquet(self, path: str) -> None:
        """Write the long table as Parquet (needs ``pip install 'privtd[parquet]'``)."""
        self.to_frame().to_parquet(path, index=False)

    # ------------------------------------------------------------------ in
    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        *,
        task: str = "task",
        worker: str = "worker",
        answer: str = "answer",
        kind: Literal["auto", "categorical", "numeric"] = "auto",
        labels: Sequence[Hashable] | None = None,
        value_range: tuple[float, float] | None = None,
        on_duplicate: OnDuplicate = "error",
        on_missing: OnMissing = "error",
        single_task: OnSingle = "keep",
        single_worker: OnSingle = "keep",
    ) -> Answers:
        """Code a long table of answers.

        Parameters
        ----------
        frame : DataFrame
            One row per answer. Columns are named by ``task``, ``worker`` and ``answer``; when the
            answer column is absent, crowd-kit's ``label`` is accepted in its place.
        kind : {"auto", "categorical", "numeric"}
            "auto" treats float columns as numeric and everything else (int, bool, str, category)
            as categorical. Pass it explicitly for integer-valued numeric answers.
        labels : sequence, optional
            The declared answer domain (categorical). Answers outside it are an error; labels in
            it that nobody gave are kept, so estimators can still predict them.
        value_range : (low, high), optional
            The declared range of numeric answers; values outside it are an error.
        on_duplicate : {"error", "first", "last", "majority", "mean"}
            What to do with several answers by one worker to one task. "majority" (categorical)
            keeps the most frequent label, ties going to the smallest label; "mean" (numeric)
            keeps their mean. Default "error".
        on_missing : {"error", "drop"}
            What to do with rows whose task, worker or answer is missing (NaN, None, NA).
        single_task, single_worker : {"keep", "drop", "error"}
            What to do with tasks (workers) that have exactly one answer after the steps above.
            Tasks are handled before workers. Default "keep".

        Notes
        -----
        Every row dropped or merged is counted in ``notes``.
        """
        _check_choice("kind", kind, _KINDS)
        _check_choice("on_duplicate", on_duplicate, _DUPLICATE_POLICIES)
        _check_choice("on_missing", on_missing, _MISSING_POLICIES)
        _check_choice("single_task", single_task, _SINGLE_POLICIES)
        _check_choice("single_worker", single_worker, _SINGLE_POLICIES)
        if not isinstance(frame, pd.DataFrame):
            raise ValidationError(
                "Answers must be a pandas DataFrame with columns task, worker, answer. "
                f"Got {type(frame).__name__}."
            )
        if answer not in frame.columns and answer == "answer" and "label" in frame.columns:
            answer = "label"
        wanted = [task, worker, answer]
        missing = [c for c in wanted if c not in frame.columns]
        if missing:
            raise SchemaError(
                f"The answers table lacks column(s) {missing}: expected {wanted}, "
                f"found {list(map(str, frame.columns))}. Rename the columns or map them "
                "(task=..., worker=..., answer=...)."
            )
        if len(set(wanted)) < 3:
            raise SchemaError(f"The task, worker and answer columns must differ. Got {wanted}.")
        if frame.shape[0] == 0:
            raise ValidationError(
                "The answers table is empty (0 rows). Pass at least one (task, worker, answer) row."
            )
        notes: list[str] = []
        t_col, w_col, a_col = frame[task], frame[worker], frame[answer]

        # ---- missing values
        na = t_col.isna().to_numpy() | w_col.isna().to_numpy() | a_col.isna().to_numpy()
        if na.any():
            first = int(np.flatnonzero(na)[0])
            where = [
                c
                for c, col in zip(wanted, (t_col, w_col, a_col), strict=True)
                if bool(col.isna().iloc[first])
            ]
            if on_missing == "error":
                raise ValidationError(
                    f"{int(na.sum())} row(s) have a missing task, worker or answer (first: row "
                    f"{first}, missing {where}). Fill them, or pass on_missing='drop'.",
                    param="on_missing",
                )
            keep = ~na
            if not keep.any():
                raise ValidationError(
                    f"All {na.size} rows have a missing task, worker or answer; nothing is left."
                )
            notes.append(f"dropped {int(na.sum())} row(s) with a missing task, worker or answer")
            t_col, w_col, a_col = t_col[keep], w_col[keep], a_col[keep]

        # A CSV reader keeps integers with blank cells as nullable integers (privtd._csv); with
        # the blanks gone they are the plain integers a column without blanks gives.
        if isinstance(a_col.dtype, pd.api.extensions.ExtensionDtype) and (
            pd.api.types.is_integer_dtype(a_col.dtype) and not a_col.isna().any()
        ):
            a_col = a_col.astype(np.int64)

        # ---- kind and values
        numeric = _resolve_kind(kind, a_col, labels)
        if numeric:
            value, label_index, value_range = _code_numeric(a_col, value_range, answer)
        else:
            if value_range is not None:
                raise ValidationError(
                    "value_range applies to numeric answers; these are categorical. "
                    "Drop value_range or pass kind='numeric'."
                )
            value, label_index = _code_labels(a_col, labels)

        t_codes, tasks = pd.factorize(t_col, sort=False)
        w_codes, workers = pd.factorize(w_col, sort=False)
        t_codes = t_codes.astype(_code_dtype(len(tasks)), copy=False)
        w_codes = w_codes.astype(_code_dtype(len(workers)), copy=False)

        t_codes, w_codes, value, dup_note = _resolve_duplicates(
            t_codes, w_codes, value, len(workers), label_index, on_duplicate, tasks, workers
        )
        if dup_note:
            notes.append(dup_note)

        result = cls(
            task=t_codes,
            worker=w_codes,
            value=value,
            tasks=pd.Index(tasks, name="task"),
            workers=pd.Index(workers, name="worker"),
            labels=label_index,
            value_range=value_range,
            notes=tuple(notes),
        )
        result = result._apply_single_policy("task", single_task)
        result = result._apply_single_policy("worker", single_worker)
        return result

    @classmethod
    def from_csv(cls, path: str, *, delimiter: str = ",", **kwargs: Any) -> Answers:
        """Read a long CSV (``task,worker,answer``); ids are read as strings, answers as parsed
        (by pyarrow's multi-threaded reader when pyarrow is installed, with pandas' types).
        ``delimiter="\\t"`` reads a TSV."""
        frame = _read_table(path, "csv", kwargs, delimiter)
        return cls.from_frame(frame, **kwargs)

    @classmethod
    def from_parquet(cls, path: str, **kwargs: Any) -> Answers:
        """Read a long Parquet file (needs ``pip install 'privtd[parquet]'``)."""
        frame = _read_table(path, "parquet", kwargs)
        return cls.from_frame(frame, **kwargs)

    @classmethod
    def from_path(cls, path: str, *, delimiter: str = ",", **kwargs: Any) -> Answers:
        """Read CSV (cells separated by ``delimiter``) or Parquet, chosen by the file extension.
        For platform exports and a delimiter guessed from the file, see :func:`privtd.io.read`."""
        fmt = "parquet" if str(path).lower().endswith((".parquet", ".pq")) else "csv"
        return cls.from_frame(_read_table(path, fmt, kwargs, delimiter), **kwargs)

    # Platform exports are converted at the edge, in privtd.io; these are its shortcuts.
    @classmethod
    def from_toloka(cls, path: str, **kwargs: Any) -> Imported:
        """Read a Toloka results TSV (docs/formats.md#toloka); see :func:`privtd.io.read_toloka`.
        Returns an :class:`~privtd.io.Imported`: ``.answers`` and the golden tasks as ``.gold``."""
        from .io import read_toloka

        return read_toloka(path, **kwargs)

    @classmethod
    def from_mturk(cls, path: str, answer: str | None = None, **kwargs: Any) -> Imported:
        """Read an Amazon Mechanical Turk batch results CSV
        (docs/formats.md#amazon-mechanical-turk); ``answer`` names the ``Answer.*`` field when
        there are several. See :func:`privtd.io.read_mturk`."""
        from .io import read_mturk

        return read_mturk(path, answer=answer, **kwargs)

    @classmethod
    def from_label_studio(cls, path: str, **kwargs: Any) -> Imported:
        """Read a Label Studio JSON export (docs/formats.md#label-studio); ground-truth
        annotations become ``.gold``. See :func:`privtd.io.read_label_studio`."""
        from .io import read_label_studio

        return read_label_studio(path, **kwargs)

    @classmethod
    def from_appen(cls, path: str, question: str | None = None, **kwargs: Any) -> Imported:
        """Read an Appen / Figure Eight full report (docs/formats.md#appen--figure-eight);
        ``question`` names the answer column when there are several. See
        :func:`privtd.io.read_appen`."""
        from .io import read_appen

        return read_appen(path, question=question, **kwargs)

    @classmethod
    def from_wide(cls, matrix: pd.DataFrame, **kwargs: Any) -> Answers:
        """Code a task x worker matrix: rows are tasks, columns workers, NA cells unanswered."""
        if not isinstance(matrix, pd.DataFrame):
            raise ValidationError(
                f"A wide matrix must be a pandas DataFrame (tasks x workers). "
                f"Got {type(matrix).__name__}."
            )
        if matrix.columns.has_duplicates:
            dup = matrix.columns[matrix.columns.duplicated()][0]
            raise SchemaError(
                f"The wide matrix names worker {dup!r} in more than one column; merge them first."
            )
        if matrix.index.has_duplicates:
            dup = matrix.index[matrix.index.duplicated()][0]
            raise SchemaError(
                f"The wide matrix names task {dup!r} in more than one row; merge them first."
            )
        matrix = matrix.copy()
        matrix.index = matrix.index.rename("task")
        matrix.columns = matrix.columns.rename("worker")
        stacked: pd.Series = matrix.stack(future_stack=True).dropna()  # type: ignore[assignment]
        long = stacked.rename("answer").reset_index()
        return cls.from_frame(long, **kwargs)

    # ------------------------------------------------------------------ transforms
    def subset(self, mask: np.ndarray, note: str | None = None) -> Answers:
        """Keep the answers where ``mask`` is true; tasks and workers left without answers go."""
        t_keep = np.bincount(self.task[mask], minlength=self.n_tasks) > 0
        w_keep = np.bincount(self.worker[mask], minlength=self.n_workers) > 0
        t_map = np.cumsum(t_keep) - 1
        w_map = np.cumsum(w_keep) - 1
        notes = self.notes + ((note,) if note else ())
        return Answers(
            task=t_map[self.task[mask]].astype(self.task.dtype),
            worker=w_map[self.worker[mask]].astype(self.worker.dtype),
            value=self.value[mask],
            tasks=self.tasks[t_keep],
            workers=self.workers[w_keep],
            labels=self.labels,
            value_range=self.value_range,
            notes=notes,
        )

    def with_values(self, value: np.ndarray) -> Answers:
        """The same (task, worker) pairs with new answer codes or values (after perturbation)."""
        if value.shape != self.value.shape:
            raise ValidationError(
                f"with_values needs one value per answer ({self.n_answers}). Got {value.shape}."
            )
        return Answers(
            self.task,
            self.worker,
            value,
            self.tasks,
            self.workers,
            self.labels,
            self.value_range,
            self.notes,
        )

    def _apply_single_policy(self, axis: Literal["task", "worker"], policy: OnSingle) -> Answers:
        if policy == "keep":
            return self
        codes = self.task if axis == "task" else self.worker
        index = self.tasks if axis == "task" else self.workers
        counts = np.bincount(codes, minlength=len(index))
        single = counts == 1
        if not single.any():
            return self
        if policy == "error":
            raise ValidationError(
                f"{int(single.sum())} {axis}(s) have exactly one answer (first: "
                f"{index[int(np.flatnonzero(single)[0])]!r}). Pass single_{axis}='keep' or "
                "'drop'.",
                param=f"single_{axis}",
            )
        keep = ~single[codes]
        if not keep.any():
            raise ValidationError(
                f"Every {axis} has exactly one answer, so single_{axis}='drop' leaves nothing. "
                f"Use single_{axis}='keep'.",
                param=f"single_{axis}",
            )
        return self.subset(keep, f"dropped {int(single.sum())} {axis}(s) with a single answer")

    # ------------------------------------------------------------------ helpers for estimators
    def encode_tasks(self, ids: Sequence[Hashable] | pd.Index, what: str = "gold") -> np.ndarray:
        """Codes of the given task ids; an id not in these answers is an error."""
        idx = pd.Index(ids)
        codes = self.tasks.get_indexer(idx)
        if (codes < 0).any():
            bad = idx[codes < 0][:3].tolist()
            raise ValidationError(
                f"{what} names {int((codes < 0).sum())} task(s) with no answers, e.g. {bad}. "
                "Pass only tasks that appear in the answers."
            )
        return codes

    def encode_labels(
        self, values: Sequence[Hashable] | pd.Index, what: str = "gold"
    ) -> np.ndarray:
        """Codes of the given labels; a label outside the answer domain is an error."""
        if self.labels is None:
            raise ValidationError(f"{what} labels apply to categorical answers only.")
        idx = pd.Index(values)
        codes = self.labels.get_indexer(idx)
        if (codes < 0).any():
            bad = idx[codes < 0][:3].tolist()
            raise ValidationError(
                f"{what} has label(s) {bad} outside the answer domain {list(self.labels)}. "
                "Declare them with labels=... or fix the values."
            )
        return codes


# ---------------------------------------------------------------------- internals
def _read_table(path: str, fmt: str, kwargs: dict[str, Any], delimiter: str = ",") -> pd.DataFrame:
    refuse_spreadsheet(path)
    try:
        if fmt == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ValidationError(
                    "Reading Parquet needs pyarrow: pip install 'privtd[parquet]'."
                ) from exc
            return pd.read_parquet(path)
        # Ids stay strings ("007" is not 7); answers are parsed unless the caller says otherwise.
        return read_csv(
            path, [kwargs.get("task", "task"), kwargs.get("worker", "worker")], delimiter
        )
    except FileNotFoundError as exc:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from exc
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationError(f"Cannot parse {path!r} as {fmt}: {first}.") from exc


def _resolve_kind(kind: str, col: pd.Series, labels: Sequence[Hashable] | None) -> bool:
    """True when the answers are numeric."""
    if kind == "numeric":
        if labels is not None:
            raise ValidationError(
                "labels applies to categorical answers; drop it for kind='numeric'."
            )
        return True
    if kind == "categorical" or labels is not None:
        return False
    return bool(pd.api.types.is_float_dtype(col.dtype))


def _is_number(value: Any) -> bool:
    """A number, or text that spells one (``"3"``, ``" 2.5 "``)."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, float, np.number)):
        return True
    if isinstance(value, str):
        try:
            float(value.strip())
        except ValueError:
            return False
        return bool(value.strip()) and value.strip().lower() not in ("nan", "inf", "-inf")
    return False


def mixed_example(values: Sequence[Any] | pd.Index) -> tuple[Any, Any] | None:
    """A number and a word among ``values`` (the distinct labels of a column, few), or None
    when they are not mixed: a column of scores with a stray ``"n/a"`` or ``"yes"`` in it
    reads as text labels, the numbers among them too."""
    number = word = None
    for value in values:
        if _is_number(value):
            number = value if number is None else number
        elif isinstance(value, str):
            word = value if word is None else word
        if number is not None and word is not None:
            return number, word
    return None


def _code_numeric(
    col: pd.Series, value_range: tuple[float, float] | None, name: str
) -> tuple[np.ndarray, None, tuple[float, float] | None]:
    try:
        value = pd.to_numeric(col, errors="raise").to_numpy(dtype=np.float64)
    except (ValueError, TypeError) as exc:
        parsed = pd.to_numeric(col, errors="coerce")
        bad = col[parsed.isna()].iloc[:3].tolist()
        numbers = col[parsed.notna()]
        mixed = (
            f"Column {name!r} mixes numbers and words (e.g. {numbers.iloc[0]!r} and {bad[0]!r}): "
            if len(numbers) and bad
            else ""
        )
        raise NotNumericError(
            f"{mixed}Numeric answers expected in column {name!r}, found non-numbers such as {bad}",
            "Fix them, or pass kind='categorical'.",
        ) from exc
    if not np.isfinite(value).all():
        row = int(np.flatnonzero(~np.isfinite(value))[0])
        raise ValidationError(
            f"Answer {value[row]} at row {row} is not finite. Remove infinite answers."
        )
    if value_range is not None:
        try:
            low, high = (float(v) for v in value_range)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"value_range must be (low, high) numbers. Got {value_range!r}."
            ) from exc
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise ValidationError(
                f"value_range must satisfy low < high, both finite. Got {value_range!r}."
            )
        out = (value < low) | (value > high)
        if out.any():
            row = int(np.flatnonzero(out)[0])
            raise ValidationError(
                f"{int(out.sum())} answer(s) fall outside the declared range [{low}, {high}] "
                f"(first: {value[row]} at row {row}). Fix them or widen value_range."
            )
        value_range = (low, high)
    return value, None, value_range


def _code_labels(col: pd.Series, labels: Sequence[Hashable] | None) -> tuple[np.ndarray, pd.Index]:
    codes, uniques = pd.factorize(col, sort=False)
    uniques = pd.Index(uniques)
    if labels is not None:
        domain = pd.Index(list(labels))
        if domain.has_duplicates:
            raise ValidationError(f"labels must be distinct. Got {list(labels)}.")
        remap = domain.get_indexer(uniques)
        if (remap < 0).any():
            bad = uniques[remap < 0][:5].tolist()
            raise ValidationError(
                f"Answer label(s) {bad} are not in the declared labels {list(domain)}. "
                "Add them to labels or fix the answers."
            )
    else:
        try:
            domain = uniques.sort_values()
        except TypeError:  # mixed, unorderable labels keep their order of appearance
            domain = uniques
        remap = domain.get_indexer(uniques)
    value = remap.astype(_small_int(len(domain)))[codes]
    return value, pd.Index(domain, name="label")


def _resolve_duplicates(
    t: np.ndarray,
    w: np.ndarray,
    value: np.ndarray,
    n_workers: int,
    labels: pd.Index | None,
    policy: str,
    tasks: pd.Index,
    workers: pd.Index,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str | None]:
    pair = t.astype(np.int64) * n_workers + w
    # Hash-based, O(n): the common case of no duplicates costs one pass.
    dup_any = pd.Series(pair).duplicated(keep=False).to_numpy()
    if not dup_any.any():
        return t, w, value, None
    first_dup = int(np.flatnonzero(dup_any)[0])
    n_extra = int(dup_any.sum() - pd.Series(pair[dup_any]).nunique())
    example = f"task {tasks[int(t[first_dup])]!r}, worker {workers[int(w[first_dup])]!r}"
    if policy == "error":
        raise ValidationError(
            f"{n_extra} answer(s) repeat a (task, worker) pair (first: {example}). Pass "
            "on_duplicate='first', 'last' or 'majority' (numeric: 'mean') to merge them.",
            param="on_duplicate",
        )
    if policy == "majority" and labels is None:
        raise ValidationError(
            "on_duplicate='majority' needs categorical answers; use 'mean' for numbers.",
            param="on_duplicate",
        )
    if policy == "mean" and labels is not None:
        raise ValidationError(
            "on_duplicate='mean' needs numeric answers; use 'majority' for labels.",
            param="on_duplicate",
        )
    if policy in ("first", "last"):
        keep = ~pd.Series(pair).duplicated(keep="first" if policy == "first" else "last").to_numpy()
        note = f"kept the {policy} of repeated answers, dropping {n_extra} row(s)"
        return t[keep], w[keep], value[keep], note
    keep = ~pd.Series(pair).duplicated(keep="first").to_numpy()
    pair_codes, _ = pd.factorize(pair, sort=False)  # pair codes follow first appearance
    n_pairs = int(pair_codes.max()) + 1
    if policy == "majority":
        assert labels is not None
        k = len(labels)
        counts = np.bincount(pair_codes.astype(np.int64) * k + value, minlength=n_pairs * k)
        merged = counts.reshape(n_pairs, k).argmax(axis=1).astype(value.dtype)
        note = (
            f"merged {n_extra} repeated answer(s) by per-pair majority (ties to the smallest label)"
        )
    else:
        sums = np.bincount(pair_codes, weights=value, minlength=n_pairs)
        merged = sums / np.bincount(pair_codes, minlength=n_pairs)
        note = f"merged {n_extra} repeated answer(s) by their per-pair mean"
    return t[keep], w[keep], merged[pair_codes[keep]], note


def as_answers(data: Answers | pd.DataFrame, **kwargs: Any) -> Answers:
    """Accept an :class:`Answers` or a long DataFrame (coded with ``kwargs``)."""
    if isinstance(data, Answers):
        return data
    if isinstance(data, pd.DataFrame):
        return Answers.from_frame(data, **kwargs)
    raise ValidationError(
        "Answers must be a privtd.Answers or a pandas DataFrame with columns task, worker, answer. "
        f"Got {type(data).__name__}."
    )
