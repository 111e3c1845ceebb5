"""A worker's answers under one private draw: what one answer keeps given the others, and what the
whole release loses, checked against enumeration (small k) and simulation through perturb (large
k)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate

from privtd import datasets
from privtd.errors import ValidationError
from privtd.mechanisms import OneLayerRR, TwoLayerRR
from privtd.mechanisms._shared_draw import log_uniform_moments, shared_flip_epsilons


def _report_probability(x, y, n_labels, a, b):
    """P(report y | answers x) by direct integration of the per-answer product over f ~ U(a, b)."""

    def integrand(f):
        out = 1.0
        for xi, yi in zip(x, y, strict=True):
            out *= (1.0 - f) if xi == yi else f / (n_labels - 1)
        return out

    if a == b:
        return integrand(a)
    return integrate.quad(integrand, a, b, epsabs=0, epsrel=1e-12)[0] / (b - a)


def _enumerated(k, n_labels, a, b):
    """(one answer given the others, whole release) by brute force over answers and reports."""
    vectors = list(itertools.product(range(n_labels), repeat=k))
    prob = {(x, y): _report_probability(x, y, n_labels, a, b) for x in vectors for y in vectors}
    one = whole = 0.0
    for x, x2, y in itertools.product(vectors, vectors, vectors):
        loss = abs(math.log(prob[x, y] / prob[x2, y]))
        whole = max(whole, loss)
        if sum(u != v for u, v in zip(x, x2, strict=True)) == 1:
            one = max(one, loss)
    return one, whole


@pytest.mark.parametrize(
    ("k", "n_labels", "a", "b"),
    [
        (1, 2, 0.0, 0.5),
        (2, 2, 0.0, 0.538),
        (3, 2, 0.1, 0.6),
        (4, 2, 0.0, 1.0),
        (2, 3, 0.05, 0.7),
        (3, 3, 0.0, 0.4),
        (2, 4, 0.2, 0.9),
    ],
)
def test_two_layer_figures_match_enumeration(k, n_labels, a, b):
    one, whole = _enumerated(k, n_labels, a, b)
    mech = TwoLayerRR(a, b, n_labels)
    assert mech.answer_epsilon(k) == pytest.approx(one, rel=1e-9, abs=1e-12)
    assert mech.release_epsilon(k) == pytest.approx(whole, rel=1e-9, abs=1e-12)


def test_one_answer_is_the_papers_marginal():
    for eps, labels in [(0.1, 2), (1.0, 2), (2.0, 4)]:
        a = 0.0 if labels == 2 else 0.1
        mech = TwoLayerRR.from_epsilon(eps, labels, a=a)
        assert mech.answer_epsilon(1) == pytest.approx(eps, rel=1e-10)
        assert mech.release_epsilon(1) == pytest.approx(eps, rel=1e-10)


def test_figures_grow_with_k_whatever_was_stated():
    # With a = 0 the draw is learned from the other reports: about ln k for one answer, about
    # k ln 2 for the release, at stated epsilon 1 and 0.1 alike.
    for eps in (1.0, 0.1):
        mech = TwoLayerRR.from_epsilon(eps, 2)
        for k, one in [(20, 3.00), (100, 4.61), (1000, 6.91)]:
            assert mech.answer_epsilon(k) == pytest.approx(one, abs=0.005)
        assert mech.release_epsilon(1000) == pytest.approx(689.5, abs=0.1)
    assert TwoLayerRR.from_epsilon(1.0, 2).release_epsilon(20) == pytest.approx(13.147, abs=1e-3)
    assert TwoLayerRR.from_epsilon(0.1, 2).release_epsilon(20) == pytest.approx(12.127, abs=1e-3)


def test_independent_answers_compose():
    mech = OneLayerRR.from_epsilon(1.0, 2)
    assert mech.answer_epsilon(50) == pytest.approx(1.0)
    assert mech.release_epsilon(50) == pytest.approx(50.0)
    assert mech.release_epsilon(0) == 0.0
    with pytest.raises(ValidationError, match="int >= 0"):
        mech.release_epsilon(-1)


def test_degenerate_draw_is_one_layer():
    # a = b: one fixed flip probability, so answers are independent and the figures compose.
    mech = TwoLayerRR(0.3, 0.3, 2)
    assert mech.answer_epsilon(7) == pytest.approx(OneLayerRR(0.3, 2).epsilon, rel=1e-12)
    assert mech.release_epsilon(7) == pytest.approx(7 * OneLayerRR(0.3, 2).epsilon, rel=1e-12)


def test_moments_against_quadrature_and_never_underflow():
    for m, n, a, b in [
        (3, 5, 0.0, 0.5),
        (500, 500, 0.2, 0.7),
        (1000, 3, 0.0, 1.0),
        (0, 40, 0.1, 0.9),
    ]:
        q = integrate.quad(
            lambda f, m=m, n=n: (1 - f) ** m * f**n,
            a,
            b,
            epsrel=1e-12,
            epsabs=0,
            limit=200,
            points=[min(max(n / (m + n), a), b)],
        )[0] / (b - a)
        assert log_uniform_moments(np.array([m]), np.array([n]), a, b)[0] == pytest.approx(
            math.log(q), rel=1e-9
        )
    # Far past where the moment itself underflows a double: still finite.
    assert np.isfinite(log_uniform_moments(np.array([0.0]), np.array([5000.0]), 0.0, 0.1)).all()
    assert shared_flip_epsilons(5000, 2, 0.0, 0.5)[1] > 3000


def test_simulated_through_perturb():
    # 40,000 workers each answer label 0 on 20 tasks. The report that keeps all 20 has probability
    # E[(1 - f)^20] under those answers and E[(1 - f)^19 f] under answers that differ in one place:
    # the log of their ratio is the one-answer-given-the-others loss (about 3.0 at stated 1).
    k, n = 20, 40_000
    answers, _, _ = datasets.make_categorical(
        k, n, 2, answers_per_task=None, accuracy=np.ones(n), prior=np.array([1.0, 0.0]), rng=3
    )
    mech = TwoLayerRR.from_epsilon(1.0, 2)
    out = mech.perturb(answers, rng=11)
    flips = np.bincount(out.worker, weights=out.value != answers.value, minlength=n)
    kept_all = np.count_nonzero(flips == 0)
    # The same report seen from answers with task 0's answer changed: 19 kept and one flipped.
    # By exchangeability that is the frequency of exactly one flip, divided among the k places.
    one_flip = np.count_nonzero(flips == 1) / k
    simulated = math.log(kept_all / one_flip)
    se = math.sqrt(1 / kept_all + 1 / (one_flip * k))
    assert simulated == pytest.approx(mech.answer_epsilon(k), abs=4 * se)
    assert simulated > 2.5 * mech.epsilon
