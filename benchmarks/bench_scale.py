"""Time and peak memory of majority vote, weighted vote and one-coin Dawid-Skene at 1e8 answers.

The answers are generated once and saved as .npy files; each method then runs in its own
process, so each peak resident memory (ru_maxrss, which includes loading the 0.9 GB of codes)
is that method's alone.

    python benchmarks/bench_scale.py --answers 1e8 --dir /tmp/privtd-scale
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


def generate(n_answers: int, folder: Path) -> None:
    from privtd import datasets

    if (folder / "value.npy").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    answers, _, _ = datasets.make_categorical(
        n_answers // 5, 10_000, 2, answers_per_task=5, accuracy=(0.4, 0.95), rng=0
    )
    np.save(folder / "task.npy", answers.task)
    np.save(folder / "worker.npy", answers.worker)
    np.save(folder / "value.npy", answers.value)


def run_one(method: str, folder: Path) -> dict:
    from privtd import Answers
    from privtd.errors import ConvergenceWarning
    from privtd.inference import make_estimator

    task = np.load(folder / "task.npy")
    worker = np.load(folder / "worker.npy")
    value = np.load(folder / "value.npy")
    answers = Answers(
        task,
        worker,
        value,
        pd.RangeIndex(int(task.max()) + 1, name="task"),
        pd.RangeIndex(int(worker.max()) + 1, name="worker"),
        pd.Index([0, 1], name="label"),
    )
    params = {"max_iter": 20, "tol": 0.0} if method == "one-coin-ds" else {}
    # Compile (or load numba's cache) on a small slice so the timing is the fit alone.
    small = answers.subset(answers.task < 1000)
    warnings.simplefilter("ignore", ConvergenceWarning)
    make_estimator(method, **params).fit(small)
    start, cpu = time.perf_counter(), time.process_time()
    est = make_estimator(method, **params).fit(answers)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    return {
        "method": method,
        "n_answers": answers.n_answers,
        "seconds": round(elapsed, 1),
        # Less moved than wall time by other jobs on the machine (all threads' time).
        "cpu_seconds": round(cpu, 1),
        "n_iter": est.n_iter_,
        "peak_rss_gb": round(peak_gb, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=float, default=1e8)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/privtd-scale"))
    parser.add_argument("--methods", nargs="*", default=["mv", "wv", "one-coin-ds"])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.dir)))
        return
    generate(int(args.answers), args.dir)
    for method in args.methods:
        out = subprocess.run(
            [sys.executable, __file__, "--dir", str(args.dir), "--one", method],
            capture_output=True,
            text=True,
            check=True,
        )
        print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
