"""Plain against perturbation-aware GLAD, MACE and ZenCrowd on randomized-response releases.

Accuracy on the expert truths, averaged over seeds, at epsilon 1 per answer, under one-layer RR
and two-layer RR (``a`` = 0 for two labels, 0.1 for four, where ``a`` = 0 cannot reach epsilon
1), beside AwareDawidSkene. Writes benchmarks/results/aware_glad_mace.txt.

    PYTHONPATH=src python benchmarks/bench_aware_glad_mace.py
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from privtd import datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import GLAD, MACE, AwareDawidSkene, ZenCrowd
from privtd.mechanisms import OneLayerRR, TwoLayerRR

OUT = Path(__file__).resolve().parent / "results" / "aware_glad_mace.txt"
SEEDS = range(3)


def main() -> None:
    warnings.simplefilter("ignore", ConvergenceWarning)
    lines = [
        "# plain vs aware GLAD / MACE / ZenCrowd, accuracy on expert truths, mean of "
        f"{len(SEEDS)} seeds; load {os.getloadavg()[0]:.2f}"
    ]
    for name in ["sentiment", "dog"]:
        data = datasets.load(name)
        answers, truth = data.answers, data.truth
        k = answers.n_labels
        mechanisms = [
            OneLayerRR.from_epsilon(1.0, n_labels=k),
            TwoLayerRR.from_epsilon(1.0, n_labels=k, a=0.0 if k == 2 else 0.1),
        ]
        for mech in mechanisms:
            scores: dict[str, list[float]] = {}
            for seed in SEEDS:
                release = mech.perturb(answers, rng=seed)
                for label, est in [
                    ("glad", GLAD()),
                    ("aware-glad", GLAD(mech)),
                    ("mace", MACE(n_restarts=3)),
                    ("aware-mace", MACE(mech, n_restarts=3)),
                    ("zencrowd", ZenCrowd()),
                    ("aware-zencrowd", ZenCrowd(mech)),
                    ("aware-ds", AwareDawidSkene(mech)),
                ]:
                    got = est.fit(release).truths_.loc[truth.index].to_numpy()
                    scores.setdefault(label, []).append(float((got == truth.to_numpy()).mean()))
            row = ", ".join(f"{m} {np.mean(v):.4f}" for m, v in scores.items())
            lines.append(f"{name} {mech!r}: {row}")
            print(lines[-1], flush=True)
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
