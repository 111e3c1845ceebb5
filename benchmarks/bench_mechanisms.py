"""Speed of the local mechanisms against their targets, one run:

- batch perturbation of 1e7 categorical answers (one-layer, two-layer): target 5 s;
- matrix-factorisation perturbation, 10,000 workers x 1,000 tasks at 90% sparsity, d = 100:
  target 60 s;
- record-local perturbation of one worker's 100 answers: target 1 ms.

    python benchmarks/bench_mechanisms.py
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd

from privtd import Answers, datasets
from privtd.mechanisms import MFPerturbation, OneLayerRR, TwoLayerRR, task_profiles


def timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    answers, _, _ = datasets.make_categorical(2_000_000, 10_000, 2, answers_per_task=5, rng=0)
    for mech in (OneLayerRR.from_epsilon(1.0), TwoLayerRR.from_epsilon(1.0)):
        for rng in (0, np.random.default_rng(0)):
            label = "seed" if isinstance(rng, int) else "generator"
            t = timed(lambda m=mech, r=rng: m.perturb(answers, rng=r))
            print(
                json.dumps(
                    {
                        "what": f"{mech.name} batch, {label}",
                        "answers": answers.n_answers,
                        "seconds": round(t, 3),
                        "target_s": 5,
                    }
                )
            )

    rng = np.random.default_rng(1)
    n_w, n_t = 10_000, 1_000
    mask = rng.random((n_w, n_t)) < 0.1
    w, t = np.nonzero(mask)
    sparse = Answers(
        t.astype(np.int32),
        w.astype(np.int32),
        rng.integers(0, 10, w.size).astype(float),
        pd.RangeIndex(n_t),
        pd.RangeIndex(n_w),
    )
    mf = MFPerturbation.from_epsilon(1.0, task_profiles(n_t, 100, rng=2), low=0, high=9)
    t_mf = timed(lambda: mf.perturb(sparse, rng=3))
    print(
        json.dumps(
            {
                "what": "mf batch, d=100",
                "workers": n_w,
                "tasks": n_t,
                "answers": sparse.n_answers,
                "seconds": round(t_mf, 2),
                "target_s": 60,
            }
        )
    )

    labels = [0, 1]
    mine = list(np.random.default_rng(4).integers(0, 2, 100))
    tasks = [f"t{i}" for i in range(100)]
    two = TwoLayerRR.from_epsilon(1.0)
    two.perturb_worker(mine, labels=labels, worker="w", tasks=tasks, rng=1)
    t_local = timed(
        lambda: two.perturb_worker(mine, labels=labels, worker="w", tasks=tasks, rng=1), repeat=50
    )
    print(
        json.dumps(
            {
                "what": "two-layer record-local, 100 answers",
                "ms": round(t_local * 1e3, 3),
                "target_ms": 1,
            }
        )
    )


if __name__ == "__main__":
    main()
