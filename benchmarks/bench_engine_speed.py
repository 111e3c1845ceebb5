"""Fit times of two privtd trees (before and after a change) on the crowds of docs/reference.md's
speed tables, in one run: the check that a refactor gave no speed back.

    PRIVTD_BACKEND=numpy python benchmarks/bench_engine_speed.py --before OLD/src --after src
    PRIVTD_BACKEND=numba python benchmarks/bench_engine_speed.py --before OLD/src --after src

Each tree runs in its own long-lived process (its ``src`` first on ``sys.path``, numba held to
one thread as in the crowd-kit benchmarks), fed the same coded answers, which this script
generates once. Every case is fitted once in each process to leave out numba's set-up, then the
cases run ``--reps`` times (a fit under 0.3 s repeated within one timing), the two trees
alternating on every fit so that a busy machine slows both alike. Reported per case: the least
CPU time of each tree (``time.process_time``, less moved by other jobs than wall time), their
ratio, and the median over the repetitions of after / before of the fits run side by side
(``paired``: the figure a busy spell moves least). Since crowd-kit's time is the same in both,
the speed-up over crowd-kit changes by before / after: a case whose paired after / before is
above 1.10 has given back more than 10%.

The crowds are docs/reference.md's: 8,000 binary tasks of 100 workers with 5 answers each
(``make_categorical(rng=11)``) for mv, wawa, zbs, ds, one-coin-ds, kos and mmsr; 8,000 tasks
with K = 4 from 200 workers (``accuracy=(0.5, 0.95)``, ``rng=0``) for GLAD (3 steps), MACE EM
and VB (10 restarts x 50 iterations) and ZenCrowd (50 iterations); and the bundled Duchenne,
Web and Sentiment sets at each method's defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

#: name -> (crowd, method, parameters)
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    **{
        f"{m}/binary8000": ("binary8000", m, {})
        for m in ("mv", "wawa", "zbs", "ds", "one-coin-ds", "kos", "mmsr")
    },
    "glad-3/k4": ("k4", "glad", {"max_iter": 3, "tol": 0.0}),
    "mace-em/k4": ("k4", "mace", {"max_iter": 50, "tol": 0.0}),
    "mace-vb/k4": ("k4", "mace", {"method": "vb", "max_iter": 50, "tol": 0.0}),
    "zencrowd-50/k4": ("k4", "zencrowd", {"max_iter": 50, "tol": 0.0}),
    **{
        f"{m}/{d}": (d, m, {})
        for d in ("duchenne", "web", "sentiment")
        for m in ("ds", "one-coin-ds", "glad", "mace", "zencrowd", "lc", "zbs")
        if not (m == "lc" and d == "web")  # the latent class model is binary; Web has 5 labels
    },
}
BUNDLED = ("duchenne", "web", "sentiment")
#: The least CPU time one timing spans: shorter fits are repeated inside it.
MIN_SECONDS = 0.3


def make_crowds(folder: Path) -> None:
    from privtd.datasets import make_categorical

    crowds = {
        "binary8000": make_categorical(8000, 100, 2, answers_per_task=5, rng=11)[0],
        "k4": make_categorical(8000, 200, 4, answers_per_task=5, accuracy=(0.5, 0.95), rng=0)[0],
    }
    for name, a in crowds.items():
        np.savez(folder / f"{name}.npz", task=a.task, worker=a.worker, value=a.value)


def serve(folder: Path) -> None:
    """Fit the case named on each line of stdin; print its CPU and wall seconds."""
    import warnings

    import pandas as pd

    from privtd import Answers, datasets
    from privtd.inference import METHODS

    try:
        import numba

        numba.set_num_threads(1)
    except ImportError:
        pass
    warnings.simplefilter("ignore")
    crowds: dict[str, Any] = {}

    def crowd(name: str) -> Any:
        if name not in crowds:
            if name in BUNDLED:
                crowds[name] = datasets.load(name).answers
            else:
                z = np.load(folder / f"{name}.npz")
                k = int(z["value"].max()) + 1
                crowds[name] = Answers(
                    z["task"],
                    z["worker"],
                    z["value"],
                    pd.RangeIndex(int(z["task"].max()) + 1, name="task"),
                    pd.RangeIndex(int(z["worker"].max()) + 1, name="worker"),
                    pd.Index(range(k), name="label"),
                )
        return crowds[name]

    for line in sys.stdin:
        case, times = line.split()
        data, method, params = CASES[case]
        answers = crowd(data)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(int(times)):
            METHODS[method](**params).fit(answers)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(json.dumps({"cpu": cpu / int(times), "wall": wall / int(times)}), flush=True)


class Tree:
    """A long-lived process running one privtd tree's ``serve``."""

    def __init__(self, src: Path, folder: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(src.resolve()), NUMBA_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def fit(self, case: str, times: int = 1) -> dict[str, float]:
        """Fit ``case`` ``times`` times over; the seconds per fit."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{case} {times}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the tree's process ended on {case}")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="the src folder of the tree before")
    parser.add_argument("--after", type=Path, default=Path("src"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--only", default="", help="only the cases whose name contains one of these (a,b,...)"
    )
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.before is None:
        parser.error("--before SRC is required")
    cases = [c for c in CASES if any(part in c for part in args.only.split(","))]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_crowds(folder)
        trees = {"before": Tree(args.before, folder), "after": Tree(args.after, folder)}
        cpu: dict[str, dict[str, list[float]]] = {c: {"before": [], "after": []} for c in cases}
        print(
            f"PRIVTD_BACKEND={os.environ.get('PRIVTD_BACKEND', '(unset)')}; before {args.before}, "
            f"after {args.after}; least CPU seconds of {args.reps} fits, the trees alternating",
            flush=True,
        )
        # Fits under MIN_SECONDS repeat inside one timing, as often for both trees.
        times = {}
        for case in cases:
            first = [tree.fit(case)["cpu"] for tree in trees.values()]
            times[case] = max(1, int(np.ceil(MIN_SECONDS / max(min(first), 1e-6))))
        for rep in range(args.reps):
            for case in cases:
                order = list(trees.items()) if rep % 2 == 0 else list(trees.items())[::-1]
                for name, tree in order:
                    cpu[case][name].append(tree.fit(case, times[case])["cpu"])
        for tree in trees.values():
            tree.close()
    print(f"{'case':24s} {'before':>9s} {'after':>9s}  least  paired")
    worst = 0.0
    for case in cases:
        b, a = np.array(cpu[case]["before"]), np.array(cpu[case]["after"])
        # The median of the ratios of fits run side by side: a busy spell slows both alike.
        paired = float(np.median(a / b))
        worst = max(worst, paired)
        flag = "  SLOWER" if paired > 1.10 else ""
        print(
            f"{case:24s} {b.min():9.4f} {a.min():9.4f}  {a.min() / b.min():5.2f}  "
            f"{paired:6.2f}{flag}",
            flush=True,
        )
    print(f"largest paired after/before: {worst:.2f}")


if __name__ == "__main__":
    main()
