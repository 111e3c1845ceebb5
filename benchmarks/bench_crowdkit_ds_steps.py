"""Dawid-Skene and one-coin Dawid-Skene against crowd-kit 1.4.2 on every bundled categorical
dataset: crowd-kit's step count at its defaults, privtd's agreement after the same steps and
at its own defaults, and both tools' accuracy on the expert truths. Writes
benchmarks/results/crowdkit_ds_steps.txt, the source of docs/reference.md's "Dawid-Skene and
one-coin Dawid-Skene" table (tests/test_readme_figures.py checks the two agree).

    PYTHONPATH=src python benchmarks/bench_crowdkit_ds_steps.py

Answers come from ``privtd.datasets.load``, which merges duplicate (task, worker) pairs with
``on_duplicate="first"``; crowd-kit gets the same rows (``label`` for ``answer``).

crowd-kit's step count is ``len(loss_history_)``: its ``fit`` takes an M-step from the majority
vote's probabilities, then appends one ELBO value per E-step + M-step, at most ``n_iter`` (100)
of them, and breaks once a value rises by less than ``tol`` (1e-5) over the one before (the
first value is compared with -inf, so it always runs at least 2). privtd's ``max_iter`` counts
the same E-step + M-step pairs after the same majority-vote start, so ``max_iter=steps,
tol=0`` runs exactly crowd-kit's steps.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import crowdkit
import crowdkit.aggregation as ck
import numpy as np
import pandas as pd

from privtd import datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import DawidSkene, OneCoinDawidSkene

RESULT = Path(__file__).resolve().parent / "results" / "crowdkit_ds_steps.txt"
CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]
# name in the results file -> (privtd class, crowd-kit class), both at their defaults
MODELS: dict[str, tuple[Any, Any]] = {
    "ds": (DawidSkene, ck.DawidSkene),
    "one-coin-ds": (OneCoinDawidSkene, ck.OneCoinDawidSkene),
}


def same(a: pd.Series, b: pd.Series) -> float:
    """Share of ``a``'s index where ``b`` has the same label (compared as text: crowd-kit may
    hand labels back with another dtype)."""
    b = b.reindex(a.index)
    return float((a.astype(str).to_numpy() == b.astype(str).to_numpy()).mean())


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)  # crowd-kit on pandas 2
    lines = [
        f"# crowd-kit {crowdkit.__version__}; command: PYTHONPATH=src python "
        f"benchmarks/bench_crowdkit_ds_steps.py; load {os.getloadavg()[0]:.2f} at start",
        "# ck_steps = len(loss_history_) of crowd-kit at its defaults (n_iter=100, tol=1e-5); "
        "agree@ck_steps = privtd with max_iter=ck_steps, tol=0; privtd_steps, agree = privtd at "
        "its defaults (max_iter=100, tol=1e-5) against crowd-kit at its defaults; "
        "acc_* = accuracy on the expert truths at each tool's defaults",
        "dataset        model        ck_steps  agree@ck_steps  privtd_steps  agree   "
        "acc_privtd  acc_crowdkit",
    ]
    for name in CATEGORICAL:
        data = datasets.load(name)
        answers = data.answers
        frame = answers.to_frame().rename(columns={"answer": "label"})
        for model, (ours_cls, theirs_cls) in MODELS.items():
            theirs = theirs_cls()
            ck_labels = theirs.fit_predict(frame)
            ck_labels.index = ck_labels.index.astype(answers.tasks.dtype)
            steps = len(theirs.loss_history_)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0 runs to max_iter
                at_steps = ours_cls(max_iter=steps, tol=0.0).fit(answers)
                ours = ours_cls().fit(answers)
            assert at_steps.n_iter_ == steps, (name, model, at_steps.n_iter_, steps)
            lines.append(
                f"{name:14s} {model:11s}  {steps:8d}  {same(at_steps.truths_, ck_labels):14.4f}  "
                f"{ours.n_iter_:12d}  {same(ours.truths_, ck_labels):6.4f}  "
                f"{same(data.truth, ours.truths_):10.4f}  {same(data.truth, ck_labels):12.4f}"
            )
            print(lines[-1], flush=True)
    lines.append(
        f"# load {os.getloadavg()[0]:.2f} at end; numpy {np.__version__}, "
        f"pandas {pd.__version__}, Python {sys.version.split()[0]}"
    )
    RESULT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
