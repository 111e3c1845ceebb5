"""Minimax entropy (``MinimaxEntropy``, method ``minimax``; Zhou et al., NIPS 2012) on every
bundled categorical dataset, at its defaults: accuracy against the expert truths, iterations
and fit time, next to majority vote and Dawid-Skene fitted in the same process (time ratios
are against Dawid-Skene's fit in the same process; STYLE.md, Docs and tests).

    PYTHONPATH=src python benchmarks/bench_minimax_entropy.py [--repeats 3]

Writes benchmarks/results/minimax_entropy.txt. The Zheng et al. (VLDB 2017) survey's figures
for this method are not stored with the data, so the table holds privtd's figures alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from privtd import datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import DawidSkene, Estimator, MajorityVote, MinimaxEntropy

RESULT = Path(__file__).resolve().parent / "results" / "minimax_entropy.txt"
DATASETS = ("duchenne", "web", "adult_content", "sentiment", "dog")


def timed(est: Estimator, data: datasets.Dataset, repeats: int) -> tuple[Estimator, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        est.fit(data.answers)
        times.append(time.perf_counter() - start)
    return est, statistics.median(times)


def accuracy(est: Estimator, data: datasets.Dataset) -> float:
    found = est.truths_.reindex(data.truth.index)
    return float((found.astype(str) == data.truth.astype(str)).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fits per method (median time)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    load = os.getloadavg()[0]
    lines = [
        "# MinimaxEntropy at its defaults on the bundled categorical datasets",
        "# (benchmarks/bench_minimax_entropy.py)",
        "#",
        f"#   PYTHONPATH=src python benchmarks/bench_minimax_entropy.py --repeats {args.repeats}",
        "#",
        "# Accuracy on the tasks with an expert truth; time: median wall clock of the repeats;",
        "# ratio: minimax's time over Dawid-Skene's in this process. mv breaks ties to the first",
        "# label. alpha, beta: the penalties on tau and sigma (defaults: beta = K^2 / 4,",
        "# alpha = beta * tasks / workers, the authors' code's rule).",
        f"# load: {load:.2f} (1-min) at start, on a machine with {os.cpu_count()} cores",
        "",
        "dataset        tasks workers  K answers truths | mv acc | ds acc  it   time  "
        "| minimax acc  it conv    time  ratio   alpha   beta",
    ]
    print("\n".join(lines), flush=True)
    for name in DATASETS:
        data = datasets.load(name)
        answers = data.answers
        mv, _ = timed(MajorityVote(tie_break="first"), data, 1)
        ds, ds_time = timed(DawidSkene(), data, args.repeats)
        mm, mm_time = timed(MinimaxEntropy(), data, args.repeats)
        assert isinstance(mm, MinimaxEntropy)
        assert np.isfinite(mm.objective_).all()
        lines.append(
            f"{name:13s} {answers.n_tasks:6d} {answers.n_workers:7d} {answers.n_labels:2d} "
            f"{answers.n_answers:7d} {len(data.truth):6d} | {accuracy(mv, data):.4f} | "
            f"{accuracy(ds, data):.4f} {ds.n_iter_:3d} {ds_time:6.3f} | "
            f"     {accuracy(mm, data):.4f} {mm.n_iter_:3d} {'yes' if mm.converged_ else 'no':>4s} "
            f"{mm_time:7.3f} {mm_time / ds_time:6.1f} {mm.alpha_:7.3g} {mm.beta_:6.3g}"
        )
        print(lines[-1], flush=True)
    lines.append(f"# load: {os.getloadavg()[0]:.2f} (1-min) at the end")
    RESULT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
