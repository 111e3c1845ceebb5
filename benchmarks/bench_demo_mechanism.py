"""Which mechanism the main job (`privtd demo`) shows first: utility of one-layer and two-layer
RR on Duchenne at the same stated epsilon, beside what a worker gets under each.

For each mechanism and seed 0-4: accuracy and balanced accuracy against the 159 expert labels
(63.5% one class) of majority vote,
Dawid-Skene and the perturbation-aware default (aware-ds), and the median and largest worker's
figures (one answer given the others, per answer; whole release, per worker). One JSON line per
mechanism, then the means; README.md quotes them (tests/test_readme_figures.py).

    python benchmarks/bench_demo_mechanism.py > benchmarks/results/demo_mechanism.txt
"""

from __future__ import annotations

import json

import numpy as np

from privtd import datasets
from privtd.evaluation import evaluate
from privtd.inference import make_estimator
from privtd.mechanisms import OneLayerRR, TwoLayerRR

SEEDS = range(5)
EPSILON = 1.0


def main() -> None:
    data = datasets.load("duchenne")
    answers, truth = data.answers, data.truth
    counts = answers.worker_counts()
    median, largest = int(np.median(counts)), int(counts.max())
    for cls in (OneLayerRR, TwoLayerRR):
        mech = cls.from_epsilon(EPSILON, answers.n_labels)
        accuracy: dict[str, list[float]] = {"mv": [], "ds": [], "aware-ds": []}
        balanced: dict[str, list[float]] = {m: [] for m in accuracy}
        for seed in SEEDS:
            release = mech.perturb(answers, rng=seed)
            for method in accuracy:
                kwargs = {"mechanism": mech} if method == "aware-ds" else {}
                fit = make_estimator(method, **kwargs).fit(release)
                score = evaluate(fit.truths_, truth)
                accuracy[method].append(score["accuracy"])
                balanced[method].append(score["balanced_accuracy"])
        print(
            json.dumps(
                {
                    "mechanism": mech.name,
                    "epsilon": EPSILON,
                    "seeds": list(SEEDS),
                    "accuracy_mean": {m: round(float(np.mean(v)), 4) for m, v in accuracy.items()},
                    "accuracy": accuracy,
                    "balanced_accuracy_mean": {
                        m: round(float(np.mean(v)), 4) for m, v in balanced.items()
                    },
                    "balanced_accuracy": balanced,
                    "median_worker": median,
                    "largest_worker": largest,
                    "given_others_median": mech.answer_epsilon(median),
                    "release_median": mech.release_epsilon(median),
                    "release_largest": mech.release_epsilon(largest),
                }
            )
        )


if __name__ == "__main__":
    main()
