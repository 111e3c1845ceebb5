"""Each mechanism carries its channel: the probability of each release given the true answer,
and the noise law the perturbation-aware models read."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privtd import ValidationError
from privtd.inference._channel import channel_matrix, flip_law
from privtd.inference.aware_gaussian import noise_law
from privtd.inference.aware_null import null_channel
from privtd.mechanisms import (
    BinaryRR,
    ExpGaussian,
    KRRNull,
    LaplaceNull,
    OneLayerRR,
    TwoLayerNull,
    TwoLayerRR,
)


def _empirical(mech, n_symbols, per_truth=3_000):
    """Release frequencies ``[release, truth]`` of workers who release one answer each (one
    call, one private draw: two-layer's ``f_u`` drawn afresh every time)."""
    rng = np.random.default_rng(7)
    labels = list(range(n_symbols))
    out = np.zeros((n_symbols, n_symbols))
    for truth in labels:
        for _ in range(per_truth):
            out[mech.perturb_worker([truth], labels=labels, rng=rng)[0], truth] += 1
    return out / per_truth


@pytest.mark.parametrize(
    "mech", [OneLayerRR(0.3, 3), BinaryRR.from_keep(0.8), TwoLayerRR(0.1, 0.7, 3)]
)
def test_rr_channel_is_the_release_law_of_one_answer(mech):
    k = mech.n_labels
    c = mech.channel(k)
    assert c.shape == (k, k)
    np.testing.assert_allclose(c.sum(axis=0), 1.0)
    # The stated epsilon is the channel's largest log-ratio along a row.
    assert math.log(c.max() / c.min()) == pytest.approx(mech.epsilon)
    # And a worker releasing one answer follows it (a fresh worker, a fresh f_u, each time).
    seen = _empirical(mech, k)
    np.testing.assert_allclose(seen, c, atol=0.03)


def test_two_layer_shares_r_a_and_each_worker_composes_its_own_flip_on_it():
    mech = TwoLayerRR(0.1, 0.5, 3)
    shared = mech.shared_channel()
    np.testing.assert_allclose(np.diag(shared), 0.9)
    flips, weights = mech.flip_law(8)
    assert flips.size == 8 and weights.sum() == pytest.approx(1.0)
    assert 0.1 < flips.min() < flips.max() < 0.5
    # R_f = R_g R_a for a symmetric R_g: the worker-specific rest is randomized response.
    f = float(flips[3])
    scale = (1 - f * 3 / 2) / (1 - 0.1 * 3 / 2)
    rest = (1 - scale) / 3 + scale * np.eye(3)
    np.testing.assert_allclose(rest @ shared, OneLayerRR(f, 3).channel(), atol=1e-12)
    # The estimators read the mechanism's own figures.
    np.testing.assert_array_equal(channel_matrix(mech, 3, "test"), shared)
    np.testing.assert_array_equal(flip_law(mech, 3, n_points=8)[0], flips)


@pytest.mark.parametrize(
    "mech", [KRRNull.from_epsilon(1.5, 1, 4), TwoLayerNull(1.0, 1, 4)], ids=["krr", "two"]
)
def test_null_channel_covers_scores_then_null(mech):
    c = mech.channel()
    assert c.shape == (5, 5)
    np.testing.assert_allclose(c.sum(axis=0), 1.0)
    assert math.log(c[0, 0] / c[1, 0]) == pytest.approx(mech.epsilon)
    np.testing.assert_array_equal(null_channel(mech), c)
    with pytest.raises(ValidationError, match="releases 5 symbols"):
        mech.channel(4)


def test_krr_null_channel_is_its_release_law():
    mech = KRRNull.from_epsilon(1.0, 1, 3)
    rng = np.random.default_rng(3)
    counts = np.zeros(4)
    for _ in range(2000):
        row = mech.perturb_worker({"t": 2}, tasks=["t"], rng=int(rng.integers(2**31)))
        counts[3 if row[0] is None else int(row[0]) - 1] += 1
    np.testing.assert_allclose(counts / counts.sum(), mech.channel()[:, 1], atol=0.03)
    assert mech.keep_variance() == 0.0
    assert TwoLayerNull(1.0, 1, 3).keep_variance() > 0.0


def test_variance_law_of_exp_gaussian():
    mech = ExpGaussian(2.0, 0.0, 1.0)
    assert mech.variance_law == ("exp", 2.0)
    assert noise_law(mech) == ("exp", 2.0)


@pytest.mark.parametrize(
    "mech, ask",
    [
        (LaplaceNull(2.0, 1, 5), lambda m: m.channel()),
        (ExpGaussian(2.0, 0.0, 1.0), lambda m: m.channel()),
        (KRRNull.from_epsilon(1.0, 1, 3), lambda m: m.flip_law()),
        (OneLayerRR(0.3, 2), lambda m: m.variance_law),
        (LaplaceNull(2.0, 1, 5), lambda m: m.keep_variance()),
    ],
)
def test_a_mechanism_without_a_channel_says_so_in_one_line(mech, ask):
    with pytest.raises(ValidationError, match="has no") as refused:
        ask(mech)
    assert "\n" not in str(refused.value)
    assert type(mech).__name__ in str(refused.value)


def test_estimators_refuse_a_mechanism_of_another_noise_model():
    with pytest.raises(ValidationError, match="AwareOneCoin models randomized response"):
        flip_law(KRRNull.from_epsilon(1.0, 1, 3), 3)
    with pytest.raises(ValidationError, match="AwareNull models"):
        null_channel(LaplaceNull(2.0, 1, 5))
    with pytest.raises(ValidationError, match="AwareNull models"):
        null_channel(OneLayerRR(0.3, 2))
    with pytest.raises(ValidationError, match="AwareGaussian models"):
        noise_law(OneLayerRR(0.3, 2))
    with pytest.raises(ValidationError, match="built for 3 labels"):
        OneLayerRR(0.3, 3).channel(4)


def test_capabilities():
    assert OneLayerRR(0.3, 2).flips_labels and TwoLayerRR(0.0, 0.5).flips_labels
    assert not KRRNull.from_epsilon(1.0, 1, 3).flips_labels
    assert KRRNull.from_epsilon(1.0, 1, 3).releases_cells and LaplaceNull(2.0, 1, 5).releases_cells
    assert not OneLayerRR(0.3, 2).releases_cells and not ExpGaussian(2.0, 0.0, 1.0).releases_cells
