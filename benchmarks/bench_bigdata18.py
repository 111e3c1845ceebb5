"""Time of P3's largest setting (10,000 workers x 1,000 tasks, target: 2 minutes per
epsilon): one trial of the sparsity sweep (0.1 ... 0.9) at one epsilon, every mechanism perturbed
and inferred, for MF's d = 10 (our default) and d = 100 (the paper's).

    python benchmarks/bench_bigdata18.py [--epsilon 1.0] [--dims 10 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from privtd.experiments import bigdata18


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    args = parser.parse_args()
    for d in args.dims:
        rng = np.random.default_rng(0)
        start = time.perf_counter()
        for sparsity in bigdata18.SPARSITIES:
            answers, mu = bigdata18.synthetic(10_000, 1000, sparsity, rng)
            bigdata18._changes(answers, np.arange(1000), mu, args.epsilon, 0, 9, d, rng)
        elapsed = time.perf_counter() - start
        verdict = "met" if elapsed <= 120 else "MISSED"
        print(
            f"d = {d}: one epsilon ({args.epsilon}), 5 sparsities, one trial: {elapsed:.1f} s "
            f"(target 120 s: {verdict})",
            flush=True,
        )


if __name__ == "__main__":
    main()
