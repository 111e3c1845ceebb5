"""Hand-computed 5 x 5 fixtures for every algorithm, and SPEC's numeric oracles.

The expected numbers below were worked out by hand from the formulas in SPEC Part A (the
working is in the comments), not printed by the code under test.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd import Answers
from privtd.errors import ConvergenceWarning
from privtd.inference import (
    CATD,
    CRH,
    GTM,
    DawidSkene,
    LatentClass,
    MajorityVote,
    Mean,
    Median,
    OneCoinDawidSkene,
    PrivateDawidSkene,
    Raykar,
    WeightedAverage,
    WeightedVote,
    _kernels,
)
from privtd.inference._kernels import pick_sum
from privtd.inference.one_coin_dawid_skene import OneCoinModel

WORKERS = ["A", "B", "C", "D", "E"]
TASKS = ["t1", "t2", "t3", "t4", "t5"]

# Binary fixture: rows are tasks, columns workers A..E.
BINARY = np.array(
    [
        [1, 1, 1, 0, 0],
        [0, 0, 1, 0, 1],
        [1, 0, 1, 1, 1],
        [0, 0, 0, 1, 0],
        [1, 1, 0, 1, 0],
    ]
)
# Majority: [1, 0, 1, 0, 1]; soft majority P(1) = [.6, .4, .8, .2, .6].
# Agreement with the majority: A 5/5, B 4/5, C 3/5, D 3/5, E 2/5.

NUMERIC = np.array(
    [
        [1.0, 1.0, 1.0, 1.0, 6.0],
        [2.0, 2.0, 2.0, 2.0, 2.0],
        [3.0, 3.0, 3.0, 4.0, 3.0],
        [0.0, 0.0, 1.0, 0.0, 0.0],
        [5.0, 5.0, 5.0, 5.0, 0.0],
    ]
)
# Medians [1, 2, 3, 0, 5]; means [2, 2, 3.2, 0.2, 4]; population stds [2, 0, .4, .4, 2].


def wide(matrix: np.ndarray, **kwargs) -> Answers:
    return Answers.from_wide(pd.DataFrame(matrix, index=TASKS, columns=WORKERS), **kwargs)


def one_step(estimator, answers):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(answers)


@pytest.fixture
def binary() -> Answers:
    return wide(BINARY)


@pytest.fixture
def numeric() -> Answers:
    return wide(NUMERIC)


# ---------------------------------------------------------------------- categorical
def test_majority_vote(binary):
    mv = MajorityVote().fit(binary)
    assert mv.truths_.tolist() == [1, 0, 1, 0, 1]
    np.testing.assert_allclose(mv.probas_[1], [0.6, 0.4, 0.8, 0.2, 0.6])
    np.testing.assert_allclose(mv.weights_["agreement"], [1.0, 0.8, 0.6, 0.6, 0.4])


def test_majority_vote_ties():
    tie = Answers.from_frame(
        pd.DataFrame({"task": [1, 1], "worker": ["a", "b"], "answer": ["y", "x"]})
    )
    assert MajorityVote().fit(tie).truths_.tolist() == ["x"]  # smallest label
    picks = {MajorityVote(tie_break="random", rng=s).fit(tie).truths_.iloc[0] for s in range(20)}
    assert picks == {"x", "y"}


def test_weighted_vote(binary):
    # p = [.99 (clipped), .8, .6, .6, .4]; w = log(p / (1 - p)) =
    # [log 99, log 4, log 1.5, log 1.5, -log 1.5]. Votes for 1 on t1: A+B+C = 6.3869 vs D+E = 0.
    wv = WeightedVote().fit(binary)
    expected_w = [math.log(99), math.log(4), math.log(1.5), math.log(1.5), -math.log(1.5)]
    np.testing.assert_allclose(wv.weights_["weight"], expected_w)
    assert wv.truths_.tolist() == [1, 0, 1, 0, 1]
    assert wv.n_iter_ == 1 and wv.converged_
    s1 = math.log(99) + math.log(4) + math.log(1.5)
    assert wv.probas_.loc["t1", 1] == pytest.approx(1 / (1 + math.exp(-s1)))
    # t3: 1-votes A, C, D, E = log 99 + log 1.5; 0-vote B = log 4.
    s3 = math.log(99) + math.log(1.5) - math.log(4)
    assert wv.probas_.loc["t3", 1] == pytest.approx(1 / (1 + math.exp(-s3)))


def test_weighted_vote_negative_weight_inverts():
    # Worker z always disagrees with a and b, who agree: z gets a negative weight.
    rows = [(t, "a", t % 2) for t in range(6)] + [(t, "b", t % 2) for t in range(6)]
    rows += [(t, "z", 1 - t % 2) for t in range(6)]
    data = Answers.from_frame(pd.DataFrame(rows, columns=["task", "worker", "answer"]))
    wv = WeightedVote().fit(data)
    assert wv.weights_.loc["z", "weight"] == pytest.approx(-math.log(99))


def test_crh_categorical(binary):
    # Losses [0, 1, 2, 2, 3], sum 8; A's 0 is clamped to 8e-12, so w_A = log(1e12).
    crh = CRH().fit(binary)
    expected = [math.log(1e12), math.log(8), math.log(4), math.log(4), math.log(8 / 3)]
    np.testing.assert_allclose(crh.weights_["weight"], expected, rtol=1e-9)
    assert crh.truths_.tolist() == [1, 0, 1, 0, 1]
    assert crh.n_iter_ == 1
    assert crh.objective_[0] == pytest.approx(math.log(8) + 4 * math.log(4) + 3 * math.log(8 / 3))


def test_catd_categorical(binary):
    catd = CATD().fit(binary)
    chi = stats.chi2.ppf(0.025, 5)
    np.testing.assert_allclose(
        catd.weights_["weight"], chi / (np.array([0, 1, 2, 2, 3]) + 1e-9), rtol=1e-9
    )


def ds_m_step(answers: Answers, mu: np.ndarray) -> np.ndarray:
    """Dawid-Skene's confusions ``[worker, answer, truth]`` from posteriors ``mu``, by hand: each
    answer adds its task's posterior to its (worker, answer) row; columns normalised."""
    counts = np.zeros((answers.n_workers, 2, 2))
    for t, w, x in zip(answers.task, answers.worker, answers.value, strict=True):
        counts[w, x] += mu[t]
    return counts / counts.sum(axis=1, keepdims=True)


def test_dawid_skene_m_step(binary):
    # From the soft majority: worker A answered 1 on t1, t3, t5 (truth-1 mass .6+.8+.6 = 2.0,
    # truth-0 mass 1.0) and 0 on t2, t4 (truth-1 mass .6, truth-0 mass 1.4).
    mu = np.column_stack([1 - np.array([0.6, 0.4, 0.8, 0.2, 0.6]), [0.6, 0.4, 0.8, 0.2, 0.6]])
    conf = ds_m_step(binary, mu)
    np.testing.assert_allclose(conf[0], [[1.4 / 2.4, 0.6 / 2.6], [1.0 / 2.4, 2.0 / 2.6]])


def test_dawid_skene_e_step(binary):
    # Every worker with pi[answer, truth] = [[.8, .3], [.2, .7]] and prior (.48, .52).
    # t1 has three 1s and two 0s.
    # The fit's fused kernel: posteriors, then the next M-step's counts from them.
    conf = np.tile(np.array([[0.8, 0.3], [0.2, 0.7]]), (5, 1))
    wx = binary.worker.astype(np.int64) * 2 + binary.value
    layout = _kernels.TaskLayout(binary.task, binary.worker, binary.value, 5)
    mu, counts, prior_sum, loglik = _kernels.ds_step(
        layout, wx, np.log(conf), np.log([0.48, 0.52]), np.full(5, -1)
    )
    log_rho_0 = math.log(0.48) + 3 * math.log(0.2) + 2 * math.log(0.8)
    log_rho_1 = math.log(0.52) + 3 * math.log(0.7) + 2 * math.log(0.3)
    assert mu[0, 1] == pytest.approx(1 / (1 + math.exp(log_rho_0 - log_rho_1)))
    log_rho = np.tile(np.log([0.48, 0.52]), (5, 1))
    for t, w, x in zip(binary.task, binary.worker, binary.value, strict=True):
        log_rho[t] += np.log(conf[w * 2 + x])
    assert log_rho[0] == pytest.approx([log_rho_0, log_rho_1])
    assert loglik == pytest.approx(np.logaddexp(log_rho[:, 0], log_rho[:, 1]).sum())
    np.testing.assert_allclose(prior_sum, mu.sum(axis=0))
    np.testing.assert_allclose(
        DawidSkene()._normalise(counts, 5, 2).reshape(5, 2, 2), ds_m_step(binary, mu)
    )


def test_dawid_skene_fixed_point(binary):
    ds = DawidSkene(tol=1e-12, max_iter=1000).fit(binary)
    mu = ds.probas_.to_numpy()
    cube = ds.confusions_.to_numpy().reshape(-1, 2, 2)
    np.testing.assert_allclose(ds_m_step(binary, mu), cube, atol=1e-6)
    np.testing.assert_allclose(ds.priors_, mu.mean(axis=0), atol=1e-12)
    assert np.all(np.diff(ds.objective_) >= -1e-12)  # EM never lowers the likelihood


def test_one_coin_m_step(binary):
    # s_A = mean posterior of A's labels = (.6 + .6 + .8 + .8 + .6) / 5 = .68;
    # s_E (answers 0, 1, 1, 0, 0) = (.4 + .4 + .8 + .8 + .4) / 5 = .56.
    mu = np.column_stack([1 - np.array([0.6, 0.4, 0.8, 0.2, 0.6]), [0.6, 0.4, 0.8, 0.2, 0.6]])
    sums = pick_sum(binary.task, binary.value, binary.worker, mu, 5)
    skill = OneCoinModel(1e-5, 5, binary.n_answers, binary.worker_counts(), 2).m_step(
        (sums, mu.sum(axis=0), 0.0)
    )[0]
    assert skill[0] == pytest.approx(0.68) and skill[4] == pytest.approx(0.56)


def test_one_coin_equals_dawid_skene_e_step_when_symmetric(binary):
    oc = OneCoinDawidSkene(tol=1e-12, max_iter=500).fit(binary)
    assert np.all(np.diff(oc.objective_) >= -1e-12)
    assert oc.truths_.tolist() == [1, 0, 1, 0, 1]


def test_latent_class_steps(binary):
    # sens_A = sum mu x / sum mu = 2.0 / 2.6; spec_A = (.6 + .8) / 2.4; prior = 2.6 / 5.
    mu = np.array([0.6, 0.4, 0.8, 0.2, 0.6])
    x = binary.value.astype(float)
    sums = LatentClass.m_sums(mu, binary.task, binary.worker, x, 5)
    sens, spec, prior = LatentClass().m_finish(sums, float(mu.mean()))
    assert (sens[0], spec[0], prior) == pytest.approx((2.0 / 2.6, 1.4 / 2.4, 0.52))
    # With sens .8 and spec .7 for all, t1 (three 1s, two 0s):
    log_a, log_b = LatentClass.e_step_sums(
        np.full(5, 0.8), np.full(5, 0.7), binary.task, binary.worker, x, 5
    )
    assert log_a[0] == pytest.approx(3 * math.log(0.8) + 2 * math.log(0.2))
    assert log_b[0] == pytest.approx(2 * math.log(0.7) + 3 * math.log(0.3))


def test_latent_class_fit_matches_dawid_skene(binary):
    # For two labels the two-coin model is Dawid-Skene reparametrised: both must reach the same
    # maximum (here B is the perfect worker, so t3 follows B) and the same log-likelihood.
    lc = LatentClass(max_iter=2000, tol=1e-10).fit(binary)
    ds = DawidSkene(tol=1e-12, max_iter=2000).fit(binary)
    assert lc.truths_.tolist() == ds.truths_.tolist() == [1, 0, 0, 0, 1]
    assert lc.objective_[-1] == pytest.approx(ds.objective_[-1] * binary.n_answers, abs=1e-4)
    assert np.all(np.diff(lc.objective_) >= -1e-9)


def test_private_dawid_skene_one_step(binary):
    # y0 = [.6, .4, .8, .2, .6]; abilities p = [.68, .56, .6, .52, .56] (A..E);
    # y_t1 = sigmoid(l(.68) + l(.56) + l(.6) - l(.52) - l(.56)) with l the logit.
    pds = one_step(PrivateDawidSkene(epsilon=1.0, max_iter=1), binary)
    np.testing.assert_allclose(pds.weights_["ability"], [0.68, 0.56, 0.6, 0.52, 0.56])

    def logit(p):
        return math.log(p / (1 - p))

    s = logit(0.68) + logit(0.56) + logit(0.6) - logit(0.52) - logit(0.56)
    assert pds.probas_.loc["t1", 1] == pytest.approx(1 / (1 + math.exp(-s)))
    e = math.e
    rescaled = (e + 1) / (e - 1) * (0.68 - 1 / (e + 1))
    assert pds.weights_.loc["A", "ability_rescaled"] == pytest.approx(rescaled)
    assert rescaled == pytest.approx(0.889514, abs=1e-5)


# ---------------------------------------------------------------------- numeric
def test_mean_and_median(numeric):
    np.testing.assert_allclose(Mean().fit(numeric).truths_, [2, 2, 3.2, 0.2, 4])
    np.testing.assert_allclose(Median().fit(numeric).truths_, [1, 2, 3, 0, 5])


def test_crh_numeric_one_step(numeric):
    # From the medians, normalised squared losses: C 1/.4 = 2.5 (t4), D 2.5 (t3),
    # E 25/2 + 25/2 = 25; total 30. w_A = w_B = log(1e12), w_C = w_D = log 12, w_E = log 1.2.
    crh = one_step(CRH(max_iter=1), numeric)
    wa, wc, we = math.log(1e12), math.log(12), math.log(1.2)
    np.testing.assert_allclose(crh.weights_["weight"], [wa, wa, wc, wc, we], rtol=1e-9)
    den = 2 * wa + 2 * wc + we
    assert crh.truths_["t1"] == pytest.approx((2 * wa + 2 * wc + 6 * we) / den)
    assert crh.truths_["t3"] == pytest.approx((6 * wa + 3 * wc + 4 * wc + 3 * we) / den)
    assert crh.objective_[0] == pytest.approx(2 * 2.5 * wc + 25 * we)


def test_crh_absolute_loss_weighted_median(numeric):
    crh = CRH(loss="absolute").fit(numeric)
    np.testing.assert_allclose(crh.truths_, [1, 2, 3, 0, 5])


def test_catd_numeric_one_step(numeric):
    # Squared residuals from the medians: A 0, B 0, C 1, D 1, E 25 + 25 = 50.
    catd = one_step(CATD(max_iter=1), numeric)
    chi = 0.8312  # chi2.ppf(0.025, 5), SPEC A3
    np.testing.assert_allclose(
        catd.weights_["weight"], chi / (np.array([0, 0, 1, 1, 50]) + 1e-9), rtol=1e-4
    )
    np.testing.assert_allclose(catd.truths_, [1, 2, 3, 0, 5], atol=1e-8)


def test_weighted_average_one_step(numeric):
    # From the means, squared losses: A = B = 2.08, C = D = 2.68, E = 32.08 (5 answers each),
    # q = 1 / sqrt(L / 5).
    wa = one_step(WeightedAverage(max_iter=1), numeric)
    q = 1 / np.sqrt(np.array([2.08, 2.08, 2.68, 2.68, 32.08]) / 5)
    np.testing.assert_allclose(wa.weights_["weight"], q / q.sum())
    t1 = (2 * q[0] + 2 * q[2] + 6 * q[4]) / (2 * q[0] + 2 * q[2] + q[4])
    assert wa.truths_["t1"] == pytest.approx(t1) == pytest.approx(1.316979, abs=1e-5)


def test_raykar_one_step_and_gamma(numeric):
    # Precisions 1 / (L / 5): A = B = 1 / .416, C = D = 1 / .536, E = 1 / 6.416.
    rk = one_step(Raykar(max_iter=1), numeric)
    tau = 1 / np.array([0.416, 0.416, 0.536, 0.536, 6.416])
    np.testing.assert_allclose(rk.weights_["weight"], tau)
    assert rk.truths_["t1"] == pytest.approx(1.089628, abs=1e-6)
    capped = one_step(Raykar(max_iter=1, gamma=2.0), numeric)
    np.testing.assert_allclose(capped.weights_["weight"], np.minimum(tau, 2.0))


def test_gtm_outliers_and_map_variance(numeric):
    # delta0: t1's 6 is 5x its median 1 -> dropped. delta2 (2 std of what is left): t3's 4
    # (1 > .8), t4's 1 (1 > .8) and t5's 0 (5 > 4) -> dropped. Every kept claim equals its
    # median, so z = 0, truths are the medians, and sigma_u^2 = 2 beta / (2 (alpha + 1) + n_u)
    # with n_u = 5, 5, 4, 4, 3.
    gtm = GTM().fit(numeric)
    np.testing.assert_allclose(gtm.truths_, [1, 2, 3, 0, 5])
    np.testing.assert_array_equal(gtm.weights_["n_outliers"], [0, 0, 1, 1, 2])
    np.testing.assert_allclose(
        gtm.weights_["variance"], [20 / 27, 20 / 27, 20 / 26, 20 / 26, 20 / 25]
    )


def test_gtm_e_step_hand_case():
    # One task, two workers, no outlier removal, no standardisation: median 2, z = (-1, 1).
    # Iteration 1 with sigma^2 = 1: mu = (0 + -1 + 1) / (1 + 2) = 0 -> truth 2 exactly.
    data = Answers.from_frame(
        pd.DataFrame({"task": [1, 1], "worker": ["a", "b"], "answer": [1.0, 3.0]})
    )
    gtm = GTM(delta0=None, delta2=None, standardize=False).fit(data)
    assert gtm.truths_.iloc[0] == pytest.approx(2.0)
    # M-step: (2 beta + 1) / (2 (alpha + 1) + 1) = 21 / 23 for both.
    np.testing.assert_allclose(gtm.weights_["variance"], [21 / 23, 21 / 23])


# ---------------------------------------------------------------------- SPEC oracles
def test_catd_chi_square_oracles():
    assert stats.chi2.ppf(0.025, 5) == pytest.approx(0.8312, abs=1e-4)
    assert stats.chi2.ppf(0.025, 30) == pytest.approx(16.79, abs=1e-2)
    assert stats.chi2.ppf(0.025, 100) == pytest.approx(74.22, abs=1e-2)
