"""The Dask engine against the in-memory path on the same Parquet files: ingest, then MV and
one-coin Dawid-Skene (20 iterations), the time per iteration, the peak resident memory of the
whole cluster, and throughput per core against spark-crowd's published Dawid-Skene run.

The answers (K = 2, 5 per task, ``--n-workers`` workers, default 1e5) are generated chunk by
chunk and appended to Parquet files without ever holding them all: each chunk of tasks is
drawn from its own seed, and answer ``j`` of a task goes to file ``(chunk + j) % files``, so a
task's answers are spread over five files. 1e9 answers = 2e8 tasks x 5 in 1,000 files of 1e6
rows (about 6 GB on disk). The in-memory path (pandas reads every file, ``Answers.from_frame``,
fit) runs only up to ``--memory-max`` answers.

Memory: a thread samples, every 0.5 s, the resident set of this process and of every process
under it (the LocalCluster's nannies and workers) and keeps the peak of their sum, overall and
per phase. Kernels are compiled (or loaded from numba's cache) on a small fit first.

``--dir`` holding ``part-*.parquet`` files already (e.g. /work/gen_answers.py's 1e9 answers)
is used as it is, nothing generated. ``--output`` makes the workers write the per-task results
as Parquet there (``fit_distributed(output=)``), as a 1e9 run must: 2e8 tasks' results
gathered on the client would not fit. ``--memory-limit`` caps each Dask worker (it spills to
disk past Dask's thresholds of it).

    python benchmarks/bench_distributed.py --answers 1e7 --workers 2 --dir /tmp/privtd-dist
    python benchmarks/bench_distributed.py --answers 1e9 --dir /work/data1e9 --memory-max 0 \
        --memory-limit 7GB --output /work/out1e9
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

#: spark-crowd's published Dawid-Skene figure (Rodrigo et al. 2019): 1e8 answers in 426 s on
#: 3 executors x 10 cores. Its iteration count is not part of the figure; ``--spark-iterations``
#: (default 10) is the assumption behind the answer-iterations ratio.
SPARK = {"answers": 1e8, "seconds": 426.0, "cores": 30}

CHUNK_TASKS = 200_000  # 1e6 answers per chunk: the generator's whole working set


def generate(
    n_answers: int, n_workers: int, folder: Path, rows_per_file: int = 1_000_000
) -> list[Path]:
    """Write the answers as Parquet, chunk by chunk (reused when the folder already has them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(folder.glob("part-*.parquet"))
    if files:
        return files
    folder.mkdir(parents=True, exist_ok=True)
    per_task = 5
    n_tasks = n_answers // per_task
    n_files = max(1, n_answers // rows_per_file)
    accuracy = np.random.default_rng(0).uniform(0.4, 0.95, n_workers)
    paths = [folder / f".part-{i:05d}.parquet" for i in range(n_files)]
    schema = pa.schema([("task", pa.int64()), ("worker", pa.int64()), ("answer", pa.int8())])
    n_chunks = -(-n_tasks // CHUNK_TASKS)
    # Slice j of chunk c goes to file (c + j) % files; a file is closed once it has all of its
    # slices, so only a few are open at a time (1,000 open files would pass the usual limit).
    pending = np.bincount(
        (np.arange(n_chunks)[:, None] + np.arange(per_task)).ravel() % n_files, minlength=n_files
    )
    writers: dict[int, pq.ParquetWriter] = {}
    try:
        for c, lo in enumerate(range(0, n_tasks, CHUNK_TASKS)):
            hi = min(n_tasks, lo + CHUNK_TASKS)
            rng = np.random.default_rng([1, c])
            n = hi - lo
            truth = rng.integers(0, 2, n)
            # Five distinct workers per task: a start and a stride below n_workers / 5.
            first = rng.integers(0, n_workers, n)
            stride = rng.integers(1, max(2, n_workers // per_task), n)
            for j in range(per_task):
                worker = (first + j * stride) % n_workers
                right = rng.random(n) < accuracy[worker]
                answer = np.where(right, truth, 1 - truth).astype(np.int8)
                table = pa.table(
                    {"task": np.arange(lo, hi, dtype=np.int64), "worker": worker, "answer": answer},
                    schema=schema,
                )
                f = (c + j) % n_files
                if f not in writers:
                    writers[f] = pq.ParquetWriter(paths[f], schema)
                writers[f].write_table(table)
                pending[f] -= 1
                if pending[f] == 0:
                    writers.pop(f).close()
    finally:
        for w in writers.values():
            w.close()
    for p in paths:  # visible only once complete: a killed run leaves no half data set
        p.rename(p.with_name(p.name[1:]))
    return sorted(folder.glob("part-*.parquet"))


class Memory:
    """The peak resident memory of this process and all its descendants, summed, sampled every
    ``every`` seconds in a thread; ``phase(name)`` starts a new phase's peak."""

    def __init__(self, every: float = 0.5) -> None:
        import psutil

        self.me = psutil.Process()
        self.every = every
        self.peaks: dict[str, int] = {}
        self.name = "start"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def total(self) -> int:
        import psutil

        rss = self.me.memory_info().rss
        for child in self.me.children(recursive=True):
            try:
                rss += child.memory_info().rss
            except psutil.Error:  # gone between the listing and the read
                pass
        return int(rss)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        now = self.total()
        self.peaks[self.name] = max(self.peaks.get(self.name, 0), now)

    def phase(self, name: str) -> None:
        self._sample()
        self.name = name
        self._sample()

    def close(self) -> dict[str, float]:
        self._sample()
        self.stop.set()
        self.thread.join()
        gb = {k: round(v / 1024**3, 3) for k, v in self.peaks.items()}
        gb["peak"] = max(gb.values())
        return gb


class Clock:
    """Progress callback that records when each iteration starts."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, n_iter: int, max_iter: int) -> None:
        self.stamps.append(time.perf_counter())


def timed_fit(fit, method: str, params: dict) -> tuple[dict, object]:
    from privtd.inference import make_estimator

    est = make_estimator(method, **params)
    clock = Clock()
    est.progress = clock
    start = time.perf_counter()
    fit(est)
    total = time.perf_counter() - start
    per_iter = float(np.median(np.diff(clock.stamps))) if len(clock.stamps) > 2 else None
    return {"seconds": round(total, 3), "n_iter": est.n_iter_, "per_iteration": per_iter}, est


def throughput(n_answers: int, fit: dict, cores: int, spark_iterations: int) -> dict:
    """Answer-iterations per second per core of a fit, and its ratio to spark-crowd's."""
    ours = n_answers * fit["n_iter"] / fit["seconds"] / cores
    spark = SPARK["answers"] * spark_iterations / SPARK["seconds"] / SPARK["cores"]
    return {
        "answer_iterations_per_s_per_core": round(ours),
        "spark_crowd": round(spark),
        "ratio_to_spark_crowd": round(ours / spark, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=float, default=1e7)
    parser.add_argument("--n-workers", type=float, default=1e5, help="crowd workers")
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/privtd-dist"))
    parser.add_argument(
        "--memory-max", type=float, default=2e7, help="run the in-memory path up to this size"
    )
    parser.add_argument("--spark-iterations", type=int, default=10)
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--memory-limit", default=None, help="per Dask worker, e.g. 7GB")
    parser.add_argument(
        "--group-answers", type=float, default=None, help="ingest's group size (answers)"
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="workers write the results here (a folder)"
    )
    parser.add_argument(
        "--methods",
        default="mv,one-coin-ds",
        help="comma-separated, of mv and one-coin-ds; empty: ingest only",
    )
    args = parser.parse_args()
    from privtd import Answers
    from privtd.errors import ConvergenceWarning
    from privtd.inference import _kernels, fit_distributed
    from privtd.inference.distributed import connect, ingest

    warnings.simplefilter("ignore", ConvergenceWarning)
    n_answers, n_crowd = int(args.answers), int(args.n_workers)
    start = time.perf_counter()
    if sorted(args.dir.glob("part-*.parquet")):  # answers already there: used as they are
        folder = args.dir
        files = sorted(folder.glob("part-*.parquet"))
    else:
        folder = args.dir / f"{n_answers:d}-w{n_crowd:d}"
        files = generate(n_answers, n_crowd, folder)
    result: dict = {
        "n_answers": n_answers,
        "n_crowd_workers": n_crowd,
        "files": len(files),
        "generate_seconds": round(time.perf_counter() - start, 3),
        "backend": _kernels.get_backend(),
        "load_average": os.getloadavg(),
        "memory_limit": args.memory_limit,
    }
    if args.generate_only:
        print(json.dumps(result, indent=1))
        return
    known = {"mv": {}, "one-coin-ds": {"max_iter": 20, "tol": 0.0}}
    methods = {m: known[m] for m in args.methods.split(",") if m}
    mem_fits = {}
    memory = Memory()
    if n_answers <= args.memory_max:
        memory.phase("memory-ingest")
        start = time.perf_counter()
        frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        answers = Answers.from_frame(frame)
        del frame
        result["memory"] = {"ingest": round(time.perf_counter() - start, 3)}
        small = answers.subset(answers.task < 1000)
        for method, params in methods.items():
            timed_fit(lambda e, s=small: e.fit(s), method, params)  # compile / load the cache
            memory.phase(f"memory-{method}")
            result["memory"][method], mem_fits[method] = timed_fit(
                lambda e, a=answers: e.fit(a), method, params
            )
        import numba

        result["memory"]["threads"] = numba.get_num_threads()
        del answers, small
    memory.phase("cluster-start")
    with connect(workers=args.workers, memory_limit=args.memory_limit) as client:
        # The workers import privtd (and load the kernels) once; the in-memory side already has.
        client.run(lambda: __import__("privtd.inference.distributed._shard"))
        warm = ingest(files[0], client, partitions=args.workers)
        for method, params in methods.items():
            timed_fit(lambda e, w=warm: fit_distributed(e, w), method, params)
        del warm
        memory.phase("dask-ingest")
        # What the processes hold before any answer: interpreters, numba, Dask (fixed cost).
        baseline = memory.total()
        start = time.perf_counter()
        group = None if args.group_answers is None else int(args.group_answers)
        data = ingest(folder, client, partitions=args.partitions, group_answers=group)
        result["dask"] = {
            "workers": args.workers,
            "partitions": data.n_partitions,
            "ingest": round(time.perf_counter() - start, 3),
        }
        print(json.dumps(result), flush=True)  # progress: a long run's ingest figures first
        for method, params in methods.items():
            memory.phase(f"dask-{method}")
            out = None
            if args.output is not None:
                out = args.output / method
                if out.exists():
                    shutil.rmtree(out)
                args.output.mkdir(parents=True, exist_ok=True)
            result["dask"][method], est = timed_fit(
                lambda e, o=out: fit_distributed(e, data, output=o), method, params
            )
            print(json.dumps(result["dask"][method]), flush=True)
            if method in mem_fits and out is None:
                result["dask"][method]["same_labels"] = bool(
                    est.truths_.equals(mem_fits[method].truths_)
                )
            del est
    peaks = memory.close()
    result["peak_rss_gb"] = peaks
    dask_peak = max(v for k, v in peaks.items() if k.startswith("dask"))
    result["dask"]["peak_rss_gb"] = dask_peak
    result["dask"]["baseline_rss_gb"] = round(baseline / 1024**3, 3)
    per_answer = (dask_peak * 1024**3 - baseline) / n_answers
    result["dask"]["bytes_per_answer_above_baseline"] = round(per_answer, 1)
    result["dask"]["extrapolated_1e9_gb"] = round((baseline + per_answer * 1e9) / 1024**3, 1)
    if "one-coin-ds" in methods:
        ds = result["dask"]["one-coin-ds"]
        result["dask"]["throughput"] = throughput(
            n_answers, ds, args.workers, args.spark_iterations
        )
    if "memory" in result and "one-coin-ds" in methods:
        mem = result["memory"]["one-coin-ds"]
        result["memory"]["throughput"] = throughput(
            n_answers, mem, result["memory"]["threads"], args.spark_iterations
        )
        result["dask_over_memory_seconds"] = {
            m: round(result["dask"][m]["seconds"] / result["memory"][m]["seconds"], 2)
            for m in methods
        }
    result["load_average_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
