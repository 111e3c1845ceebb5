"""P1's exponential-variance Gaussian mechanism: exact accounting, noise law, both ways to run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd import Answers, ValidationError, datasets
from privtd.mechanisms import ExpGaussian, make_mechanism


def single_answers(n: int, value: float = 0.5) -> Answers:
    # n workers with one answer each: every noise draw has its own variance v_u.
    return Answers(
        np.zeros(n, dtype=np.int32),
        np.arange(n, dtype=np.int32),
        np.full(n, value),
        pd.Index(["q"]),
        pd.RangeIndex(n),
    )


def test_closed_forms():
    m = ExpGaussian(0.5, 0.0, 1.0)
    assert m.epsilon == pytest.approx(1.0)  # Delta sqrt(2 rate)
    assert m.laplace_scale == pytest.approx(1.0)
    back = ExpGaussian.from_epsilon(2.0, low=0.0, high=10.0)
    assert back.rate == pytest.approx(4.0 / 200.0) and back.epsilon == pytest.approx(2.0)
    assert ExpGaussian.from_noise_level(2.0, 1.0, 0.0, 1.0).rate == pytest.approx(
        0.5
    )  # lambda1 / c
    # Derived paper-style epsilon, hand-computed: sqrt(2 ln 125 * 0.5 / ln(1 / 0.99)) = 21.918.
    assert m.paper_style_epsilon(0.01, 0.01) == pytest.approx(21.918, abs=1e-3)


@pytest.mark.parametrize(
    "rate, eps, delta", [(0.5, 1, 0.187), (0.5, 2, 0.111), (0.125, 1, 0.057), (0.125, 2, 0.030)]
)
def test_delta_when_variance_revealed_matches_spec(rate, eps, delta):
    assert ExpGaussian(rate, 0, 1).delta_if_variance_revealed(eps) == pytest.approx(delta, abs=1e-3)


def test_noise_is_laplace_with_the_stated_scale():
    n = 200_000
    m = ExpGaussian(0.5, 0.0, 1.0)
    noise = m.perturb(single_answers(n), rng=7).value - 0.5
    b = m.laplace_scale
    # E|noise| = b (SPEC B1.2); |Laplace| has standard deviation b.
    assert abs(np.abs(noise).mean() - b) < 4 * b / math.sqrt(n)
    # The whole law: a Kolmogorov-Smirnov test against Laplace(0, b) on 20,000 draws.
    assert stats.kstest(noise[:20_000], stats.laplace(scale=b).cdf).pvalue > 1e-3


def test_guarantee_is_tight():
    m = ExpGaussian(0.3, 2.0, 5.0)
    law = stats.laplace(scale=m.laplace_scale)
    z = np.linspace(-20, 30, 2001)
    loss = np.max(np.abs(law.logpdf(z - m.low) - law.logpdf(z - m.high)))
    assert loss <= m.epsilon + 1e-9 and loss > 0.999 * m.epsilon


def test_record_local_equals_batch():
    answers, _, _ = datasets.make_numeric(
        40, 12, answers_per_task=4, truth=(3.0, 7.0), rng=2, error_rate=50.0
    )
    m = ExpGaussian.from_epsilon(1.0, low=0.0, high=10.0)
    batch = m.perturb(answers, rng=11)
    for w in range(answers.n_workers):
        mask = answers.worker == w
        local = m.perturb_worker(
            answers.value[mask],
            worker=answers.workers[w],
            tasks=answers.tasks.take(answers.task[mask]).tolist(),
            rng=11,
        )
        np.testing.assert_allclose(local, batch.value[mask])


def test_shared_variance_per_worker():
    # One worker, many answers: the noise variance is that worker's v_u, not the mixture's.
    n = 5000
    one = Answers(
        np.arange(n, dtype=np.int32),
        np.zeros(n, dtype=np.int32),
        np.full(n, 0.5),
        pd.RangeIndex(n),
        pd.Index(["w"]),
    )
    m = ExpGaussian(0.5, 0.0, 1.0)
    noise = m.perturb(one, rng=3).value - 0.5
    from privtd.mechanisms._random import Draws, id_hashes

    v = m.worker_variances(id_hashes(["w"]), Draws(3))[0]
    assert abs(noise.var() / v - 1) < 5 * math.sqrt(2 / n)


def test_bad_input():
    with pytest.raises(ValidationError, match="'rate' parameter of ExpGaussian must be a float in"):
        ExpGaussian(0.0, 0.0, 1.0)
    with pytest.raises(ValidationError, match="low < high"):
        ExpGaussian(1.0, 5.0, 5.0)
    with pytest.raises(ValidationError, match="'epsilon' parameter of ExpGaussian"):
        ExpGaussian.from_epsilon(-1.0, 0.0, 1.0)
    m = ExpGaussian(1.0, 0.0, 1.0)
    with pytest.raises(ValidationError, match="outside the declared range"):
        m.perturb_worker([0.5, 3.0])
    with pytest.raises(ValidationError, match="perturbs numeric answers; these are categorical"):
        m.perturb(datasets.load("dog").answers)
    assert make_mechanism("exp-gaussian", 1.0, low=0, high=2).epsilon == pytest.approx(1.0)
