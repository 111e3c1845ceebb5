"""Ingest once: files -> globally coded answers, partitioned by task, kept on the workers."""

from __future__ import annotations

import glob
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...answers import _check_choice, _code_dtype, _code_numeric
from ...errors import ValidationError
from . import _shard
from ._cluster import gather

#: Answers per shard the default partition count aims at (the 1e6-1e7 range it is sized for).
SHARD_ANSWERS = 5_000_000

#: Bytes of a CSV file whose lines give its mean line length (for the default partitions).
_CSV_SAMPLE = 1 << 20

_EXTENSIONS = (".parquet", ".pq", ".csv")


def resolve_files(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The files of a source: one file, a directory (its Parquet and CSV files, recursively,
    in sorted order), a glob pattern, or a list of any of these. Every file must exist and be
    readable here (the workers read the same paths: on a cluster of several machines, a shared
    filesystem)."""
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    if not items:
        raise ValidationError("No answer files given. Pass a file, a directory or a glob.")
    files: list[str] = []
    for item in items:
        text = os.fspath(item)
        if os.path.isdir(text):
            found = sorted(
                str(p)
                for p in Path(text).rglob("*")
                if p.is_file()
                and p.suffix.lower() in _EXTENSIONS
                and not p.name.startswith((".", "_"))
            )
            if not found:
                raise ValidationError(
                    f"The directory {text!r} holds no .parquet, .pq or .csv file. Check the path."
                )
            files += found
        elif glob.has_magic(text):
            found = sorted(p for p in glob.glob(text, recursive=True) if os.path.isfile(p))
            if not found:
                raise ValidationError(f"No file matches {text!r}. Check the pattern.")
            files += found
        else:
            files.append(text)
    for path in files:
        if not os.path.exists(path):
            raise ValidationError(f"No such file: {path!r}. Check the path.")
        if not os.access(path, os.R_OK):
            raise ValidationError(
                f"Cannot read {path!r}: permission denied. Check its permissions."
            )
    return files


def file_format(path: str) -> str:
    return "parquet" if path.lower().endswith((".parquet", ".pq")) else "csv"


@dataclass(eq=False)
class DistributedAnswers:
    """Answers coded once and held by a Dask cluster as shards, every task whole in one.

    The cluster counterpart of :class:`privtd.Answers`: worker ids and labels are coded to
    global integers (in the in-memory order: first appearance, labels sorted); the shards are
    ``distributed.Future`` objects on the workers. Fit with
    :func:`privtd.inference.fit_distributed`. Valid while its client is open.
    """

    client: Any
    shards: list[Any]
    workers: pd.Index
    labels: pd.Index | None
    n_answers: int
    n_tasks: int
    counts: np.ndarray
    files: list[str]
    notes: tuple[str, ...] = field(default=())

    @property
    def kind(self) -> str:
        return "categorical" if self.labels is not None else "numeric"

    @property
    def is_categorical(self) -> bool:
        return self.labels is not None

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    @property
    def n_labels(self) -> int:
        if self.labels is None:
            raise ValidationError("n_labels is defined for categorical answers only.")
        return len(self.labels)

    @property
    def n_partitions(self) -> int:
        return len(self.shards)

    def worker_counts(self) -> np.ndarray:
        return self.counts

    def __repr__(self) -> str:
        return (
            f"DistributedAnswers({self.n_answers} answers, {self.n_tasks} tasks, "
            f"{self.n_workers} workers, {self.kind}, {self.n_partitions} partitions)"
        )


def ingest(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    client: Any,
    *,
    partitions: int | None = None,
    task: str = "task",
    worker: str = "worker",
    answer: str = "answer",
    kind: str = "auto",
    on_duplicate: str = "error",
    on_missing: str = "error",
    single_task: str = "keep",
    single_worker: str = "keep",
    labels: Sequence[Any] | None = None,
    group_answers: int | None = None,
) -> DistributedAnswers:
    """Read answer files on the cluster, code them once and keep them there as shards.

    Each file is read once. Its worker reads it, codes its worker ids and labels in the
    file's own order, splits its rows by a hash of the task id into one piece per shard and
    returns a summary (rows, missing cells, the ids and labels in order of first appearance);
    the pieces stay on that worker. The client merges the summaries into the global codes (the
    order the in-memory :meth:`privtd.Answers.from_frame` gives the concatenated files) and
    sends each file's map to them; each shard gathers its piece of every file and recodes it
    (the one shuffle, done once; Dask spills pieces to disk past a worker's memory
    thresholds). Parameters as :meth:`privtd.Answers.from_frame`; ``partitions`` is the
    number of shards (default: enough for about 5e6 answers each, as Parquet footers state
    and CSV files' first lines suggest, and at least one per worker thread); ``labels``, the
    label domain in its order, where some labels may have no answer (default: the labels
    found, sorted). ``group_answers`` is deprecated and has no effect: ingest used to build
    the shards a group at a time, reading every file once per group.
    """
    _check_choice("kind", kind, ("auto", "categorical", "numeric"))
    _check_choice("on_missing", on_missing, ("error", "drop"))
    _check_choice("on_duplicate", on_duplicate, ("error", "first", "last", "majority", "mean"))
    if on_duplicate != "error" or single_task != "keep" or single_worker != "keep":
        raise ValidationError(
            "The Dask engine takes on_duplicate='error', single_task='keep' and "
            "single_worker='keep' only, for now. Clean the answers first, or fit in memory."
        )
    if partitions is not None and (
        isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1
    ):
        raise ValidationError(f"partitions must be an int >= 1. Got {partitions!r}.")
    if group_answers is not None:
        warnings.warn(
            "ingest's group_answers is deprecated and has no effect: each file is read once, "
            "and Dask spills pieces to disk past a worker's memory_limit. Drop the argument.",
            FutureWarning,
            stacklevel=2,
        )
    if len({task, worker, answer}) < 3:
        raise ValidationError(
            f"The task, worker and answer columns must differ. Got {[task, worker, answer]}."
        )
    files = resolve_files(source)
    submit = client.submit
    columns = (task, worker, answer)
    if partitions is None:
        # Set before any file is read, since each file is split as it is read: from the rows
        # that Parquet files' footers state and that CSV files' first lines suggest.
        rows = sum(_rows_about(path) for path in files)
        partitions = max(sum(_nthreads(client).values()), math.ceil(rows / SHARD_ANSWERS))
    # Each file's summary and pieces are taken right after it is read (submitted in that order,
    # which is Dask's priority, so a worker runs them before its next read): the file's result
    # is then freed, and only its pieces wait, in memory or spilled, for the shards.
    # No future of a read is kept here, so that Dask can free it then.
    summary_of, pieces = [], []
    for path in files:
        read = submit(
            _shard.read_split, path, file_format(path), columns, kind, partitions, pure=False
        )
        summary_of.append(submit(_shard.summary_of, read, pure=False))
        pieces.append([submit(_shard.pick, read, p, pure=False) for p in range(partitions)])
        del read
    summaries = gather(client, summary_of)
    notes: list[str] = []
    n_rows = np.array([s["n_rows"] for s in summaries], dtype=np.int64)
    n_missing = sum(s["n_missing"] for s in summaries)
    if n_rows.sum() == 0:
        raise ValidationError(
            "The answers are empty (0 rows). Pass at least one (task, worker, answer) row."
        )
    if n_missing:
        i = next(i for i, s in enumerate(summaries) if s["n_missing"])
        if on_missing == "error":
            raise ValidationError(
                f"{n_missing} row(s) have a missing task, worker or answer (first: {files[i]!r}, "
                f"row {summaries[i]['first_missing']}). Fill them, or pass on_missing='drop'.",
                param="on_missing",
            )
        if n_missing == n_rows.sum():
            raise ValidationError(
                f"All {n_missing} rows have a missing task, worker or answer; nothing is left."
            )
        notes.append(f"dropped {n_missing} row(s) with a missing task, worker or answer")
    _check_id_types(files, summaries)
    numeric = _resolve_kind(kind, summaries)
    workers = pd.Index(
        pd.concat([pd.Series(s["workers"]) for s in summaries], ignore_index=True).unique(),
        name="worker",
    )
    domain = None if numeric else _label_domain(summaries)
    if domain is not None and labels is not None:
        declared = pd.Index(list(labels), name="label")
        outside = domain[declared.get_indexer(domain) < 0]
        if len(outside):
            raise ValidationError(
                f"The answers hold label(s) {list(outside[:3])} outside the declared domain "
                f"{list(declared)}. Declare every label, or fix the answers."
            )
        domain = declared
    n_labels = None if domain is None else len(domain)
    offsets = np.concatenate(([0], np.cumsum(n_rows)[:-1]))
    maps = submit(
        _shard.const,
        [_file_maps(s, workers, domain, off) for s, off in zip(summaries, offsets, strict=True)],
        pure=False,
    )
    shards = [
        submit(
            _shard.build_shard,
            len(workers),
            n_labels,
            maps,
            *[file_pieces[p] for file_pieces in pieces],
            pure=False,
        )
        for p in range(partitions)
    ]
    # Dropped before the shards are built: Dask frees each piece once its shard has taken it,
    # and spills pieces to disk past a worker's memory thresholds meanwhile. The scheduler
    # keeps their definitions, so a lost shard can still be rebuilt from the files.
    del summary_of, pieces, maps
    infos = gather(client, [submit(_shard.describe, s, pure=False) for s in shards])
    n_repeated = sum(i["n_repeated"] for i in infos)
    if n_repeated:
        t_id, w_code, *rows = next(i["example"] for i in infos if i["n_repeated"])
        where = []
        for r in rows:  # global row -> its file, and its row there counted from 1
            f = int(np.searchsorted(offsets, r, side="right")) - 1
            where.append(f"{files[f]!r} data row {r - int(offsets[f]) + 1}")
        raise ValidationError(
            f"{n_repeated} answer(s) repeat a (task, worker) pair (first: task {t_id!r}, worker "
            f"{workers[w_code]!r}, in {where[0]} and {where[1]}). Merge them before ingesting "
            "(the Dask engine takes on_duplicate='error' only, for now), or fit in memory, "
            "where on_duplicate takes every policy.",
            param="on_duplicate",
        )
    counts = np.zeros(len(workers), dtype=np.int64)
    for info in infos:  # partition order: a fixed reduction order
        counts += info["worker_counts"]
    return DistributedAnswers(
        client=client,
        shards=shards,
        workers=workers,
        labels=domain,
        n_answers=sum(i["n_answers"] for i in infos),
        n_tasks=sum(i["n_tasks"] for i in infos),
        counts=counts,
        files=files,
        notes=tuple(notes),
    )


def _nthreads(client: Any) -> dict[str, int]:
    """The cluster's threads per worker, asked of the scheduler within the pass timeout."""
    from ._cluster import PASS_TIMEOUT

    timeout = float(getattr(client, "pass_timeout", PASS_TIMEOUT))
    try:
        # Client.nthreads passes keyword arguments on to sync: a deadline for the call.
        return dict(client.nthreads(callback_timeout=timeout))
    except TimeoutError:
        raise ValidationError(
            f"The Dask scheduler did not say within {timeout:g} s how many workers it has. "
            "Check the cluster, or allow more time (pass_timeout).",
            param="pass_timeout",
        ) from None


def _rows_about(path: str) -> int:
    """A file's rows, for the default partition count: exact for Parquet (its footer states
    them), for CSV its size over the mean length of its first lines."""
    if file_format(path) == "parquet":
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # noqa: BLE001 - the worker that reads it says what is wrong
            return 0
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(_CSV_SAMPLE)
    lines = head.count(b"\n")
    if len(head) < _CSV_SAMPLE:
        return max(lines - 1, 0)  # the header line
    return round(size * lines / len(head)) if lines else 0


def _file_maps(
    summary: dict[str, Any], workers: pd.Index, domain: pd.Index | None, offset: int
) -> _shard.FileMaps:
    """A file's codes to the global ones (``_shard.recode``)."""
    w_map = workers.get_indexer(pd.Index(summary["workers"])).astype(_code_dtype(len(workers)))
    labels = summary["labels"]
    if labels is None:
        v_map = None
    elif domain is None:  # labels in this file, numbers over all of them
        v_map, _, _ = _code_numeric(pd.Series(labels), None, "answer")
    else:
        v_map = domain.get_indexer(pd.Index(labels))
        v_map = v_map.astype(np.int8 if len(domain) <= 127 else np.int32)
    return w_map, v_map, np.int64(offset)


def _check_id_types(files: list[str], summaries: list[dict[str, Any]]) -> None:
    """Ids must have one type over all files: the same task written as 5 in one file and as
    "5" in another would be two tasks (pandas tells them apart), which is never what the files
    mean. CSV ids are read as strings, Parquet ids keep their type."""
    for col, name in ((0, "Task"), (1, "Worker")):
        types = [s["id_types"][col] for s in summaries if s["n_rows"] > s["n_missing"]]
        kept = [f for f, s in zip(files, summaries, strict=True) if s["n_rows"] > s["n_missing"]]
        for f, t in zip(kept, types, strict=True):
            if t != types[0]:
                raise ValidationError(
                    f"{name} ids are {types[0]} in {kept[0]!r} but {t} in {f!r}: the same id "
                    "would count twice. Write them with one type in every file (e.g. strings)."
                )


def _resolve_kind(kind: str, summaries: list[dict[str, Any]]) -> bool:
    """True when the answers are numeric: as :meth:`privtd.Answers.from_frame` decides for one
    table ('auto': float answers are numbers), over all files at once."""
    if kind != "auto":
        return kind == "numeric"
    if any(s["is_float"] for s in summaries) and not all(s["is_float"] for s in summaries):
        if all(s["is_numeric"] for s in summaries):
            return True  # ints in some files, floats in others: their concatenation is float
        raise ValidationError(
            "The answer column holds numbers in some files and labels in others. Pass "
            "kind='numeric' or kind='categorical'.",
            param="kind",
        )
    return all(s["is_float"] for s in summaries)


def _label_domain(summaries: list[dict[str, Any]]) -> pd.Index:
    uniques = pd.Index(
        pd.concat([pd.Series(s["labels"]) for s in summaries], ignore_index=True).unique()
    )
    try:
        domain = uniques.sort_values()
    except TypeError:  # mixed, unorderable labels keep their order of appearance
        domain = uniques
    return pd.Index(domain, name="label")
