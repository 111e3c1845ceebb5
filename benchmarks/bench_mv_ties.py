"""Majority vote's ties on the expert truths: how much of the accuracy they decide.

For each bundled categorical dataset: the tasks with a truth whose vote is tied, and the
accuracy with ties given to the smallest label (privtd's default), to the label given most
often overall, and a uniformly random tie-break in expectation. Writes
benchmarks/results/mv_ties.txt.

    PYTHONPATH=src python benchmarks/bench_mv_ties.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privtd import datasets
from privtd.inference import MajorityVote

OUT = Path(__file__).resolve().parent / "results" / "mv_ties.txt"
NAMES = ["duchenne", "web", "adult_content", "sentiment", "dog"]


def rows(name: str) -> str:
    data = datasets.load(name)
    probas = MajorityVote().fit(data.answers).probas_
    common = data.truth.index.intersection(probas.index)
    shares = probas.loc[common].to_numpy()
    truth = data.truth.loc[common].to_numpy()
    labels = np.asarray(probas.columns)
    top = np.isclose(shares, shares.max(axis=1, keepdims=True))
    given = np.bincount(data.answers.value, minlength=len(labels))
    first = labels[top.argmax(axis=1)]
    most_given = labels[np.where(top, given[None, :], -1).argmax(axis=1)]
    random = ((top & (labels[None, :] == truth[:, None])).sum(axis=1) / top.sum(axis=1)).mean()
    return (
        f"{name:14s} tied {int((top.sum(axis=1) > 1).sum()):4d} of {len(truth):4d}  "
        f"smallest {np.mean(first == truth):.4f}  most-given {np.mean(most_given == truth):.4f}  "
        f"random (expected) {random:.4f}"
    )


def main() -> None:
    text = "# majority vote: accuracy on the expert truths under three tie rules\n"
    text += "\n".join(rows(name) for name in NAMES) + "\n"
    OUT.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
