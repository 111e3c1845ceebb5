"""Adaptive redundancy's policy (privtd.inference.adaptive): the posteriors through the
mechanism's channel, which tasks it hands out and which it holds back, and that spending answers
where they are needed beats uniform redundancy on a simulated crowd."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privtd.errors import ValidationError
from privtd.inference.adaptive import AdaptiveRedundancy, report_counts
from privtd.mechanisms import OneLayerRR, TwoLayerRR


def test_report_counts():
    counts = report_counts(np.array([0, 0, 2, 1, 0]), np.array([1, 1, 0, 2, 0]), 3, 3)
    assert counts.tolist() == [[1, 2, 0], [0, 0, 1], [1, 0, 0]]
    with pytest.raises(ValidationError, match="label code"):
        report_counts(np.array([0]), np.array([3]), 1, 3)


def test_posteriors_by_hand_through_the_channel():
    # Two labels, one-layer RR at flip f: a report's likelihood under the truth is
    # s (1 - f) + (1 - s) f for a match, the rest for a mismatch.
    mech = OneLayerRR.from_epsilon(1.0)
    counts = np.array([[3.0, 1.0], [0.0, 2.0], [0.0, 0.0]])
    post = AdaptiveRedundancy().posteriors(counts, mech)
    s, f = post.accuracy, mech.f
    match = s * (1 - f) + (1 - s) * f
    odds = (match / (1 - match)) ** np.array([2.0, -2.0, 0.0])  # net reports for label 0
    assert post.probas[:, 0] == pytest.approx(odds / (1 + odds), rel=1e-9)
    assert post.prior.tolist() == [0.5, 0.5]
    # The fitted accuracy is EM's fixed point, shrunk towards 0.7 by ten answers.
    mu = post.probas
    lik = np.array([[match, 1 - match], [1 - match, match]])
    c_mat = np.array([[1 - f, f], [f, 1 - f]])
    correct = ((counts.T @ mu) * s * c_mat / lik).sum()
    assert s == pytest.approx((correct + 7.0) / (counts.sum() + 10.0), abs=1e-5)


def test_the_channel_unsettles_the_same_reports():
    counts = np.array([[4.0, 0.0, 0.0]])
    policy = AdaptiveRedundancy(accuracy=0.8, max_iter=1)
    raw = policy.posteriors(counts).confidence[0]
    strong = policy.posteriors(counts, OneLayerRR.from_epsilon(3.0, n_labels=3)).confidence[0]
    weak = policy.posteriors(counts, OneLayerRR.from_epsilon(0.5, n_labels=3)).confidence[0]
    assert raw > strong > weak > 1 / 3
    two = TwoLayerRR.from_epsilon(1.0, n_labels=3, a=0.1)
    assert policy.posteriors(counts, two).confidence[0] < raw


def test_which_tasks_are_handed_out():
    mech = OneLayerRR.from_epsilon(2.0)
    # Task 0 settled, task 1 torn, task 2 untouched, task 3 at its cap, task 4 leaning.
    counts = np.array([[4.0, 0.0], [2.0, 2.0], [0.0, 0.0], [3.0, 2.0], [2.0, 1.0]])
    policy = AdaptiveRedundancy(target=0.9, max_per_task=5, batch=10)
    assert policy.posteriors(counts, mech).confidence[0] >= 0.9
    # Untouched first (below min_per_task), then least settled; settled and capped never.
    assert policy.next_tasks(counts, mech, rng=0).tolist() == [2, 1, 4]
    exclude = np.array([False, False, True, False, False])
    assert policy.next_tasks(counts, mech, exclude=exclude, rng=0).tolist() == [1, 4]
    assert AdaptiveRedundancy(target=0.9, max_per_task=5, batch=1).next_tasks(
        counts, mech, rng=0
    ).tolist() == [2]
    # Every task settled or capped: nothing; the answer budget spent: nothing.
    assert policy.next_tasks(counts[[0, 3]], mech, rng=0).size == 0
    budget = AdaptiveRedundancy(target=0.9, max_per_task=5, max_answers=18)
    assert budget.next_tasks(counts, mech, rng=0).size == 2  # 16 reports in, room for 2
    assert budget.next_tasks(counts, mech, n_answers=18, rng=0).size == 0
    # min_per_task: below it comes first whatever the posterior, fewest reports first.
    lead = AdaptiveRedundancy(target=0.9, min_per_task=4, max_per_task=8)
    assert lead.next_tasks(counts, mech, rng=0).tolist()[:2] == [2, 4]


def test_ties_are_broken_by_the_seed_only():
    counts = np.zeros((50, 2))
    policy = AdaptiveRedundancy(batch=10)
    first = policy.next_tasks(counts, None, rng=1)
    assert policy.next_tasks(counts, None, rng=1).tolist() == first.tolist()
    assert policy.next_tasks(counts, None, rng=2).tolist() != first.tolist()


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"target": 1.0}, "target"),
        ({"max_per_task": 0}, "max_per_task"),
        ({"min_per_task": 3, "max_per_task": 2}, "min_per_task <= max_per_task"),
        ({"batch": 1.5}, "batch"),
        ({"class_prior": "flat"}, "class_prior"),
    ],
)
def test_bad_settings_say_what_to_do(params, match):
    with pytest.raises(ValidationError, match=match):
        AdaptiveRedundancy(**params)


def test_a_target_no_answer_can_miss_is_refused():
    with pytest.raises(ValidationError, match="above 0.3333"):
        AdaptiveRedundancy(target=0.3).posteriors(np.zeros((2, 3)))
    with pytest.raises(ValidationError, match="n_labels=2"):
        AdaptiveRedundancy().posteriors(np.zeros((2, 2)), OneLayerRR.from_epsilon(1.0, 3))


def _crowd(seed: int, adaptive: bool, n: int = 400, per_task: int = 4) -> float:
    """Error of the posterior's decision after ``per_task`` reports a task on average, handed
    out in batches of 20 by the policy or round-robin; workers right 80% of the time, reports
    through one-layer RR at epsilon 1. Answers are drawn on demand, so no task runs out."""
    gen = np.random.default_rng(seed)
    mech = OneLayerRR.from_epsilon(1.0)
    keep = 0.8 * (1 - mech.f) + 0.2 * mech.f
    truth = gen.integers(0, 2, n)
    counts = np.zeros((n, 2))
    policy = AdaptiveRedundancy(target=0.99, max_per_task=50, batch=20)
    for _ in range(n * per_task // 20):
        if adaptive:
            tasks = policy.next_tasks(counts, mech, rng=gen)
        else:
            tasks = np.argsort(counts.sum(axis=1) + gen.random(n) / 2, kind="stable")[:20]
        report = np.where(gen.random(tasks.size) < keep, truth[tasks], 1 - truth[tasks])
        np.add.at(counts, (tasks, report), 1.0)
    mu = policy.posteriors(counts, mech).probas
    tie = mu[:, 0] == mu[:, 1]
    decided = np.where(tie, gen.integers(0, 2, n), mu.argmax(axis=1))
    return float((decided != truth).mean())


def test_answers_spent_where_needed_beat_uniform_redundancy():
    seeds = range(4)
    uniform = np.array([_crowd(s, False) for s in seeds])
    adaptive = np.array([_crowd(s, True) for s in seeds])
    # Uniform's error is about 0.29 here; one seed's error has a standard error of
    # sqrt(0.29 * 0.71 / 400) = 0.023, the mean of four paired differences about 0.016 (at most
    # twice one seed's over four seeds). The policy gains about 0.06 (0.28 -> 0.22 over six
    # seeds), so asking for 0.02 leaves two and a half standard errors.
    assert adaptive.mean() <= uniform.mean() - 0.02, (uniform, adaptive)
    assert math.isclose(uniform.mean(), 0.29, abs_tol=0.05)


def test_docstring_example_runs():
    import doctest

    import privtd.inference.adaptive

    result = doctest.testmod(privtd.inference.adaptive)
    assert result.attempted > 0 and result.failed == 0
