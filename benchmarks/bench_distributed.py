"""The Dask engine against the in-memory path on the same Parquet files: ingest, then MV and
one-coin Dawid-Skene (20 iterations), with the time per iteration.

The answers (K = 2, 5 per task, 10,000 workers) are generated once and written as Parquet
files of 1e6 rows; both paths read those files. The cluster is a LocalCluster of ``--workers``
single-threaded processes on this machine. Kernels are compiled (or loaded from numba's
cache) on a small fit first, so the timings are the work alone.

    python benchmarks/bench_distributed.py --answers 1e7 --workers 2 --dir /tmp/privtd-dist
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


def generate(n_answers: int, folder: Path, rows_per_file: int = 1_000_000) -> list[Path]:
    from privtd import datasets

    files = sorted(folder.glob("part-*.parquet"))
    if files:
        return files
    folder.mkdir(parents=True, exist_ok=True)
    answers, _, _ = datasets.make_categorical(
        n_answers // 5, 10_000, 2, answers_per_task=5, accuracy=(0.4, 0.95), rng=0
    )
    frame = pd.DataFrame(
        {"task": answers.task, "worker": answers.worker, "answer": answers.value}
    ).sample(frac=1.0, random_state=0)  # a task's answers spread over the files
    for i, start in enumerate(range(0, len(frame), rows_per_file)):
        frame.iloc[start : start + rows_per_file].to_parquet(
            folder / f"part-{i:04d}.parquet", index=False
        )
    return sorted(folder.glob("part-*.parquet"))


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=float, default=1e7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/privtd-dist"))
    args = parser.parse_args()
    from privtd import Answers
    from privtd.errors import ConvergenceWarning
    from privtd.inference import _kernels, fit_distributed
    from privtd.inference.distributed import connect, ingest

    warnings.simplefilter("ignore", ConvergenceWarning)
    folder = args.dir / f"{int(args.answers):d}"
    files = generate(int(args.answers), folder)
    methods = {"mv": {}, "one-coin-ds": {"max_iter": 20, "tol": 0.0}}
    result: dict = {"n_answers": int(args.answers), "files": len(files), "backend": None}

    # In memory: read and concatenate the files, code, fit.
    start = time.perf_counter()
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    answers = Answers.from_frame(frame)
    del frame
    result["memory"] = {"ingest": round(time.perf_counter() - start, 3)}
    result["backend"] = _kernels.get_backend()
    small = answers.subset(answers.task < 1000)
    mem_fits = {}
    for method, params in methods.items():
        timed_fit(lambda e, s=small: e.fit(s), method, params)  # compile / load the cache
        result["memory"][method], mem_fits[method] = timed_fit(
            lambda e, a=answers: e.fit(a), method, params
        )
    del answers, small

    with connect(workers=args.workers) as client:
        # The workers import privtd (and load the kernels) once; the in-memory side already has.
        client.run(lambda: __import__("privtd.inference.distributed._shard"))
        start = time.perf_counter()
        data = ingest(folder, client, partitions=args.partitions)
        result["dask"] = {
            "workers": args.workers,
            "partitions": data.n_partitions,
            "ingest": round(time.perf_counter() - start, 3),
        }
        warm = ingest(files[0], client, partitions=data.n_partitions)
        for method, params in methods.items():
            timed_fit(lambda e, w=warm: fit_distributed(e, w), method, params)
            result["dask"][method], est = timed_fit(
                lambda e: fit_distributed(e, data), method, params
            )
            result["dask"][method]["same_labels"] = bool(
                est.truths_.equals(mem_fits[method].truths_)
            )
        rss = client.run(lambda: __import__("psutil").Process().memory_info().rss)
        result["dask"]["worker_rss_gb"] = round(sum(rss.values()) / 1024**3, 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
