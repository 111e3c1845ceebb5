"""The aware model selection (AwareSelect), and aware fits on crowds that list idle workers."""

import numpy as np
import pandas as pd
import pytest

from privtd import evaluate
from privtd.answers import Answers
from privtd.datasets import load, make_categorical
from privtd.errors import ValidationError
from privtd.inference import AwareDawidSkene, AwareSelect, aware_method, make_estimator
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


# ------------------------------------------------------------------------ the model selection
def biased_crowd(n_tasks, n_workers, per_task, confusion, seed):
    cube = np.broadcast_to(np.asarray(confusion, dtype=float), (n_workers, 2, 2)).copy()
    answers, truth, _ = make_categorical(
        n_tasks, n_workers, 2, answers_per_task=per_task, confusion=cube, rng=seed
    )
    return answers, truth


@pytest.mark.parametrize("seed", [0, 1])
def test_selection_pools_a_small_noisy_crowd(seed):
    # 200 workers with about 22 answers each, all with one shared bias towards label 0, under
    # one-layer RR at epsilon 1: a per-worker parameter is mostly noise, the shared bias is not.
    answers, _ = biased_crowd(1500, 200, 3, [[0.9, 0.35], [0.1, 0.65]], seed)
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    fit = AwareSelect(mech).fit(mech.perturb(answers, rng=seed))
    assert fit.selected_ == "pooled", fit.heldout_loglik_
    assert isinstance(fit.estimator_, AwareDawidSkene)
    # Every worker carries the one shared confusion.
    assert len(fit.weights_) == answers.n_workers
    assert fit.weights_["n_answers"].sum() == answers.n_answers
    cube = fit.confusions_.to_numpy().reshape(answers.n_workers, 2, 2)
    np.testing.assert_allclose(cube, np.broadcast_to(cube[0], cube.shape))


@pytest.mark.parametrize("seed", [0, 1])
def test_selection_keeps_per_worker_confusions_on_a_large_informative_crowd(seed):
    # 20 workers with 500 answers each, half biased towards each label, at epsilon 4: the
    # biases are learnable and a shared confusion cannot hold both.
    half = np.arange(20) % 2 == 0
    recall_0, recall_1 = np.where(half, 0.95, 0.6), np.where(half, 0.6, 0.95)
    confusion = np.stack(
        [np.stack([recall_0, 1 - recall_0], axis=1), np.stack([1 - recall_1, recall_1], axis=1)],
        axis=2,
    )
    answers, truth = biased_crowd(2000, 20, 5, confusion, seed)
    mech = OneLayerRR.from_epsilon(4.0, n_labels=2)
    perturbed = mech.perturb(answers, rng=seed)
    fit = AwareSelect(mech).fit(perturbed)
    assert fit.selected_ == "aware-ds", fit.heldout_loglik_
    # The chosen model's results, as asked for by name (same decision, same posteriors).
    alone = make_estimator("aware-ds", mechanism=mech).fit(perturbed)
    pd.testing.assert_series_equal(fit.truths_, alone.truths_)
    np.testing.assert_allclose(fit.probas_.to_numpy(), alone.probas_.to_numpy())
    assert fit.decision_ == "balanced"
    # Deterministic given the seed.
    again = AwareSelect(mech).fit(perturbed)
    pd.testing.assert_series_equal(fit.heldout_loglik_, again.heldout_loglik_)


def test_selection_is_a_method_by_name():
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    assert isinstance(make_estimator("aware-select", mechanism=mech, folds=3), AwareSelect)
    answers, _ = biased_crowd(20, 5, 2, [[0.9, 0.2], [0.1, 0.8]], 0)
    with pytest.raises(ValidationError, match="folds"):
        AwareSelect(mech, folds=1).fit(answers)


# ------------------------------------------------------------- one cell of the default's target
def dog_cell(seed):
    """Dog (4 labels, 807 expert truths) after one-layer RR at epsilon 4, and the balanced
    accuracy of majority vote and Dawid-Skene on the same reports."""
    data = load("dog")
    mech = OneLayerRR.from_epsilon(4.0, n_labels=data.answers.n_labels)
    perturbed = mech.perturb(data.answers, rng=seed)

    def score(fit):
        return evaluate(fit.truths_, data.truth)["balanced_accuracy"]

    plain = max(score(make_estimator(m).fit(perturbed)) for m in ("mv", "ds"))
    return data, mech, perturbed, plain, score


TARGET_MARGIN = 0.005  # benchmarks/bench_class_prior.py's MARGIN


def test_selection_reaches_the_plain_methods_on_dog_at_epsilon_4():
    got, plain = [], []
    for seed in (0, 1):
        _, mech, perturbed, best, score = dog_cell(seed)
        got.append(score(AwareSelect(mech, seed=seed).fit(perturbed)))
        plain.append(best)
    assert np.mean(got) >= np.mean(plain) - TARGET_MARGIN, (got, plain)


def test_default_reaches_the_plain_methods_on_dog_at_epsilon_4():
    got, plain = [], []
    for seed in (0, 1):
        _, mech, perturbed, best, score = dog_cell(seed)
        got.append(score(make_estimator(aware_method(mech), mechanism=mech).fit(perturbed)))
        plain.append(best)
    assert np.mean(got) >= np.mean(plain) - TARGET_MARGIN, (got, plain)
