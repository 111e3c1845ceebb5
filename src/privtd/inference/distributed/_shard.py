"""What runs on a Dask worker: a shard of answers and each estimator's per-shard pass.

A shard holds every answer of its tasks (the answers are partitioned by task), so everything
per task (posteriors, truths, medians) is computed here exactly as the in-memory fit computes
it, by the same kernels; only per-worker sums leave the shard. Task codes are local to the
shard; worker and label codes are global, fixed once at ingest.

Each pass is a plain function ``(shard, previous, params) -> (state, stats)``: ``state`` (the
shard's per-task arrays) stays on the worker as the input of the next pass, ``stats`` (arrays
of size ``n_workers`` or ``n_workers * K * K``) go to the client. Passes never change their
inputs, so Dask can recompute any of them from its lineage.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import numpy as np
import pandas as pd

from ...answers import _code_dtype, _code_numeric
from ...errors import SchemaError, ValidationError
from .. import _kernels
from .._em import Largest
from .._em import results as state_results
from .._ops import (
    SortedByTask,
    shares,
    task_mean,
    vote_matrix,
)

Piece = dict[str, Any]
#: Per file: its workers' global codes, its labels' global codes (or values), its first row.
FileMaps = tuple[np.ndarray, np.ndarray | None, np.int64]


# ---------------------------------------------------------------------- ingest, per file
def read_file(path: str, fmt: str, columns: tuple[str, str, str]) -> pd.DataFrame:
    """One file as a table of the three columns (ids read as strings from CSV, as
    :meth:`privtd.Answers.from_csv` reads them)."""
    from ...answers import _read_table

    task, worker, answer = columns
    try:
        frame = _read_table(path, fmt, {"task": task, "worker": worker})
    except PermissionError as exc:
        raise ValidationError(
            f"Cannot read {path!r}: {exc.strerror}. Check its permissions."
        ) from None
    except OSError as exc:
        raise ValidationError(f"Cannot read {path!r} as {fmt}: {exc}. Check the file.") from None
    except (TypeError, ValueError) as exc:  # pyarrow's errors on a file that is not Parquet
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError(f"Cannot read {path!r} as {fmt}: {exc}. Check the file.") from None
    if answer not in frame.columns and answer == "answer" and "label" in frame.columns:
        answer = "label"
    wanted = [task, worker, answer]
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"{path!r} lacks column(s) {missing}: expected {wanted}, found "
            f"{list(map(str, frame.columns))}. Rename the columns or map them (task=, worker=, "
            "answer=).",
            param=("task", "worker", "answer"),
        )
    out = frame[wanted]
    out.columns = pd.Index(["task", "worker", "answer"])
    return out


def read_split(
    path: str, fmt: str, columns: tuple[str, str, str], kind: str, n_parts: int
) -> tuple[dict[str, Any], list[Piece]]:
    """One file, read once: its summary (:func:`summarise`: what the client codes every file
    by), and its rows split by task into one piece per partition (:func:`split`), coded
    against the file's own worker ids and labels. The client sends each file's map from its
    codes to the global ones, and :func:`build_shard` applies it."""
    frame = read_file(path, fmt, columns)
    summary, local = summarise(frame, kind)
    return summary, split(frame, local, n_parts)


def summary_of(read: tuple[dict[str, Any], list[Piece]]) -> dict[str, Any]:
    return read[0]


def pick(read: tuple[dict[str, Any], list[Piece]], p: int) -> Piece:
    """Piece ``p`` of a file, as its own arrays: sharing the file's would keep them all in
    memory after Dask spills or frees the file's result, while Dask counts them as gone (at
    1e9 answers the workers then stay paused over memory they cannot free)."""
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in read[1][p].items()}


def _missing(frame: pd.DataFrame) -> np.ndarray:
    """Rows with a missing cell. Plain numpy integer and boolean columns cannot hold one, so
    only the other columns are scanned."""
    na = np.zeros(len(frame), dtype=bool)
    for name in frame.columns:
        col = frame[name]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":
            continue
        na |= col.isna().to_numpy()
    return na


def task_partition(tasks: pd.Series, n_parts: int) -> np.ndarray:
    """The partition of each task id: a hash of the id, so that a task's answers go to one
    partition whatever file they are in. Integer ids (one id type in every file, checked at
    ingest) take a multiplicative (Fibonacci) hash, several times faster than pandas' hash on
    1e7 ids; other ids take ``pandas.util.hash_pandas_object``."""
    if isinstance(tasks.dtype, np.dtype) and tasks.dtype.kind in "iu":
        key = tasks.to_numpy().astype(np.int64, copy=False).view(np.uint64)
        mixed = (key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
        return mixed % np.uint64(n_parts)
    return pd.util.hash_pandas_object(tasks, index=False).to_numpy() % np.uint64(n_parts)


def summarise(frame: pd.DataFrame, kind: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """What the client needs to code every file the same way: row and missing counts, the
    worker ids and labels in order of first appearance (rows with a missing cell left out, as
    :meth:`privtd.Answers.from_frame` leaves them out before it codes); and, per kept row, its
    codes against those (``worker``, and ``value`` where the answers are labels)."""
    na = _missing(frame)
    kept = frame[~na] if na.any() else frame
    answer = kept["answer"]
    want_labels = kind == "categorical" or (kind == "auto" and not _is_float(answer))
    # factorize's uniques are in order of first appearance, as pd.unique's.
    w_codes, workers = _factorize(kept["worker"])
    local = {"keep": ~na, "worker": w_codes}
    labels = None
    if want_labels:
        local["value"], labels = _factorize(answer)
    summary = {
        "n_rows": len(frame),
        "n_missing": int(na.sum()),
        "first_missing": int(np.flatnonzero(na)[0]) if na.any() else -1,
        "workers": workers,
        "labels": labels,
        "id_types": (_id_type(kept["task"]), _id_type(kept["worker"])),
        "is_float": _is_float(answer),
        "is_numeric": bool(pd.api.types.is_numeric_dtype(answer.dtype))
        and not pd.api.types.is_bool_dtype(answer.dtype),
    }
    return summary, local


def _factorize(col: pd.Series) -> tuple[np.ndarray, Any]:
    """``pandas.factorize(col, sort=False)``: codes, and the values in order of first
    appearance. Small non-negative integers of 32 or 64 bits (worker ids) go by a table
    indexed by the value, two to three times faster than pandas' hash table (which is the
    faster for 8- and 16-bit ones)."""
    values = col.to_numpy()
    if (
        values.dtype.kind in "iu"
        and values.dtype.itemsize >= 4
        and values.size
        and values.min() >= 0
    ):
        high, n = int(values.max()), values.size
        if high < max(1 << 16, 4 * n):
            first = np.full(high + 1, n, dtype=np.int64)
            np.minimum.at(first, values, np.arange(n))
            present = np.flatnonzero(first < n)
            uniques = present[np.argsort(first[present], kind="stable")]
            table = np.empty(high + 1, dtype=np.intp)
            table[uniques] = np.arange(uniques.size)
            return table[values], pd.Index(uniques.astype(values.dtype))
    return pd.factorize(col, sort=False)


def _id_type(col: pd.Series) -> str:
    """What an id column holds: 'integer', 'float', 'string', 'boolean' or another of
    :func:`pandas.api.types.infer_dtype`'s names (objects are scanned, typed columns not)."""
    if pd.api.types.is_bool_dtype(col.dtype):
        return "boolean"
    if pd.api.types.is_integer_dtype(col.dtype):
        return "integer"
    if pd.api.types.is_float_dtype(col.dtype):
        return "float"
    return str(pd.api.types.infer_dtype(col, skipna=True))


def _is_float(col: pd.Series) -> bool:
    return bool(pd.api.types.is_float_dtype(col.dtype))


def split(frame: pd.DataFrame, local: dict[str, np.ndarray], n_parts: int) -> list[Piece]:
    """One file's kept rows split by task into one piece per partition: a task's hash picks
    its partition, so each task lands whole in one shard whatever file its answers come from.
    Workers and labels keep the file's own codes (``local``; numeric answers stay as read),
    task ids stay raw: a shard codes them. Rows are numbered in the file (``row``, int32
    where they fit)."""
    keep = local["keep"]
    rows = np.flatnonzero(keep)
    kept = frame.take(rows) if rows.size < len(frame) else frame
    part = task_partition(kept["task"], n_parts)
    rows = rows.astype(_code_dtype(len(keep)))
    w_codes = local["worker"].astype(_code_dtype(int(local["worker"].max(initial=0)) + 1))
    value = local.get("value")
    if value is None:
        value, _, _ = _code_numeric(kept["answer"], None, "answer")
    else:
        value = value.astype(_code_dtype(int(value.max(initial=0)) + 1))
    # Partition numbers in 8 or 16 bits sort by radix (numpy's stable sort of small integers),
    # several times faster than the same stable order of 64-bit ones.
    if n_parts <= 1 << 16:
        part = part.astype(np.uint8 if n_parts <= 1 << 8 else np.uint16)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
    ids = kept["task"].to_numpy()
    extra: Piece = {}
    if ids.dtype == np.int64 and ids.size and ids.min() >= -(2**31) and ids.max() < 2**31:
        # Half the bytes to move between workers and spill; the shard gives them back as read.
        ids, extra = ids.astype(np.int32), {"task_dtype": ids.dtype}
    pieces = []
    for p in range(n_parts):
        sel = order[bounds[p] : bounds[p + 1]]
        pieces.append(
            {
                "task": ids[sel],
                "worker": w_codes[sel],
                "value": value[sel],
                "row": rows[sel],
                **extra,
            }
        )
    return pieces


def recode(piece: Piece, maps: FileMaps) -> Piece:
    """A piece's file codes as the global ones: ``maps`` holds, for the piece's file, each of
    its workers' global code; where the file read its answers as labels, each label's global
    code, or its value where the answers are numbers (integers in one file beside floats in
    another); and the file's first global row (``offset``)."""
    w_map, v_map, offset = maps
    value = piece["value"] if v_map is None else v_map[piece["value"]]
    return {**piece, "worker": w_map[piece["worker"]], "value": value, "offset": offset}


def const(value: Any) -> Any:
    """A value put on the cluster as a task rather than scattered: the scheduler keeps it in
    the task's definition, so Dask can recompute it (and what depends on it) when the worker
    holding it dies, which it cannot do for scattered data."""
    return value


# ---------------------------------------------------------------------- the shard
class Shard:
    """Every answer of some tasks, sorted by task (stably, so each task's answers keep their
    input order and per-task sums are bit-for-bit the in-memory ones), in a lean layout: what
    a shard keeps between passes is about 5 bytes per answer (a worker code and a label code)
    and a few per task (its slice, its id and its first row), so that 1e9 answers fit a
    small cluster's memory. The per-answer task codes are rebuilt for the passes that need
    them (``task``), never kept.

    Attributes
    ----------
    start : each local task's slice ``start[q]:start[q + 1]`` of the answers (a CSR pointer)
    worker, value : global worker and label codes (or floats), sorted by task
    task_ids : the original ids of the local tasks; first_row : each task's first global row
    n_workers, n_labels : the global sizes (``n_labels`` is None for numeric answers)
    """

    def __init__(self, pieces: list[Piece], n_workers: int, n_labels: int | None) -> None:
        order, counts, uniques = _group_by_task(pieces)
        self.n_tasks = len(uniques)
        n = int(order.shape[0])
        self.start = np.zeros(self.n_tasks + 1, dtype=_code_dtype(n))
        self.start[1:] = np.cumsum(counts)
        self.worker = np.concatenate([p["worker"] for p in pieces])[order]
        self.value = np.concatenate([p["value"] for p in pieces])[order]
        row = np.concatenate([p["row"].astype(np.int64) + p["offset"] for p in pieces])[order]
        first_row = row[self.start[:-1]]
        self.first_row = first_row.astype(_code_dtype(int(first_row.max(initial=0)) + 1))
        self.repeated = _repeated_pair(self.task, self.worker, n_workers, row)
        del order, row
        # Integer ids that fit 32 bits are kept as such (half the bytes of int64) and given
        # back in their own dtype.
        self._ids: Any = uniques
        self._ids_dtype = getattr(uniques, "dtype", None)
        narrowed = [p["task_dtype"] for p in pieces if "task_dtype" in p]
        if narrowed:  # ids a file held as int64, moved as int32 (split)
            self._ids_dtype = np.result_type(self._ids_dtype, *narrowed)
        if (
            isinstance(uniques, np.ndarray)
            and uniques.dtype.kind in "iu"
            and uniques.dtype.itemsize > 4
            and (uniques.size == 0 or (uniques.min() >= -(2**31) and uniques.max() < 2**31))
        ):
            self._ids = uniques.astype(np.int32)
        self.n_workers = n_workers
        self.n_labels = n_labels
        # Gold truths (set by with_gold): label codes, -1 where none (the kernels' encoding),
        # and for numeric answers the values, NaN where none. None: no gold (no array kept).
        self.gold: np.ndarray | None = None
        self.gold_value: np.ndarray | None = None
        self._sorted: SortedByTask | None = None

    @property
    def task_ids(self) -> pd.Index:
        ids = self._ids
        if self._ids_dtype is not None and ids.dtype != self._ids_dtype:
            ids = ids.astype(self._ids_dtype)
        return pd.Index(ids, name="task")

    @property
    def n_answers(self) -> int:
        return int(self.start[-1])

    @property
    def task(self) -> np.ndarray:
        """The local task code of each answer, rebuilt from ``start`` (a pass's temporary)."""
        n_t = self.n_tasks
        return np.repeat(np.arange(n_t, dtype=_code_dtype(n_t)), np.diff(self.start))

    @property
    def layout(self) -> _kernels.TaskLayout:
        """What the fused kernels read. The compiled ones walk ``start`` and never read the
        per-answer task codes, so those are built only for a backend that reads them."""
        task = self.task if _kernels.current_backend().reads_task_codes else _NO_TASK
        return cast(_kernels.TaskLayout, _Layout(task, self.start, self.worker, self.value))

    @property
    def sorted_task(self) -> np.ndarray:
        """The task codes in the order of the answers (already sorted by task)."""
        return self.task

    def gold_values(self) -> np.ndarray | None:
        """Numeric gold truths per local task, NaN where none (None without gold)."""
        return self.gold_value

    def fix_rows(self, proba: np.ndarray) -> np.ndarray:
        """``proba`` (a row per local task) with the gold tasks' rows one-hot."""
        return _fix_rows(self, proba)

    def value_floats(self) -> np.ndarray:
        """The answers as float64, a pass's temporary (a shard keeps its lean codes only)."""
        return self.value.astype(np.float64)

    def fix_values(self, truth: np.ndarray) -> np.ndarray:
        """Numeric ``truth`` with the gold tasks' set to their values."""
        return _fix_values(self, truth)

    def fix_labels(self, truth: np.ndarray) -> np.ndarray:
        """``truth`` (one value per local task) with the gold tasks' set to their codes."""
        return _fix_labels(self, truth)

    def soft_start(self) -> np.ndarray:
        """The EM start of the Dawid-Skene family: label frequencies per task, gold rows
        one-hot."""
        k = int(self.n_labels or 0)
        return _fix_rows(self, shares(vote_matrix(self.task, self.value, self.n_tasks, k)))

    def gold_codes(self) -> np.ndarray:
        """The gold label codes per task, -1 where none (a temporary when there is no gold)."""
        if self.gold is not None:
            return self.gold
        return np.full(self.n_tasks, -1, dtype=np.int64)

    @property
    def sorted(self) -> SortedByTask:
        """The answers sorted by (task, value), for medians; built on first use, then kept."""
        if self._sorted is None:
            self._sorted = SortedByTask(self.task, self.value, self.n_tasks)
        return self._sorted

    def wx(self) -> np.ndarray:
        """Row of each answer in the confusion table: ``worker * K + answer`` (as DawidSkene)."""
        k = int(self.n_labels or 0)
        wx = self.worker.astype(np.int64) * k + self.value
        return wx.astype(np.int32) if self.n_workers * k < 2**31 else wx


_NO_TASK = np.zeros(0, dtype=np.int32)


class _Layout(NamedTuple):
    """The fields of ``_kernels.TaskLayout`` the kernels read, over a shard's arrays."""

    task: np.ndarray
    start: np.ndarray
    worker: np.ndarray
    value: np.ndarray


def with_gold(shard: Shard, gold: tuple[pd.Index, np.ndarray]) -> tuple[Shard, int]:
    """A copy of the shard (sharing its arrays) with the gold truths of its own tasks, and how
    many of the given tasks it holds (the client checks that every one was found)."""
    import copy

    ids, values = gold
    out = copy.copy(shard)
    where = ids.get_indexer(shard.task_ids)  # per local task, its row in the gold, or -1
    has = where >= 0
    out.gold = np.full(shard.n_tasks, -1, dtype=np.int64)
    if shard.n_labels is not None:
        out.gold[has] = values[where[has]]
    else:
        out.gold[has] = 0  # marks the task; the value is in gold_value
        out.gold_value = np.full(shard.n_tasks, np.nan)
        out.gold_value[has] = values[where[has]]
    return out, int(has.sum())


def first(out: tuple[Any, Any]) -> Any:
    return out[0]


def _fix_labels(shard: Shard, truth: np.ndarray) -> np.ndarray:
    if shard.gold is not None:
        fixed = shard.gold >= 0
        truth[fixed] = shard.gold[fixed]
    return truth


def _fix_rows(shard: Shard, proba: np.ndarray) -> np.ndarray:
    if shard.gold is None:
        return proba
    fixed = shard.gold >= 0
    if fixed.any():
        proba[fixed] = np.eye(proba.shape[1])[shard.gold[fixed]]
    return proba


def _fix_values(shard: Shard, truth: np.ndarray) -> np.ndarray:
    if shard.gold is not None and shard.gold_value is not None:
        fixed = shard.gold >= 0
        truth[fixed] = shard.gold_value[fixed]
    return truth


def _group_by_task(pieces: list[Piece]) -> tuple[np.ndarray, np.ndarray, Any]:
    """The order that groups a shard's answers by task, the tasks in order of first appearance
    and each task's answers in their input order, with each task's answer count and the task
    ids in that order. Pieces come in file order and keep their rows' order, so that order of
    first appearance is the in-memory one restricted to this shard.

    Integer ids that each piece holds sorted (files written by task) are merged by a stable
    sort (timsort walks the pieces' runs), twice as fast as hashing them; other ids are
    hashed (``pandas.factorize``)."""
    ids = np.concatenate([p["task"] for p in pieces])
    n = ids.size
    if n and ids.dtype.kind in "iu" and all(_ascending(p["task"]) for p in pieces):
        by_id = np.argsort(ids, kind="stable")
        ordered = ids[by_id]
        bounds = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        group = np.concatenate(([0], bounds))  # each id's first place in by_id
        lengths = np.diff(np.append(group, n))
        # The ids by their first row: by_id is stable, so each group's first is its earliest.
        rank = np.argsort(by_id[group])
        counts = lengths[rank]
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        within = np.arange(n) - np.repeat(starts, counts)
        return by_id[np.repeat(group[rank], counts) + within], counts, ordered[group[rank]]
    codes, uniques = pd.factorize(ids, sort=False)
    return np.argsort(codes, kind="stable"), np.bincount(codes, minlength=len(uniques)), uniques


def _ascending(values: np.ndarray) -> bool:
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def build_shard(
    n_workers: int,
    n_labels: int | None,
    maps: list[FileMaps],
    *pieces: Piece,
) -> Shard:
    """A shard from its piece of every file (in file order), recoded with that file's maps."""
    return Shard([recode(pc, m) for pc, m in zip(pieces, maps, strict=True)], n_workers, n_labels)


def describe(shard: Shard) -> dict[str, Any]:
    """Sizes, per-worker answer counts and the first repeated (task, worker) pair, if any."""
    n_repeated, example = shard.repeated
    if example is not None:  # the task's id rather than its local code
        example = (shard.task_ids[example[0]], *example[1:])
    return {
        "n_answers": shard.n_answers,
        "n_tasks": shard.n_tasks,
        "worker_counts": np.bincount(shard.worker, minlength=shard.n_workers),
        "n_repeated": n_repeated,
        "example": example,
    }


def _repeated_pair(
    task: np.ndarray, worker: np.ndarray, n_workers: int, row: np.ndarray
) -> tuple[int, tuple[int, int, int, int] | None]:
    """How many answers repeat an earlier (task, worker) pair, and for the first one: its
    local task, its worker, and the global rows of both answers (to name their files). Found
    while the rows are at hand, so that the shard need not keep a row per answer."""
    pair = task.astype(np.int64) * n_workers + worker
    # The answers are sorted by task, so the pairs are nearly sorted: a stable sort (timsort,
    # which walks runs) finds the repeats an order of magnitude faster than a hash table, and
    # the hash is left to the rare data set that has one, to name the first.
    ordered = np.sort(pair, kind="stable")
    if not bool((ordered[1:] == ordered[:-1]).any()):
        return 0, None
    dup = pd.Series(pair).duplicated(keep="first").to_numpy()
    i = int(np.flatnonzero(dup)[0])
    j = int(np.flatnonzero(pair == pair[i])[0])
    return int(dup.sum()), (int(task[i]), int(worker[i]), int(row[j]), int(row[i]))


def second(out: tuple[Any, Any]) -> Any:
    return out[1]


def combine(a: Any, b: Any) -> Any:
    """Two shards' statistics combined field by field: arrays added in float64, counts and
    scalars added, :class:`Largest` ones by their maximum (one step of the tree reduction)."""
    if isinstance(a, tuple):
        return tuple(combine(x, y) for x, y in zip(a, b, strict=True))
    if a is None:
        return None
    if isinstance(a, Largest):
        return Largest(max(a, b))
    if isinstance(a, np.ndarray):
        return np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    return a + b


def results(shard: Shard, out: tuple[Any, Any]) -> dict[str, Any]:
    """The shard's final per-task state with its task ids, for the client to assemble."""
    truth, proba = state_results(out[0])
    return {"ids": shard.task_ids, "first_row": shard.first_row, "truth": truth, "proba": proba}


def write_results(
    shard: Shard, out: tuple[Any, Any], labels: pd.Index | None, path: str
) -> tuple[int, bool]:
    """Write the shard's per-task results as one Parquet file: ``task``, ``truth`` (the label,
    or the number), and with probabilities one ``p_<label>`` column per label; the shard's
    tasks in their order of first appearance. Returns the rows written and whether the model
    gave probabilities."""
    part = results(shard, out)
    truth = part["truth"] if labels is None else labels.take(part["truth"])
    frame = pd.DataFrame({"task": part["ids"], "truth": truth})
    if part["proba"] is not None and labels is not None:
        for j, label in enumerate(labels):
            frame[f"p_{label}"] = part["proba"][:, j]
    frame.to_parquet(path, index=False)
    return len(frame), part["proba"] is not None


# ---------------------------------------------------------------------- passes
# Categorical states are (truth codes, probabilities) or the posteriors alone; numeric ones
# the truths, or (truths, inverse scales).
def mv_pass(shard: Shard, _: Any, __: Any) -> tuple[Any, Any]:
    """MajorityVote: vote shares, ties to the smallest label, each worker's agreement count."""
    proba = shares(vote_matrix(shard.task, shard.value, shard.n_tasks, int(shard.n_labels or 0)))
    truth = _fix_rows(shard, proba).argmax(axis=1)
    agree = _kernels.agreement(shard.task, shard.worker, shard.value, truth, shard.n_workers)
    return (truth, proba), agree


#: Passes that read nothing of the previous pass: the shard and the client's parameters
#: determine them, so their tasks do not depend on the previous pass's, and Dask recomputes a
#: lost one from the shard alone.
STATELESS = frozenset({"ds_pass", "one_coin_pass", "zbs_pass", "zbs_finish"})

#: Passes whose per-task state (posteriors, votes) is a function of the shard and the pass's
#: parameters alone, when they start from no previous state: it is not kept between passes
#: but recomputed where needed (the results), so a shard holds no per-task floats.
RECOMPUTABLE = frozenset(
    {
        "ds_pass",
        "one_coin_pass",
        "ds_start",
        "one_coin_start",
        "zencrowd_start",
        "mv_pass",
        "majority_agree",
        "zbs_pass",
    }
)


def mean_pass(shard: Shard, _: Any, __: Any) -> tuple[Any, Any]:
    return _fix_values(shard, task_mean(shard.task, shard.value, shard.n_tasks)), None


def median_pass(shard: Shard, _: Any, __: Any) -> tuple[Any, Any]:
    return _fix_values(shard, shard.sorted.median()), None
