"""Minimax entropy (``MinimaxEntropy``, method ``minimax``; Zhou et al., NIPS 2012) on every
bundled categorical dataset, at its defaults: accuracy against the expert truths, iterations
and fit time, next to majority vote and Dawid-Skene fitted in the same process (time ratios
are against Dawid-Skene's fit in the same process; STYLE.md, Docs and tests).

    PYTHONPATH=src python benchmarks/bench_minimax_entropy.py [--repeats 3] [--sweep]

``--sweep`` adds AdultContent fitted with 5, 10 and 25 L-BFGS-B iterations per M-step (the
default is 5; the authors' code runs up to 25): EM iterations, time, accuracy, the final
objective and the labels' agreement with the 25-iteration fit.

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


def timed(est: Estimator, data: datasets.Dataset, repeats: int) -> tuple[Estimator, float, float]:
    """The fitted estimator, and the median wall-clock and CPU seconds of ``repeats`` fits (on
    a shared machine the CPU time, this process's, moves less with the load)."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        est.fit(data.answers)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return est, statistics.median(wall), statistics.median(cpu)


def accuracy(est: Estimator, data: datasets.Dataset) -> float:
    found = est.truths_.reindex(data.truth.index)
    return float((found.astype(str) == data.truth.astype(str)).mean())


def sweep() -> list[str]:
    data = datasets.load("adult_content")
    lines = [
        "",
        "# AdultContent, m_step_max_iter swept (one fit each)",
        "m_step_max_iter  it conv    time     cpu  accuracy  objective/answer  labels = 25's",
    ]
    print("\n".join(lines), flush=True)
    fits = {}
    for m_iter in (25, 10, 5):
        fits[m_iter] = timed(MinimaxEntropy(m_step_max_iter=m_iter), data, 1)
    for m_iter in (5, 10, 25):
        est, seconds, cpu = fits[m_iter]
        same = float((est.truths_ == fits[25][0].truths_).mean())
        lines.append(
            f"{m_iter:15d} {est.n_iter_:3d} {'yes' if est.converged_ else 'no':>4s} "
            f"{seconds:7.2f} {cpu:7.2f}    {accuracy(est, data):.4f}  "
            f"{est.objective_[-1]:16.6f}  {same:.4f}"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fits per method (median time)")
    parser.add_argument("--sweep", action="store_true", help="m_step_max_iter on AdultContent")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    load = os.getloadavg()[0]
    lines = [
        "# MinimaxEntropy at its defaults on the bundled categorical datasets",
        "# (benchmarks/bench_minimax_entropy.py)",
        "#",
        "#   PYTHONPATH=src python benchmarks/bench_minimax_entropy.py --repeats "
        f"{args.repeats}{' --sweep' if args.sweep else ''}",
        "#",
        "# Accuracy on the tasks with an expert truth; time, cpu: median wall clock and process",
        "# CPU seconds of the repeats; ratio:",
        "# minimax's wall time over Dawid-Skene's in this process. mv breaks ties to the first",
        "# label. alpha, beta: the penalties on tau and sigma (defaults: beta = K^2 / 4,",
        "# alpha = beta * tasks / workers, the authors' code's rule).",
        f"# load: {load:.2f} (1-min) at start, on a machine with {os.cpu_count()} cores",
        "",
        "dataset        tasks workers  K answers truths | mv acc | ds acc  it   time  "
        "| minimax acc  it conv    time     cpu  ratio   alpha   beta",
    ]
    print("\n".join(lines), flush=True)
    for name in DATASETS:
        data = datasets.load(name)
        answers = data.answers
        mv = MajorityVote(tie_break="first").fit(answers)
        ds, ds_time, _ = timed(DawidSkene(), data, args.repeats)
        mm, mm_time, mm_cpu = timed(MinimaxEntropy(), data, args.repeats)
        assert isinstance(mm, MinimaxEntropy)
        assert np.isfinite(mm.objective_).all()
        lines.append(
            f"{name:13s} {answers.n_tasks:6d} {answers.n_workers:7d} {answers.n_labels:2d} "
            f"{answers.n_answers:7d} {len(data.truth):6d} | {accuracy(mv, data):.4f} | "
            f"{accuracy(ds, data):.4f} {ds.n_iter_:3d} {ds_time:6.3f} | "
            f"     {accuracy(mm, data):.4f} {mm.n_iter_:3d} {'yes' if mm.converged_ else 'no':>4s} "
            f"{mm_time:7.3f} {mm_cpu:7.3f} {mm_time / ds_time:6.1f} "
            f"{mm.alpha_:7.3g} {mm.beta_:6.3g}"
        )
        print(lines[-1], flush=True)
    if args.sweep:
        lines += sweep()
    lines.append(f"# load: {os.getloadavg()[0]:.2f} (1-min) at the end")
    RESULT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
