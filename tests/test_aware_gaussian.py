"""The perturbation-aware Gaussian model: its prior against sampling, its worker step against
enumeration with the full normal density, its fixed point, and its accuracy against CRH on P1's
synthetic study."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd import ValidationError, datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import CRH, AwareGaussian
from privtd.inference.aware_gaussian import convolution_matrix, noise_law, variance_posterior
from privtd.mechanisms import ExpGaussian, OneLayerRR


def test_convolution_matches_sampling():
    # sigma^2 + v with v ~ Exp(rate), binned on the grid: the matrix row against 200,000 draws.
    rate, n = 0.7, 200_000
    sigma2 = np.array([0.0, 0.3, 2.0])
    tau = np.geomspace(1e-3, 50.0, 40)
    conv = convolution_matrix(sigma2, tau, ("exp", rate))
    np.testing.assert_allclose(conv.sum(axis=1), 1.0, atol=1e-12)
    edges = np.concatenate([[-np.inf], np.sqrt(tau[:-1] * tau[1:]), [np.inf]])
    rng = np.random.default_rng(0)
    for k, s2 in enumerate(sigma2):
        draws = s2 + rng.exponential(1 / rate, n)
        freq = np.histogram(draws, edges)[0] / n
        # 5 binomial standard errors per cell, plus a floor for the empty ones.
        tol = 5 * np.sqrt(conv[k] * (1 - conv[k]) / n) + 1e-5
        assert (np.abs(freq - conv[k]) <= tol).all()
    # No mechanism: every mass stays in the cell of sigma^2 itself.
    point = convolution_matrix(np.array([0.5]), tau, ("point", 0.0))
    assert point.max() == 1.0 and tau[point.argmax()] == pytest.approx(0.5, rel=0.15)


def test_worker_step_is_the_enumerated_posterior():
    # Two workers, three tasks; the posterior over the tau grid by the full normal density.
    rng = np.random.default_rng(1)
    tau = np.geomspace(0.05, 20.0, 25)
    pi = rng.dirichlet(np.ones(tau.size))
    truths = np.array([1.0, -2.0, 0.5])
    x = np.array([[1.3, -2.4, 0.2], [0.0, 1.0, 3.0]])
    sq = ((x - truths) ** 2).sum(axis=1)
    post, _, log_norm = variance_posterior(np.full(2, 3.0), sq, pi, tau, np.eye(tau.size))
    for u in range(2):
        joint = np.array(
            [pi[m] * np.prod(stats.norm.pdf(x[u], truths, math.sqrt(tau[m]))) for m in range(25)]
        )
        # The compiled kernel counts a cell below exp(-50) of the top cell as 0 (2e-22 of it).
        np.testing.assert_allclose(post[u], joint / joint.sum(), rtol=1e-10, atol=1e-21)
        # log normaliser = log marginal + (n / 2) log(2 pi)
        assert log_norm[u] == pytest.approx(math.log(joint.sum()) + 1.5 * math.log(2 * math.pi))


def fitted(mech, answers, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return AwareGaussian(mech, **kwargs).fit(answers)


def test_fixed_point_is_the_precision_weighted_mean():
    answers, _, _ = datasets.make_numeric(30, 40, error_rate=1.0, rng=2)
    mech = ExpGaussian(0.5, float(answers.value.min()), float(answers.value.max()))
    noisy = mech.perturb(answers, rng=3)
    est = fitted(mech, noisy, tol=1e-9, max_iter=2000)
    w = est.weights_["weight"].to_numpy()[noisy.worker]
    mean = np.bincount(noisy.task, w * noisy.value) / np.bincount(noisy.task, w)
    np.testing.assert_allclose(est.truths_.to_numpy(), mean, atol=1e-6)
    # The mechanism's noise is not charged to the workers: own variance < total variance.
    assert (est.weights_["own_variance"] < est.weights_["variance"]).all()
    assert np.isclose(est.variance_prior_.sum(), 1.0)


def test_sparse_worker_is_shrunk_to_the_population():
    answers, _, _ = datasets.make_numeric(30, 60, error_rate=1.0, rng=4)
    mech = ExpGaussian(1.0, float(answers.value.min()), float(answers.value.max()))
    frame = mech.perturb(answers, rng=5).to_frame()
    # A worker with one report that happens to sit on the task's median: its weight stays below
    # that of the best worker measured on 30 reports (the prior, which includes the mechanism's
    # noise law, holds it back), though above the median worker's.
    lone = frame.iloc[[0]].assign(worker="lone")
    lone["answer"] = frame.loc[frame.task == lone.task.iloc[0], "answer"].median()
    weights = fitted(mech, pd.concat([frame, lone], ignore_index=True)).weights_["weight"]
    assert weights.median() < weights["lone"] < weights.drop("lone").max()


def test_rejects_a_mechanism_it_does_not_model():
    with pytest.raises(ValidationError, match="exp-gaussian"):
        noise_law(OneLayerRR.from_epsilon(1.0, n_labels=2))


def test_beats_crh_on_p1_synthetic():
    # P1's study (150 users, 30 objects, lambda1 = 1) at noise levels 0.5 and 4, 20 trials each:
    # the aware estimator's MAE against the truth is below CRH's by more than 3 standard errors.
    for level, seed in ((0.5, 10), (4.0, 11)):
        gain = []
        for s in np.random.SeedSequence(seed).spawn(20):
            rng = np.random.default_rng(s)
            answers, truth, _ = datasets.make_numeric(30, 150, error_rate=1.0, rng=rng)
            mech = ExpGaussian(1.0 / level, float(answers.value.min()), float(answers.value.max()))
            noisy = mech.perturb(answers, rng=rng)
            crh = CRH().fit(noisy).truths_.to_numpy()
            aware = fitted(mech, noisy).truths_.to_numpy()
            gain.append(np.abs(crh - truth).mean() - np.abs(aware - truth).mean())
        se = np.std(gain, ddof=1) / math.sqrt(len(gain))
        assert np.mean(gain) > 3 * se, (level, np.mean(gain), se)
