"""The perturbation-aware one-coin model: its channel algebra and E-step against brute force,
its bounds, and its accuracy on perturbed synthetic crowds."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import privtd
from privtd.errors import ValidationError
from privtd.inference import AwareOneCoin, DawidSkene, MajorityVote, perturbation_aware
from privtd.inference._ops import squarem_extrapolate
from privtd.inference.perturbation_aware import accuracy_cells, flip_law
from privtd.mechanisms import ExpGaussian, OneLayerRR, TwoLayerRR


@pytest.mark.parametrize("k", [2, 3, 5])
def test_composed_channel_is_one_coin_with_the_stated_accuracy(k: int) -> None:
    """Worker confusion then RR flip, multiplied out cell by cell, is one-coin with accuracy
    s (1 - f) + (1 - s) f / (K - 1)."""
    s, f = 0.7, 0.3
    worker = np.full((k, k), (1 - s) / (k - 1)) + np.eye(k) * (s - (1 - s) / (k - 1))
    channel = np.full((k, k), f / (k - 1)) + np.eye(k) * (1 - f - f / (k - 1))
    composed = np.zeros((k, k))
    for z, x, y in itertools.product(range(k), repeat=3):  # reported, answered, truth
        composed[z, y] += channel[z, x] * worker[x, y]
    accuracy = s * (1 - f) + (1 - s) * f / (k - 1)
    np.testing.assert_allclose(np.diag(composed), accuracy)
    np.testing.assert_allclose(composed[~np.eye(k, dtype=bool)], (1 - accuracy) / (k - 1))


def test_flip_law_follows_the_mechanism() -> None:
    flips, weights = flip_law(OneLayerRR.from_epsilon(1.0, 3), 3)
    assert flips.tolist() == [pytest.approx(2 / (2 + np.e))] and weights.tolist() == [1.0]
    flips, weights = flip_law(TwoLayerRR(0.1, 0.5), 2, n_points=4)
    np.testing.assert_allclose(flips, [0.15, 0.25, 0.35, 0.45])
    assert weights.sum() == pytest.approx(1.0)
    with pytest.raises(ValidationError, match="built for 3 labels"):
        flip_law(OneLayerRR.from_epsilon(1.0, 3), 2)
    with pytest.raises(ValidationError, match="models randomized response"):
        flip_law(ExpGaussian(1.0, 0.0, 1.0), 2)


def tiny(seed: int = 0) -> privtd.Answers:
    answers, _, _ = privtd.datasets.make_categorical(6, 4, 3, answers_per_task=3, rng=seed)
    return answers


def test_posteriors_match_brute_force_enumeration() -> None:
    """Each task's posterior is the normalised product, over every label, of the class prior and
    each worker's expected log-likelihood under its grid posterior: enumerated label by label,
    answer by answer, worker by worker."""
    answers = tiny()
    k = answers.n_labels
    # One iteration: the E-step uses the worker step computed from the soft-MV start.
    est = AwareOneCoin(OneLayerRR.from_epsilon(2.0, 3), max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        est.fit(answers)
    assert est.probas_ is not None
    # Brute force from the first iteration's inputs: soft-MV matches, the start prior.
    flips, _ = flip_law(est.mechanism, k)
    s = np.linspace(0, 1, est.grid)
    acc = np.clip(s * (1 - flips[0]) + (1 - s) * flips[0] / (k - 1), 1e-12, 1 - 1e-12)
    g0 = np.clip(s, 0.5 / est.grid, 1 - 0.5 / est.grid)  # Beta(2, 1) start
    g0 = g0 / g0.sum()
    votes = np.zeros((answers.n_tasks, k))
    np.add.at(votes, (answers.task, answers.value), 1.0)
    mu0 = votes / votes.sum(axis=1, keepdims=True)
    n_w = answers.n_workers
    expected_right, expected_wrong = np.zeros(n_w), np.zeros(n_w)
    for u in range(n_w):
        mine = answers.worker == u
        m = sum(mu0[q, z] for q, z in zip(answers.task[mine], answers.value[mine], strict=True))
        n = int(mine.sum())
        logpost = np.log(g0) + m * np.log(acc) + (n - m) * (np.log1p(-acc) - np.log(k - 1))
        post = np.exp(logpost - logpost.max())
        post /= post.sum()
        expected_right[u] = post @ np.log(acc)
        expected_wrong[u] = post @ (np.log1p(-acc) - np.log(k - 1))
    prior = np.full(k, 1.0 / k)  # the default class prior is uniform
    for q in range(answers.n_tasks):
        scores = np.log(prior).copy()
        for label in range(k):
            mine = answers.task == q
            for u, z in zip(answers.worker[mine], answers.value[mine], strict=True):
                scores[label] += expected_right[u] if z == label else expected_wrong[u]
        brute = np.exp(scores - scores.max())
        np.testing.assert_allclose(est.probas_.to_numpy()[q], brute / brute.sum(), rtol=1e-9)


def test_one_layer_weights_are_bounded_by_epsilon() -> None:
    answers, _, _ = privtd.datasets.make_categorical(2000, 50, 4, accuracy=(0.9, 1.0), rng=1)
    mech = OneLayerRR.from_epsilon(1.0, 4)
    fit = AwareOneCoin(mech).fit(mech.perturb(answers, rng=2))
    # log(A / ((1 - A) / (K - 1))) <= epsilon for every feasible A; expectations keep the bound.
    assert fit.weights_["log_odds"].max() <= 1.0 + 1e-9
    assert (fit.weights_["weight"] <= 1 - mech.f + 1e-12).all()


def test_two_layer_at_epsilon_zero_inverts_flipping_workers() -> None:
    """With a = 0, b = 1 half the workers flip most answers; their votes must count inverted."""
    answers, truth, _ = privtd.datasets.make_categorical(3000, 40, 2, accuracy=(0.85, 0.95), rng=4)
    mech = TwoLayerRR.from_epsilon(0.0)
    perturbed = mech.perturb(answers, rng=5)
    fit = AwareOneCoin(mech).fit(perturbed)
    assert (fit.weights_["log_odds"] < 0).sum() >= 10
    mv = MajorityVote().fit(perturbed)
    assert (fit.truths_ == truth).mean() > (mv.truths_ == truth).mean() + 0.1


def test_two_labels_keep_the_orientation_in_which_most_workers_are_honest() -> None:
    """Duchenne under two-layer RR at epsilon 0 (flips U(0, 1)): the model is symmetric under
    swapping both labels and every worker's accuracy, and from the majority-vote start this seed
    led EM towards the mirror image (47% agreement with majority vote). The fit must come back in
    the orientation that agrees with majority vote."""
    answers = privtd.datasets.load("duchenne").answers
    mech = TwoLayerRR.from_epsilon(0.0)
    perturbed = mech.perturb(answers, rng=101)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        fit = AwareOneCoin(mech).fit(perturbed)
    mv = MajorityVote().fit(perturbed)
    assert (fit.truths_ == mv.truths_).mean() > 0.5


@pytest.mark.parametrize(("k", "eps"), [(5, 1.0), (5, 2.0), (2, 2.0)])
def test_at_least_as_accurate_as_majority_vote_and_dawid_skene(k: int, eps: float) -> None:
    """Generalized RR on a one-coin crowd (20,000 tasks, 200 workers, 5 answers per task). The
    tolerance is two standard errors of an accuracy difference over 20,000 paired tasks."""
    answers, truth, _ = privtd.datasets.make_categorical(20_000, 200, k, rng=6)
    mech = OneLayerRR.from_epsilon(eps, k)
    perturbed = mech.perturb(answers, rng=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        scores = {
            name: float((est.fit(perturbed).truths_ == truth).mean())
            for name, est in (
                ("mv", MajorityVote()),
                ("ds", DawidSkene()),
                ("aware", AwareOneCoin(mech)),
            )
        }
    tolerance = 2 * np.sqrt(0.25 / 20_000)
    assert scores["aware"] >= max(scores["mv"], scores["ds"]) - tolerance, scores


def test_accuracy_cells_push_the_flip_law_forward() -> None:
    """Under a flip law the (s, f) grid is binned onto cells of observed accuracy. Each row of C
    is a probability law; a worker's posterior expected log-accuracy on the cells matches the
    exact enumeration over (s, f) to within the cell width's effect."""
    k, s = 2, np.linspace(0.0, 1.0, 101)
    flips, weights = flip_law(TwoLayerRR.from_epsilon(0.5), k)
    centres, conv = accuracy_cells(s, flips, weights, k)
    np.testing.assert_allclose(conv.sum(axis=1), 1.0)
    g = np.clip(s, 0.005, 0.995)
    g /= g.sum()
    exact_acc = s[:, None] * (1 - flips) + (1 - s[:, None]) * flips
    for matches, n in ((30.0, 40.0), (5.0, 40.0), (2.0, 3.0)):
        log_a, log_b = np.log(exact_acc), np.log1p(-exact_acc)
        logp = np.log(g)[:, None] + np.log(weights) + matches * log_a + (n - matches) * log_b
        post = np.exp(logp - logp.max())
        post /= post.sum()
        exact = float((post * log_a).sum())
        pi = g @ conv
        basis = np.column_stack([np.log(centres), np.log1p(-centres)])
        expect, _ = AwareOneCoin._worker_step(np.array([matches]), np.array([n]), pi, basis, basis)
        assert expect[0, 0] == pytest.approx(exact, abs=2e-3)


def test_squarem_lands_on_the_limit_of_a_geometric_path() -> None:
    """EM's slow mode: x_n = x* + c lambda^n. Then r = c (lambda - 1), v = c (lambda - 1)^2,
    alpha = -1 / (1 - lambda), and x0 - 2 alpha r + alpha^2 v = x* exactly; per row with
    axis=1, each row with its own lambda. A path of equal steps (v = 0) stays at x2."""
    rng = np.random.default_rng(0)
    limit, c = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    lam = np.array([[0.5], [0.9], [0.99]])
    x = [limit + c * lam**n for n in range(3)]
    np.testing.assert_allclose(squarem_extrapolate(*x, axis=1), limit, atol=1e-12)
    # One step length for the whole state: exact where every coordinate shares lambda.
    shared = [limit + c * 0.9**n for n in range(3)]
    np.testing.assert_allclose(squarem_extrapolate(*shared), limit, atol=1e-12)
    straight = [np.zeros(4), np.ones(4), 2 * np.ones(4)]
    np.testing.assert_array_equal(squarem_extrapolate(*straight), straight[2])


def test_extrapolation_reaches_the_plain_em_fixed_point_in_fewer_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two-layer RR on a one-coin crowd, both run to a tight tolerance: the extrapolated EM
    stops at the plain EM's fixed point in fewer passes (measured: 95 against 652)."""
    answers, _, _ = privtd.datasets.make_categorical(400, 20, 2, rng=3)
    mech = TwoLayerRR.from_epsilon(1.0)
    perturbed = mech.perturb(answers, rng=1)
    fast = AwareOneCoin(mech, tol=1e-12, max_iter=5000).fit(perturbed)
    # The jump held at x2 (alpha = -1) makes the loop plain EM.
    monkeypatch.setattr(perturbation_aware, "squarem_extrapolate", lambda x0, x1, x2: x2)
    plain = AwareOneCoin(mech, tol=1e-12, max_iter=5000).fit(perturbed)
    assert fast.converged_ and plain.converged_
    np.testing.assert_allclose(fast.probas_.to_numpy(), plain.probas_.to_numpy(), atol=1e-6)
    np.testing.assert_allclose(fast.accuracy_prior_, plain.accuracy_prior_, atol=1e-6)
    assert fast.n_iter_ < plain.n_iter_ / 2, (fast.n_iter_, plain.n_iter_)
