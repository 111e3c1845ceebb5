"""Where crowd-kit 1.4.2 stops Dawid-Skene after 2 EM steps: privtd's fit after those 2 steps
and at its own stop, by log-likelihood per answer (what EM climbs) and accuracy on the expert
truths. Writes benchmarks/results/crowdkit_stops.txt.

    PYTHONPATH=src python benchmarks/bench_crowdkit_stops.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from privtd import datasets
from privtd.inference import DawidSkene, OneCoinDawidSkene


def accuracy(est: DawidSkene | OneCoinDawidSkene, truth: pd.Series) -> float:
    return float(np.mean(est.truths_.loc[truth.index].to_numpy() == truth.to_numpy()))


OUT = Path(__file__).resolve().parent / "results" / "crowdkit_stops.txt"
# (dataset, model) pairs where crowd-kit's stopping test ends the fit after 2 steps
# (docs/reference.md, "Dawid-Skene and one-coin Dawid-Skene").
CASES = [("adult_content", DawidSkene), ("web", OneCoinDawidSkene)]


def main() -> None:
    lines = ["# privtd after crowd-kit's 2 steps vs at its own stop (tol 1e-5)"]
    for name, model in CASES:
        data = datasets.load(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # max_iter=2 warns that it did not converge
            two = model(max_iter=2, tol=0.0).fit(data.answers)
        own = model().fit(data.answers)

        lines.append(
            f"{name:14s} {model.__name__:18s} 2 steps: log-lik/answer {two.objective_[-1]:.6f} "
            f"accuracy {accuracy(two, data.truth):.4f} | own stop ({own.n_iter_} steps): "
            f"log-lik/answer {own.objective_[-1]:.6f} accuracy {accuracy(own, data.truth):.4f}"
        )
    text = "\n".join(lines) + "\n"
    OUT.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
