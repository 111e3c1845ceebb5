"""GLAD and MACE against crowd-kit 1.4.2's stored labels on every bundled categorical dataset
(made by benchmarks/bench_crowdkit_glad_mace.py; crowd-kit is too heavy to import here)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privtd import Answers, datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import GLAD, MACE

REFERENCE = Path(__file__).parent / "reference" / "crowdkit_glad_mace"
CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]


def reference(name: str, tasks: pd.Index) -> pd.DataFrame:
    path = REFERENCE / f"{name}.csv.gz"
    if not path.exists():
        pytest.fail(f"{path} is missing: run benchmarks/bench_crowdkit_glad_mace.py")
    ref = pd.read_csv(path, dtype={"task": str}).set_index("task")
    return ref.loc[tasks.astype(str)]


def agreement(ours: pd.Series, theirs: pd.Series) -> float:
    return float((ours.astype(str).to_numpy() == theirs.astype(str).to_numpy()).mean())


@pytest.mark.parametrize("name", CATEGORICAL)
def test_glad_labels_match_after_the_same_m_steps(name):
    answers = datasets.load(name).answers
    ref = reference(name, answers.tasks)
    # crowd-kit's labels come from the E-step before its last M-step.
    steps = int(ref["glad_n_iter"].iloc[0]) - 1
    assert steps >= 1, "the stored reference must hold at least one M-step to compare"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = GLAD(max_iter=steps, tol=0.0).fit(answers)
    assert agreement(ours.truths_, ref["glad"]) >= 0.995


def crowdkit_start(answers: Answers) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """crowd-kit's MACE start: scipy's uniform(1, 1.5) at random_state=0 is
    1 + 1.5 * RandomState(0).random_sample, the same draw for both arrays; its workers and labels
    are coded in order of first appearance, moved here onto privtd's codes."""
    n_w, k = answers.n_workers, answers.n_labels
    _, worker_of = pd.factorize(answers.worker)
    _, label_of = pd.factorize(answers.value)
    spam = 1 + 1.5 * np.random.RandomState(0).random_sample((n_w, 2))
    strategy = 1 + 1.5 * np.random.RandomState(0).random_sample((n_w, k))
    spam /= spam.sum(axis=1, keepdims=True)
    strategy /= strategy.sum(axis=1, keepdims=True)
    know, spammed, xi = np.empty(n_w), np.empty(n_w), np.empty((n_w, k))
    know[worker_of], spammed[worker_of] = spam[:, 1], spam[:, 0]
    xi[np.ix_(worker_of, label_of)] = strategy
    return know, spammed, xi


@pytest.mark.parametrize("name", CATEGORICAL)
@pytest.mark.parametrize("method", ["em", "vb"])
def test_mace_labels_match_from_the_same_start(name, method):
    answers = datasets.load(name).answers
    ref = reference(name, answers.tasks)
    est = MACE(method=method, max_iter=50, tol=0.0)
    est._starts = [crowdkit_start(answers)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(answers)
    assert agreement(est.truths_, ref[f"mace_{method}"]) >= 0.995
