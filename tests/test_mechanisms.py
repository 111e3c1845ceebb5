"""Randomized-response mechanisms: closed forms, distributions, tightness, and both ways to run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privtd import BudgetExceededError, ValidationError, datasets
from privtd.mechanisms import (
    BinaryRR,
    Budget,
    OneLayerRR,
    TwoLayerRR,
    make_mechanism,
    worker_totals,
)

# SPEC B0.2: epsilon -> f (one-layer, s = 2) -> b = 2f (two-layer, a = 0).
P0_TABLE = [
    (1.0, 0.2689, 0.5379),
    (0.9, 0.2891, 0.5781),
    (0.8, 0.3100, 0.6201),
    (0.7, 0.3318, 0.6636),
    (0.6, 0.3543, 0.7087),
    (0.5, 0.3775, 0.7551),
    (0.4, 0.4013, 0.8026),
    (0.3, 0.4256, 0.8511),
    (0.2, 0.4502, 0.9003),
    (0.1, 0.4750, 0.9500),
    (0.01, 0.4975, 0.9950),
    (0.001, 0.4998, 0.9995),
    (0.0, 0.5, 1.0),
]


@pytest.mark.parametrize("eps, f, b", P0_TABLE)
def test_p0_table_both_directions(eps, f, b):
    # The table's epsilon-0 row is one-layer's uninformative flip: asked for explicitly.
    one = OneLayerRR.from_epsilon(eps, allow_uninformative=True)
    two = TwoLayerRR.from_epsilon(eps)
    assert one.f == pytest.approx(f, abs=5e-5)
    assert (two.a, two.b) == (0.0, pytest.approx(b, abs=5e-5))
    assert one.epsilon == pytest.approx(eps, abs=1e-12)
    assert two.epsilon == pytest.approx(eps, abs=1e-12)


def test_epsilon_formulas_for_more_labels():
    # s = 4, f = 0.3: epsilon = ln(0.7 * 3 / 0.3) = ln 7.
    assert OneLayerRR(0.3, 4).epsilon == pytest.approx(math.log(7))
    # Two-layer with a + b = 0.6 equals one-layer with f = 0.3 (P0 Theorem 6.4).
    assert TwoLayerRR(0.1, 0.5, 4).epsilon == pytest.approx(math.log(7))
    assert BinaryRR.from_keep(0.8).epsilon == pytest.approx(math.log(4))
    assert BinaryRR.from_epsilon(math.log(4)).keep == pytest.approx(0.8)


def test_two_layer_infeasible_is_an_error_with_the_fix():
    # s = 4, epsilon = 0 needs a + b = 1.5: with a = 0, b = 1.5 > 1.
    with pytest.raises(ValidationError, match=r"Choose a in \[0.5, 0.75\], or leave a unset") as e:
        TwoLayerRR.from_epsilon(0.0, n_labels=4, a=0.0)
    assert e.value.param == "a"  # the CLI names its own spelling, -p a=VALUE
    # Left unset, a is the paper's 0 where feasible, else the smallest feasible one.
    auto = TwoLayerRR.from_epsilon(0.0, n_labels=4)
    assert (auto.a, auto.b) == (pytest.approx(0.5), 1.0) and auto.epsilon == pytest.approx(0.0)
    assert TwoLayerRR.from_epsilon(1.0, n_labels=2).a == 0.0
    ok = TwoLayerRR.from_epsilon(0.0, n_labels=4, a=0.6)
    assert (ok.a, ok.b) == (0.6, pytest.approx(0.9)) and ok.epsilon == pytest.approx(0.0)


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: OneLayerRR.from_epsilon(-1.0),
            r"'epsilon' parameter of OneLayerRR must be a float in \[0, inf\). Got -1.0",
        ),
        (lambda: TwoLayerRR(0.6, 0.4), "a <= b"),
        (lambda: TwoLayerRR(0.0, 1.2), "'b' parameter of TwoLayerRR must be a float in \\[0, 1\\]"),
        (lambda: TwoLayerRR(0.0, 0.0), "a \\+ b > 0"),
        (lambda: OneLayerRR(1.5), "'f' parameter of OneLayerRR must be a float in \\(0, 1\\)"),
        (lambda: OneLayerRR(0.2, 1), "'n_labels' parameter of OneLayerRR must be an int >= 2"),
        (lambda: BinaryRR.from_epsilon(1.0, n_labels=3), "BinaryRR is for 2 labels"),
        (lambda: make_mechanism("laplace-x", 1.0), "Unknown mechanism 'laplace-x'"),
        (
            lambda: make_mechanism("one-layer", 1.0, bogus=2),
            "Bad parameter for mechanism 'one-layer': it takes no parameter 'bogus' "
            r"\(its parameters: n_labels\)",
        ),
        (lambda: make_mechanism("one-layer"), "it needs f or an epsilon"),
        (lambda: make_mechanism("two-layer", a=0.1), "it needs b or an epsilon"),
    ],
)
def test_bad_parameters(build, message):
    with pytest.raises(ValidationError, match=message):
        build()


def exact_output_pmf(f: float, s: int, x: int) -> np.ndarray:
    """P(output | input x) of flipping with probability f, from the definition (SPEC B0.1)."""
    pmf = np.full(s, f / (s - 1))
    pmf[x] = 1 - f
    return pmf


@pytest.mark.parametrize(
    "mech", [OneLayerRR(0.3, 4), TwoLayerRR(0.1, 0.5, 4), BinaryRR.from_keep(0.8)]
)
def test_guarantee_is_tight(mech):
    # The output law per answer (two-layer: averaged over f_u ~ U(a, b), whose mean is (a+b)/2).
    s = mech.n_labels
    f = mech.f if isinstance(mech, OneLayerRR) else (mech.a + mech.b) / 2
    loss = max(
        np.max(np.log(exact_output_pmf(f, s, x1)) - np.log(exact_output_pmf(f, s, x2)))
        for x1 in range(s)
        for x2 in range(s)
        if x1 != x2
    )
    assert loss <= mech.epsilon + 1e-12  # the claim holds
    assert loss > 0.999 * mech.epsilon  # and a slightly smaller claim would not


def test_one_layer_frequencies():
    n = 200_000
    codes = np.zeros(n, dtype=np.int64)
    mech = OneLayerRR(0.3, 4)
    answers = datasets.make_categorical(n, 1, 4, answers_per_task=1, accuracy=np.ones(1), rng=1)[0]
    out = mech.perturb(answers.with_values(codes.astype(answers.value.dtype)), rng=2).value
    freq = np.bincount(out, minlength=4) / n
    expected = exact_output_pmf(0.3, 4, 0)
    se = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(freq - expected) < 4.5 * se)


def test_two_layer_frequencies_and_worker_flips():
    # 4,000 workers x 50 answers, all answering label 0.
    answers, _, _ = datasets.make_categorical(
        50,
        4000,
        2,
        answers_per_task=None,
        accuracy=np.ones(4000),
        prior=np.array([1.0, 0.0]),
        rng=3,
    )
    mech = TwoLayerRR(0.0, 0.8)
    out = mech.perturb(answers, rng=5)
    flips = mech.flips_for(answers, rng=5)
    # f_u ~ U(0, 0.8): mean 0.4, sd 0.8 / sqrt(12).
    assert abs(flips.mean() - 0.4) < 4 * 0.8 / math.sqrt(12 * 4000)
    assert flips.min() >= 0.0 and flips.max() <= 0.8
    # The marginal flip rate is (a + b) / 2; the per-worker rate follows that worker's f_u.
    flipped = out.value != answers.value
    assert abs(flipped.mean() - 0.4) < 4.5 * math.sqrt(0.24 / flipped.size) + 4 * 0.23 / math.sqrt(
        4000
    )
    per_worker = np.bincount(out.worker, weights=flipped) / 50
    resid = per_worker - flips
    assert np.abs(resid).max() < 5 * math.sqrt(0.25 / 50)
    eps_u = mech.conditional_epsilons(flips)
    # P(eps_u <= m) = tanh(m / 2) / 0.8, so the median is 2 atanh(0.4) = 0.847; its standard
    # error is 1 / (2 * density * sqrt(4000)) = 0.015 with density 0.625 * (1 - 0.4^2).
    assert abs(np.median(eps_u) - 2 * math.atanh(0.4)) < 4 * 0.015
    assert eps_u.max() > 5 * mech.epsilon  # the SPEC C3b caveat, measured


@pytest.mark.parametrize("mech", [OneLayerRR(0.3, 3), TwoLayerRR(0.1, 0.7, 3)])
def test_record_local_equals_batch_for_a_seed(mech):
    answers, _, _ = datasets.make_categorical(200, 30, 3, answers_per_task=6, rng=4)
    batch = mech.perturb(answers, rng=123)
    labels = list(answers.labels)
    for w in range(answers.n_workers):
        mask = answers.worker == w
        local = mech.perturb_worker(
            answers.labels.take(answers.value[mask]).tolist(),
            labels=labels,
            worker=answers.workers[w],
            tasks=answers.tasks.take(answers.task[mask]).tolist(),
            rng=123,
        )
        assert local == answers.labels.take(batch.value[mask]).tolist()


def test_generators_are_reproducible_and_seeds_differ():
    answers, _, _ = datasets.make_categorical(500, 20, 2, answers_per_task=5, rng=0)
    mech = OneLayerRR.from_epsilon(0.5)
    a = mech.perturb(answers, rng=np.random.default_rng(9)).value
    b = mech.perturb(answers, rng=np.random.default_rng(9)).value
    assert np.array_equal(a, b)
    assert not np.array_equal(
        mech.perturb(answers, rng=1).value, mech.perturb(answers, rng=2).value
    )


def test_perturb_worker_checks_domain_and_budget():
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    with pytest.raises(ValidationError, match="not in the answer domain"):
        mech.perturb_worker(["maybe"], labels=["no", "yes"])
    with pytest.raises(ValidationError, match="built for 2 labels"):
        mech.perturb_worker(["a"], labels=["a", "b", "c"])
    budget = Budget(2.5)
    out = mech.perturb_worker(["no", "yes"], labels=["no", "yes"], budget=budget, rng=1)
    assert len(out) == 2 and budget.remaining == pytest.approx(0.5)
    with pytest.raises(BudgetExceededError, match="Nothing was perturbed or sent"):
        mech.perturb_worker(["no"], labels=["no", "yes"], budget=budget)
    assert budget.remaining == pytest.approx(0.5)  # a refused release costs nothing


def test_a_budget_charges_each_draw_its_whole_release():
    # Two-layer's answers of one perturb_worker call share one f_u: the call is charged
    # release_epsilon(n) (13.15 for 20 answers at stated epsilon 1), not 20 x the marginal 1;
    # calls are separate draws and add up.
    mech = TwoLayerRR.from_epsilon(1.0, 2)
    budget = Budget(30.0)
    mech.perturb_worker(["no"] * 20, labels=["no", "yes"], budget=budget)
    assert budget.spent_epsilon == pytest.approx(mech.release_epsilon(20), rel=1e-12)
    assert budget.spent_epsilon == pytest.approx(13.147, abs=1e-3)
    mech.perturb_worker(["no"] * 5, labels=["no", "yes"], budget=budget)
    spent = mech.release_epsilon(20) + mech.release_epsilon(5)
    assert budget.spent_epsilon == pytest.approx(spent, rel=1e-12)
    with pytest.raises(BudgetExceededError) as refused:
        mech.perturb_worker(["no"] * 20, labels=["no", "yes"], budget=budget)
    message = str(refused.value)
    assert "\n" not in message and "costs epsilon 13.1468 for all 20 together" in message
    assert budget.spent_epsilon == pytest.approx(spent, rel=1e-12)


def test_worker_totals_bill_the_whole_release():
    data = datasets.load("duchenne")
    totals = worker_totals(data.answers, OneLayerRR.from_epsilon(0.5))
    assert totals["n_released"].sum() == data.answers.n_answers
    np.testing.assert_allclose(totals["epsilon_total"], 0.5 * totals["n_released"])
    np.testing.assert_allclose(totals["epsilon_answer_given_others"], 0.5)
    # Two-layer's answers share f_u: the total is the exact release figure, above composition.
    mech = TwoLayerRR.from_epsilon(0.5)
    totals = worker_totals(data.answers, mech)
    np.testing.assert_allclose(totals["epsilon_marginal"], 0.5)
    k = int(totals["n_released"].max())
    worst = totals[totals["n_released"] == k].iloc[0]
    assert worst["epsilon_total"] == pytest.approx(mech.release_epsilon(k))
    assert worst["epsilon_answer_given_others"] == pytest.approx(mech.answer_epsilon(k))
    assert (totals["epsilon_total"][totals["n_released"] > 1] > 0.5 * totals["n_released"]).all()
    assert TwoLayerRR.from_epsilon(0.5).guarantee.compose(4).epsilon == pytest.approx(2.0)
    assert "not a worker-level guarantee" in TwoLayerRR.from_epsilon(0.5).guarantee.note


def test_numeric_answers_are_refused():
    answers, _, _ = datasets.make_numeric(10, 5, rng=0)
    with pytest.raises(ValidationError, match="categorical answers; these are numeric"):
        OneLayerRR.from_epsilon(1.0).perturb(answers)


def test_attack_measures_the_two_layer_leak():
    from privtd.attack import attack

    # Good workers, epsilon = 0.3 per answer for both: one-layer's answers cannot be recovered
    # beyond what is reported, while two-layer's per-worker f_u lets the requester invert the
    # workers who drew f_u > 1/2 (SPEC C3b).
    answers, _, _ = datasets.make_categorical(
        300, 60, 2, answers_per_task=20, accuracy=(0.75, 0.95), rng=1
    )
    one = [attack(answers, OneLayerRR.from_epsilon(0.3).perturb(answers, rng=s)) for s in range(4)]
    two = [attack(answers, TwoLayerRR.from_epsilon(0.3).perturb(answers, rng=s)) for s in range(4)]
    best_one = np.mean([r.best for r in one])
    best_two = np.mean([r.best for r in two])
    # 6,000 answers per run, 4 runs: a binomial standard error of about 0.0032 per mean.
    assert best_one < 0.6 and best_two > best_one + 10 * 0.0032
