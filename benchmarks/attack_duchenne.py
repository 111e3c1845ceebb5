"""The reconstruction attack on Duchenne, one-layer against two-layer at equal epsilon (the
table in docs/privacy.md).

    python benchmarks/attack_duchenne.py --trials 20
"""

from __future__ import annotations

import argparse

import numpy as np

from privtd import datasets
from privtd.attack import attack
from privtd.mechanisms import OneLayerRR, TwoLayerRR


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    answers = datasets.load("duchenne").answers
    print("| epsilon | mechanism | as reported | signed inversion | inverted workers |")
    print("|---|---|---|---|---|")
    for eps in (2.0, 1.0, 0.5, 0.1, 0.0):
        for cls in (OneLayerRR, TwoLayerRR):
            mech = cls.from_epsilon(eps)
            runs = [attack(answers, mech.perturb(answers, rng=s)) for s in range(args.trials)]
            rep = np.mean([r.as_reported for r in runs])
            inv = np.mean([r.recovered for r in runs])
            se = np.std([r.recovered for r in runs], ddof=1) / np.sqrt(args.trials)
            flagged = np.mean([r.inverted_workers for r in runs])
            print(f"| {eps:g} | {mech.name} | {rep:.4f} | {inv:.4f} ± {se:.4f} | {flagged:.1f} |")
    print(f"\nchance (most common original answer): {runs[0].chance:.4f}")


if __name__ == "__main__":
    main()
