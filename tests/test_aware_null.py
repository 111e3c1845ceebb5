"""The NULL-aware deconvolution of P3's randomized-response release: its channel against the
mechanisms' output, its E step against enumeration, and its accuracy against P3's aggregator."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest

from privtd import ValidationError
from privtd.answers import Answers
from privtd.errors import ConvergenceWarning
from privtd.experiments import bigdata18
from privtd.inference import AwareNull, WeightedAverage
from privtd.inference.aware_null import null_channel
from privtd.mechanisms import KRRNull, LaplaceNull, TwoLayerNull


def one_column(symbol: float, n: int) -> Answers:
    """``n`` workers, two tasks: task 0 answered ``symbol`` by all (or by none for NULL, where
    task 1 holds the answers so that every worker exists)."""
    null = np.isnan(symbol)
    task = np.full(n, 1 if null else 0, dtype=np.int32)
    value = np.full(n, 2.0 if null else symbol)
    return Answers(task, np.arange(n, dtype=np.int32), value, pd.RangeIndex(2), pd.RangeIndex(n))


@pytest.mark.parametrize("mech", [KRRNull.from_epsilon(1.0, 0, 3), TwoLayerNull(1.0, 0, 3)])
@pytest.mark.parametrize("symbol", [0.0, 2.0, np.nan])
def test_channel_matches_the_mechanism(mech, symbol):
    n = 100_000
    out = mech.perturb(one_column(symbol, n), rng=5)
    reported = out.value[out.task == 0]
    freq = np.append(np.bincount(reported.astype(int), minlength=4), n - reported.size) / n
    z = 4 if np.isnan(symbol) else int(symbol)
    expected = null_channel(mech)[:, z]
    np.testing.assert_allclose(expected.sum(), 1.0)
    # 5 binomial standard errors per symbol.
    assert (np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n)).all()


def test_e_step_is_the_enumerated_posterior():
    # One task, three reports; an asymmetric channel so that a transposed index would show.
    rng = np.random.default_rng(3)
    channel = rng.dirichlet(np.ones(3), size=3).T  # columns: P(report | true symbol)
    reports = [0, 2, 2]
    counts = np.bincount(reports, minlength=3)[None, :].astype(float)
    expected0 = rng.uniform(0.5, 2.0, (1, 3))
    n_q, rate, prior = np.array([3.0]), np.array([0.7, 0.3]), np.array([0.4, 0.3])
    got, loglik = AwareNull.e_step(counts, channel, expected0, n_q, rate, prior)
    w = np.exp(AwareNull._expected_log_p(expected0, n_q, rate, prior))[0]
    total, want = 0.0, np.zeros(3)
    for latent in itertools.product(range(3), repeat=3):
        p = np.prod([w[z] * channel[x, z] for x, z in zip(reports, latent, strict=True)])
        total += p
        want += p * np.bincount(latent, minlength=3)
    np.testing.assert_allclose(got[0], want / total, rtol=1e-12)
    assert loglik[0] == pytest.approx(np.log(total))


def changes(sparsity, mech, seed):
    rng = np.random.default_rng(seed)
    answers, mu = bigdata18.synthetic(2000, 200, sparsity, rng)
    clean = np.abs(WeightedAverage().fit(answers).truths_.to_numpy() - mu).mean()
    released = mech.perturb(answers, rng=rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        p3 = np.abs(WeightedAverage().fit(released).truths_.to_numpy() - mu).mean()
        aware = AwareNull(mech).fit(released)
    return p3 - clean, np.abs(aware.truths_.to_numpy() - mu).mean() - clean, aware


@pytest.mark.parametrize("mech", [KRRNull.from_epsilon(2.0, 0, 9), TwoLayerNull(2.0, 0, 9)])
def test_beats_p3_aggregator_on_its_synthetic_study(mech):
    # P3's design at sparsity 0.5: the made-up scores of NULL cells drag P3's averages to the
    # middle of 0..9 (MAE change ~2.9); the deconvolution removes most of that.
    p3, aware, fitted = changes(0.5, mech, seed=11)
    assert p3 > 2.5 and aware < 0.6
    # Half the cells were answered; the posterior answer rate finds that within 0.1 per task
    # on average (each task's rate rests on 2,000 noisy cells).
    assert abs(fitted.answer_rate_.mean() - 0.5) < 0.05


def test_gold_is_pinned_and_bad_input_is_refused():
    mech = KRRNull.from_epsilon(3.0, 0, 9)
    rng = np.random.default_rng(2)
    answers, mu = bigdata18.synthetic(200, 30, 0.5, rng)
    released = mech.perturb(answers, rng=rng)
    est = AwareNull(mech).fit(released.to_frame(), gold=pd.Series({0: 7.5}))
    assert est.truths_[0] == 7.5
    with pytest.raises(ValidationError, match="krr-null, two-layer-null"):
        AwareNull(LaplaceNull.from_epsilon(1.0, 0, 9)).fit(released.to_frame())
    wrong = released.to_frame().assign(answer=lambda f: f["answer"] + 0.5)
    with pytest.raises(ValidationError, match="integer scores in \\[0, 9\\]"):
        AwareNull(mech).fit(wrong)
    with pytest.raises(ValidationError, match="strength"):
        AwareNull(mech, strength=0.0).fit(released.to_frame())
