"""The aware model selection (AwareSelect), and aware fits on crowds that list idle workers."""

import numpy as np
import pandas as pd
import pytest

from privtd.answers import Answers
from privtd.inference import make_estimator
from privtd.mechanisms import OneLayerRR


def zipf_crowd(seed: int) -> Answers:
    """The skewed product-matching crowd (tests/test_decision.py) with Zipf(1.6) activity:
    8,315 tasks, 3 answers each, 12% of truths class 1, 176 workers listed, of whom the least
    active may give no answer at all (a campaign's enrolled workers who never answered)."""
    gen = np.random.default_rng(seed)
    n_workers, n_tasks = 176, 8315
    kind = gen.choice(4, size=n_workers, p=[0.45, 0.35, 0.12, 0.08])
    recall_1 = gen.uniform(
        np.array([0.1, 0.75, 0.5, 0.87])[kind], np.array([0.5, 0.9, 0.5, 0.87])[kind]
    )
    recall_0 = gen.uniform(
        np.array([0.95, 0.93, 0.5, 0.11])[kind], np.array([1.0, 0.99, 0.5, 0.11])[kind]
    )
    activity = gen.zipf(1.6, n_workers).astype(float)
    truth = (gen.random(n_tasks) < 0.12).astype(np.int8)
    # Three distinct workers per task, drawn in proportion to activity (Efraimidis-Spirakis keys).
    keys = gen.random((n_tasks, n_workers)) ** (1.0 / activity)
    worker = np.argsort(-keys, axis=1)[:, :3].ravel().astype(np.int32)
    task = np.repeat(np.arange(n_tasks, dtype=np.int32), 3)
    u = gen.random(task.size)
    value = np.where(truth[task] == 1, u < recall_1[worker], u >= recall_0[worker])
    return Answers(
        task,
        worker,
        value.astype(np.int8),
        pd.Index(np.arange(n_tasks), name="task"),
        pd.Index(np.arange(n_workers), name="worker"),
        pd.Index([0, 1]),
        None,
        (),
    )


@pytest.mark.parametrize("method", ["aware-one-coin", "aware-ds"])
def test_idle_workers_leave_the_posteriors_finite(method):
    # Seed 2 lists a worker with no answer; its 0 / 0 share of matches used to turn the
    # one-coin model's extrapolation, and every posterior after it, into NaN.
    answers = zipf_crowd(2)
    assert (np.bincount(answers.worker, minlength=answers.n_workers) == 0).any()
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    fit = make_estimator(method, mechanism=mech).fit(mech.perturb(answers, rng=2))
    assert np.isfinite(fit.probas_.to_numpy()).all()
    assert np.isfinite(fit.weights_["weight"].to_numpy()).all()
    # Both classes are still given (the crowd's truths are 12% class 1).
    assert 0.02 < (fit.truths_ == 1).mean() < 0.5
