"""Record-local perturbation of one worker's whole row by P3's NULL-aware mechanisms:
linear in the tasks. Before, ``perturb_worker`` rebuilt ``set(tasks)`` once per answer
(8,000 tasks: 1.46 s on the machine it was measured on). The reference is the batch
``perturb`` of the same row in the same process, so the ratio does not depend on the machine.

Run: ``python benchmarks/bench_null_aware_worker.py``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from privtd import Answers  # noqa: E402
from privtd.mechanisms import KRRNull, LaplaceNull, TwoLayerNull  # noqa: E402


def best_of(fn, *args, repeat: int = 5, **kwargs) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    for n in (8_000, 20_000):
        tasks = [f"task-{i}" for i in range(n)]
        answers = {t: i % 5 for i, t in enumerate(tasks) if i % 2 == 0}  # half answered
        row = Answers(
            task=np.arange(0, n, 2, dtype=np.int32),
            worker=np.zeros(len(answers), dtype=np.int32),
            value=np.array(list(answers.values()), dtype=float),
            tasks=pd.Index(tasks),
            workers=pd.Index(["w"]),
        )
        for mech in (
            KRRNull.from_epsilon(1.0, 0, 4),
            TwoLayerNull.from_epsilon(1.0, 0, 4),
            LaplaceNull.from_epsilon(1.0, 0, 4),
        ):
            local = best_of(mech.perturb_worker, answers, tasks=tasks, worker="w", rng=1)
            batch = best_of(mech.perturb, row, rng=1)
            print(
                f"{mech.name:15s} {n:6d} tasks: perturb_worker {local * 1e3:7.2f} ms, "
                f"batch perturb {batch * 1e3:7.2f} ms, ratio {local / batch:5.2f}"
            )


if __name__ == "__main__":
    main()
