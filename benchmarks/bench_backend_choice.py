"""Where numba's kernels start to pay: numpy against numba, set-up included, by work.

The default kernel backend (``privtd.inference._kernels.backend_for``) weighs a fit's work,
answers x planned passes, against numba's one-time set-up in each process. This measures both
sides of that choice on Dawid-Skene (K = 2) and MACE (K = 4, 50 iterations per restart), with
``tol=0`` so that the fits run until their objective stops changing; the work is counted, as
the answers times the passes the fit made (calls of the Dawid-Skene pass, which both run):

- cold: each fit in a fresh process, as the first kernel call there (numba pays its set-up:
  importing numba, the compiler target, the threading layer, loading the kernel from the disk
  cache): what the automatic choice weighs;
- warm: in one process where another numba kernel (majority vote's) already ran, so only the
  fit's own kernel still loads: what a process that runs numba anyway saves (the choice does
  not look at what ran before).

Times are of the fit alone (privtd's imports and data generation excluded; numba is imported
by the first fit that runs it), the median of ``--repeat`` runs. Run with numba's disk cache
filled (any earlier fit under ``PRIVTD_BACKEND=numba``; a cold cache adds seconds of
compilation once).
numba runs on ``--threads`` threads (``NUMBA_NUM_THREADS``; default 1, as the crowd-kit
benchmarks do): on a machine whose cores other jobs keep busy, its threaded kernels on 2 threads
took 2-4 s for a fit that takes 0.06 s on one.

    PYTHONPATH=src python benchmarks/bench_backend_choice.py [--repeat 3] [--threads 1]
        [--cases 0,5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

# (estimator, tasks, at most passes): 5 answers per task; MACE's are restarts x 50 iterations.
CASES = [
    ("ds", 2000, 10),
    ("ds", 8000, 10),
    ("ds", 8000, 50),
    ("ds", 40000, 20),
    ("ds", 40000, 100),
    ("ds", 100000, 100),
    ("mace", 1000, 50),
    ("mace", 8000, 50),
    ("mace", 8000, 200),
    ("mace", 8000, 500),
    ("mace", 20000, 500),
]


def fit_seconds(
    name: str, n_tasks: int, passes: int, backend: str, warm: bool
) -> tuple[float, int]:
    """The fit's seconds and the passes it made."""
    from privtd import datasets
    from privtd.errors import ConvergenceWarning
    from privtd.inference import MACE, DawidSkene, WeightedVote, _kernels

    warnings.simplefilter("ignore", ConvergenceWarning)
    if name == "ds":
        answers = datasets.make_categorical(n_tasks, 100, 2, answers_per_task=5, rng=11)[0]
        est = DawidSkene(max_iter=passes, tol=0.0)
    else:
        answers = datasets.make_categorical(
            n_tasks, 200, 4, answers_per_task=5, accuracy=(0.5, 0.95), rng=0
        )[0]
        est = MACE(n_restarts=passes // 50, max_iter=50, tol=0.0)
    if warm:  # numba's set-up paid by another kernel first
        _kernels.set_backend("numba")
        WeightedVote().fit(datasets.make_categorical(50, 5, 2, rng=0)[0])
    _kernels.set_backend(backend)
    passes = [0]
    # Counted where the running backend hands out its pass, which imports nothing before the
    # fit (numba's import stays in the fit's time).
    running = _kernels.BACKENDS[backend]
    lookup = running.kernel

    def counted_kernel(kernel: str) -> object:
        found = lookup(kernel)
        if kernel != "ds_step":
            return found

        def counted(*args: object) -> object:
            passes[0] += 1
            return found(*args)

        return counted

    running.kernel = counted_kernel  # type: ignore[method-assign]
    start = time.perf_counter()
    est.fit(answers)
    return time.perf_counter() - start, passes[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="numba's threads")
    parser.add_argument(
        "--cases", default=None, help="comma-separated row numbers of CASES (0-based); default all"
    )
    parser.add_argument("--out", default=None, help="append the table to this file")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)  # name tasks passes backend warm
    args = parser.parse_args()
    if args.one:
        name, tasks, passes, backend, warm = args.one
        print(json.dumps(fit_seconds(name, int(tasks), int(passes), backend, warm == "1")))
        return
    env = {**os.environ, "NUMBA_NUM_THREADS": str(args.threads)}
    lines = [
        f"# numpy against numba ({args.threads} thread(s)) by work, fit time only, median of "
        f"{args.repeat} fresh processes; load {os.getloadavg()[0]:.2f} at start",
        "# cold: the fit is the process's first kernel call; warm: another numba kernel ran first",
        "case                       answers    passes       work  numpy_s  numba_cold_s  "
        "numba_warm_s",
    ]
    print(lines[-1], flush=True)
    rows = CASES if args.cases is None else [CASES[int(i)] for i in args.cases.split(",")]
    for name, tasks, passes in rows:
        times: dict[tuple[str, str], list[float]] = {}
        made: list[int] = []
        for _ in range(args.repeat):  # interleaved, so that load changes hit all three alike
            for backend, warm in (("numpy", "0"), ("numba", "0"), ("numba", "1")):
                one = [name, str(tasks), str(passes), backend, warm]
                out = subprocess.run(
                    [sys.executable, __file__, "--one", *one],
                    check=True,
                    env=env,
                    capture_output=True,
                    text=True,
                ).stdout
                seconds, n_passes = json.loads(out.splitlines()[-1])
                times.setdefault((backend, warm), []).append(seconds)
                made.append(n_passes)
        med = {key: statistics.median(val) for key, val in times.items()}
        answers = 5 * tasks
        label = f"{name} {tasks} tasks, max {passes}"
        spread = f"{min(made)}" if min(made) == max(made) else f"{min(made)}-{max(made)}"
        lines.append(
            f"{label:26s} {answers:7d}  {spread:>8s}  {answers * statistics.median(made):9.2e}  "
            f"{med['numpy', '0']:7.3f}  {med['numba', '0']:12.3f}  {med['numba', '1']:12.3f}"
        )
        print(lines[-1], flush=True)
    lines.append(f"# load {os.getloadavg()[0]:.2f} at end")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
