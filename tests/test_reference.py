"""Agreement with crowd-kit 1.4.2, an independent implementation, on every bundled
categorical dataset. The reference outputs are stored in tests/reference/crowdkit (made by
benchmarks/crowdkit_reference.py) because crowd-kit itself is too heavy a test dependency.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privtd import datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import DawidSkene, MajorityVote, OneCoinDawidSkene

REFERENCE = Path(__file__).parent / "reference" / "crowdkit"
CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]


def reference(name: str, tasks: pd.Index) -> pd.DataFrame:
    ref = pd.read_csv(REFERENCE / f"{name}.csv.gz", dtype={"task": str}).set_index("task")
    return ref.loc[tasks]


@pytest.mark.parametrize("name", CATEGORICAL)
def test_majority_vote_shares_match(name):
    answers = datasets.load(name).answers
    ref = reference(name, answers.tasks)
    mv = MajorityVote().fit(answers)
    np.testing.assert_allclose(mv.probas_.max(axis=1), ref["mv_top_share"], atol=1e-12)
    # Where the top share is not tied, the label is unique, and ours is the arg-max.
    top = mv.probas_.to_numpy()
    assert np.all(top[np.arange(len(top)), mv._truth_codes] == top.max(axis=1))
    assert (ref["mv_top_count"] == 1).mean() > 0.5


@pytest.mark.parametrize("name", CATEGORICAL)
@pytest.mark.parametrize("model, column", [(DawidSkene, "ds"), (OneCoinDawidSkene, "one_coin_ds")])
def test_em_labels_match_at_the_same_iteration(name, model, column):
    """Same labels on >= 99.5% of tasks after the same number of EM steps as crowd-kit took.

    crowd-kit stops when its ELBO, which scores one step's posteriors against the next step's
    parameters, stops rising; that quantity is not monotone, and on web (one-coin) and
    adult_content (DS) crowd-kit stops after 2 steps, far from convergence. Comparing at equal
    step counts checks the updates themselves; docs/reference.md lists the agreement at each
    method's own stopping point too.
    """
    answers = datasets.load(name).answers
    ref = reference(name, answers.tasks)
    steps = int(ref[f"{column}_n_iter"].iloc[0])
    ours = model(max_iter=steps, tol=0.0)
    with pytest.warns(ConvergenceWarning):  # tol=0 always runs to max_iter
        ours.fit(answers)
    agree = (ours.truths_.astype(str).to_numpy() == ref[column].astype(str).to_numpy()).mean()
    assert agree >= 0.995, f"{name}/{column}: {agree:.4f} after {steps} steps"
