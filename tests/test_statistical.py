"""Estimators recover known worker quality and truths on seeded synthetic crowds.

Tolerances come from the sample sizes (binomial or normal standard errors), not from outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from privtd import datasets, evaluate
from privtd.inference import (
    CRH,
    GTM,
    DawidSkene,
    LatentClass,
    MajorityVote,
    Mean,
    OneCoinDawidSkene,
    PrivateDawidSkene,
    Raykar,
    WeightedVote,
)


@pytest.fixture(scope="module")
def crowd():
    # 20,000 tasks x 5 answers from 100 one-coin workers with accuracy U(0.35, 0.95), K = 3.
    return datasets.make_categorical(
        20000, 100, 3, answers_per_task=5, accuracy=(0.35, 0.95), rng=21
    )


def test_one_coin_recovers_accuracies(crowd):
    answers, truth, params = crowd
    oc = OneCoinDawidSkene().fit(answers)
    n = answers.worker_counts()
    acc = params["accuracy"]
    se = np.sqrt(acc * (1 - acc) / n)
    # Posterior noise adds a little on top of the binomial error: allow 5 standard errors.
    assert np.all(np.abs(oc.weights_["weight"].to_numpy() - acc) < 5 * se + 0.01)


def test_dawid_skene_recovers_confusions(crowd):
    answers, truth, params = crowd
    ds = DawidSkene().fit(answers)
    cube = ds.confusions_.to_numpy().reshape(answers.n_workers, answers.n_labels, -1)
    diag = np.diagonal(cube, axis1=1, axis2=2)
    # Each diagonal cell rests on about 1,000 / 3 answers: se <= 0.5 / sqrt(333) = 0.027.
    assert np.abs(diag - params["accuracy"][:, None]).max() < 5 * 0.5 / np.sqrt(333)


def test_quality_aware_methods_beat_majority(crowd):
    answers, truth, _ = crowd
    mv = evaluate(MajorityVote().fit(answers).truths_, truth)["accuracy"]
    margin = 3 * np.sqrt(0.25 / len(truth))  # 3 binomial standard errors on 20,000 tasks
    for est in (DawidSkene(), OneCoinDawidSkene(), WeightedVote()):
        acc = evaluate(est.fit(answers).truths_, truth)["accuracy"]
        assert acc > mv + margin, type(est).__name__


def test_latent_class_recovers_two_coin_workers():
    conf = np.empty((60, 2, 2))
    rng = np.random.default_rng(4)
    sens, spec = rng.uniform(0.6, 0.95, 60), rng.uniform(0.6, 0.95, 60)
    conf[:, 1, 1], conf[:, 0, 1] = sens, 1 - sens
    conf[:, 0, 0], conf[:, 1, 0] = spec, 1 - spec
    answers, truth, _ = datasets.make_categorical(
        20000, 60, 2, answers_per_task=5, confusion=conf, prior=np.array([0.7, 0.3]), rng=4
    )
    lc = LatentClass().fit(answers)
    # ~1,667 answers per worker, 30% of them on positives: se(sens) <= 0.5 / sqrt(500).
    assert np.abs(lc.weights_["sensitivity"].to_numpy() - sens).max() < 5 * 0.5 / np.sqrt(500)
    assert np.abs(lc.weights_["specificity"].to_numpy() - spec).max() < 5 * 0.5 / np.sqrt(1167)
    assert lc.prior_ == pytest.approx(0.3, abs=4 * np.sqrt(0.21 / 20000))


def test_private_dawid_skene_rescales_abilities():
    # P4's setting: every worker answers every task, binary RR with keep e^eps / (e^eps + 1).
    eps, n, m = 1.0, 30, 4000
    rng = np.random.default_rng(9)
    ability = rng.uniform(0.6, 0.95, n)
    answers, truth, _ = datasets.make_categorical(
        m, n, 2, answers_per_task=None, accuracy=ability, rng=9
    )
    keep = np.exp(eps) / (np.exp(eps) + 1)
    flip = rng.random(answers.n_answers) >= keep
    perturbed = answers.with_values(np.where(flip, 1 - answers.value, answers.value))
    pds = PrivateDawidSkene(epsilon=eps).fit(perturbed)
    bound = 6 * np.sqrt(np.log(m) / (m * eps**2))  # SPEC B4.3, Theorem 3
    err = np.abs(pds.weights_["ability_rescaled"].to_numpy() - ability).max()
    assert err < bound
    assert (
        evaluate(pds.truths_, truth)["accuracy"]
        > evaluate(MajorityVote().fit(perturbed).truths_, truth)["accuracy"]
    )


@pytest.fixture(scope="module")
def sensing():
    # Error sds spread over [0.3, 2]: quality-aware weights should clearly beat the mean.
    sigma = np.random.default_rng(5).uniform(0.3, 2.0, 60)
    return datasets.make_numeric(400, 60, sigma=sigma, rng=5)


@pytest.mark.parametrize("est", [CRH(), GTM(delta0=None), Raykar()], ids=["crh", "gtm", "raykar"])
def test_numeric_methods_beat_the_mean(sensing, est):
    answers, truth, _ = sensing
    t = truth.to_numpy()
    base = np.abs(Mean().fit(answers).truths_.to_numpy() - t)
    ours = np.abs(est.fit(answers).truths_.to_numpy() - t)
    diff = ours - base
    # One-sided paired test over 400 tasks: the mean improvement exceeds 3 standard errors.
    assert diff.mean() + 3 * diff.std(ddof=1) / np.sqrt(diff.size) < 0


def test_raykar_gamma_prevents_collapse():
    # With exponential error variances some worker is nearly exact; unregularised ML lets that
    # worker's precision run to the floor and the truths collapse onto its answers. gamma caps it.
    answers, truth, params = datasets.make_numeric(400, 60, error_rate=1.0, rng=5)
    free = Raykar().fit(answers).weights_["weight"].max()
    capped = Raykar(gamma=50.0).fit(answers).weights_["weight"].max()
    assert free > 1e6 and capped == pytest.approx(50.0)


def test_raykar_recovers_variances(sensing):
    answers, truth, params = sensing
    rk = Raykar().fit(answers)
    var = 1 / rk.weights_["weight"].to_numpy()
    # 400 answers per worker: the variance estimate's relative se is sqrt(2 / 400) = 0.07.
    rel = np.abs(var / params["sigma"] ** 2 - 1)
    assert np.median(rel) < 0.1 and rel.max() < 5 * np.sqrt(2 / 400) + 0.05
