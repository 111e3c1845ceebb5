"""The compiled (numba) and numpy kernels compute the same EM, estimator by estimator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import digamma

from privtd import ValidationError, datasets
from privtd.experiments import bigdata18
from privtd.inference import (
    AwareDawidSkene,
    AwareGaussian,
    AwareNull,
    AwareOneCoin,
    DawidSkene,
    OneCoinDawidSkene,
    WeightedVote,
    _kernels,
    aware_dawid_skene,
)
from privtd.inference.aware_null import null_channel
from privtd.mechanisms import ExpGaussian, KRRNull, OneLayerRR, TwoLayerNull, TwoLayerRR


def test_numba_is_installed_for_tests():
    # The test extra installs numba, so both backends are always exercised here.
    assert _kernels.available_backends() == ["numpy", "numba"]


@pytest.fixture
def backend():
    before = _kernels.get_backend()
    yield _kernels.set_backend
    _kernels.set_backend(before)


@pytest.fixture(scope="module")
def crowd():
    # Unsorted task order, several label counts and gold, to exercise TaskLayout and the gold path.
    answers, truth, _ = datasets.make_categorical(3000, 40, 4, answers_per_task=4, rng=8)
    order = np.random.default_rng(0).permutation(answers.n_answers)
    shuffled = type(answers)(
        answers.task[order],
        answers.worker[order],
        answers.value[order],
        answers.tasks,
        answers.workers,
        answers.labels,
    )
    return shuffled, truth


@pytest.mark.parametrize("cls", [DawidSkene, OneCoinDawidSkene, WeightedVote])
def test_backends_agree(cls, crowd, backend):
    answers, truth = crowd
    gold = truth.iloc[:50]
    fitted = {}
    for name in ("numpy", "numba"):
        backend(name)
        fitted[name] = cls().fit(answers, gold=gold)
    a, b = fitted["numpy"], fitted["numba"]
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-10)
    np.testing.assert_allclose(a.probas_, b.probas_, atol=1e-9)
    np.testing.assert_allclose(a.weights_["weight"], b.weights_["weight"], rtol=1e-9)
    assert (b.truths_.loc[gold.index] == gold).all()


def test_backends_agree_on_the_aware_models(backend):
    # The worker step over a grid of cells: both backends, both aware models.
    answers, _, _ = datasets.make_categorical(2000, 30, 2, answers_per_task=4, rng=9)
    mech = TwoLayerRR.from_epsilon(0.5)
    noisy = mech.perturb(answers, rng=10)
    numeric, _, _ = datasets.make_numeric(40, 30, error_rate=1.0, rng=11)
    gauss = ExpGaussian(1.0, float(numeric.value.min()), float(numeric.value.max()))
    noisy_numeric = gauss.perturb(numeric, rng=12)
    fitted = {}
    for name in ("numpy", "numba"):
        backend(name)
        fitted[name] = (AwareOneCoin(mech).fit(noisy), AwareGaussian(gauss).fit(noisy_numeric))
    for a, b in zip(fitted["numpy"], fitted["numba"], strict=True):
        assert a.n_iter_ == b.n_iter_
        np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-10)
        np.testing.assert_allclose(a.weights_.to_numpy(), b.weights_.to_numpy(), rtol=1e-9)
        np.testing.assert_allclose(a.truths_.to_numpy(float), b.truths_.to_numpy(float))


@pytest.mark.parametrize("told", [True, False])
def test_backends_agree_on_aware_gaussian(told, backend):
    # The compiled iterations against the numpy ones, with gold, with and without the law.
    answers, truth, _ = datasets.make_numeric(60, 80, error_rate=1.0, rng=15)
    mech = ExpGaussian(0.5, float(answers.value.min()), float(answers.value.max()))
    noisy = mech.perturb(answers, rng=16)
    gold = truth.iloc[:4]
    fitted = {}
    for name in ("numpy", "numba"):
        backend(name)
        fitted[name] = AwareGaussian(mech if told else None).fit(noisy, gold=gold)
    a, b = fitted["numpy"], fitted["numba"]
    assert a.n_iter_ == b.n_iter_ > 3 and a.converged_ and b.converged_
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-10)
    np.testing.assert_allclose(a.truths_.to_numpy(), b.truths_.to_numpy(), atol=1e-9)
    np.testing.assert_allclose(a.truth_sd_, b.truth_sd_, rtol=1e-9)
    np.testing.assert_allclose(a.variance_prior_, b.variance_prior_, atol=1e-12)
    np.testing.assert_allclose(a.weights_.to_numpy(), b.weights_.to_numpy(), rtol=1e-9)
    assert (b.truths_.loc[gold.index] == gold).all()


@pytest.mark.parametrize("learned", [True, False])
@pytest.mark.parametrize("k", [2, 3])
def test_backends_agree_on_the_aware_dawid_skene_jump(learned, k, backend):
    # SQUAREM's jump from three states, with its log confusions and bound: compiled against numpy
    # (the numpy jump's own properties are tested in test_aware_dawid_skene.py).
    rng = np.random.default_rng(17)
    flips = np.linspace(0.05, 0.6, 9)
    channel = aware_dawid_skene.report_channel(flips, k)
    log_h = np.log(np.full(9, 1 / 9))
    alpha = rng.random((k, k)) + 1.0

    def state():
        pi = rng.random((6, k, k)) + 2 * np.eye(k)
        q = rng.dirichlet(np.ones(9), 6)
        q[0, :3] = 1e-200  # grid points a worker's answers rule out: under the 1e-12 floor
        return pi / pi.sum(axis=1, keepdims=True), q, rng.dirichlet(np.ones(k)), None, 0.0

    states = [state() for _ in range(3)]
    jumped = {}
    for name in ("numpy", "numba"):
        backend(name)
        jumped[name] = aware_dawid_skene._jump(*states, learned, channel, log_h, alpha)
    for a, b in zip(jumped["numpy"], jumped["numba"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)
    if not learned:
        assert jumped["numba"][2] is not states[2][2]
        np.testing.assert_array_equal(jumped["numba"][2], states[2][2])


@pytest.mark.parametrize(
    ("k", "mech"), [(3, OneLayerRR.from_epsilon(1.0, 3)), (2, TwoLayerRR.from_epsilon(0.5))]
)
def test_backends_agree_on_aware_dawid_skene(k, mech, backend):
    # The compiled worker step (one flip, and a flip law on a grid) against the numpy one.
    answers, truth, _ = datasets.make_categorical(1500, 40, k, answers_per_task=5, rng=13)
    noisy = mech.perturb(answers, rng=14)
    gold = truth.iloc[:20]
    fitted = {}
    for name in ("numpy", "numba"):
        backend(name)
        fitted[name] = AwareDawidSkene(mech).fit(noisy, gold=gold)
    a, b = fitted["numpy"], fitted["numba"]
    assert a.n_iter_ == b.n_iter_ > 3
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-10)
    np.testing.assert_allclose(a.probas_, b.probas_, atol=1e-9)
    np.testing.assert_allclose(a.confusions_, b.confusions_, atol=1e-9)
    np.testing.assert_allclose(a.weights_.to_numpy(), b.weights_.to_numpy(), rtol=1e-9)


@pytest.mark.parametrize(
    ("mech", "location"),
    [(KRRNull.from_epsilon(2.0, 0, 9), "median"), (TwoLayerNull(3.0, 0, 9), "mean")],
)
@pytest.mark.parametrize("estimate", ["variational", "map"])
def test_backends_agree_on_aware_null(mech, location, estimate, backend):
    # P3's design at sparsity 0.5, with gold on some tasks. Where a task converges slowly
    # (epsilon 0.5 here) rounding can move its stopping step, so a well-conditioned setting.
    answers, mu = bigdata18.synthetic(400, 60, 0.5, np.random.default_rng(4))
    released = mech.perturb(answers, rng=5)
    gold = pd.Series(mu[:5], index=released.tasks[:5])
    fitted = {}
    for name in ("numpy", "numba"):
        backend(name)
        fitted[name] = AwareNull(mech, location=location, estimate=estimate).fit(
            released, gold=gold
        )
    a, b = fitted["numpy"], fitted["numba"]
    assert a.n_iter_ == b.n_iter_ > 3 and a.converged_ and b.converged_
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-10)
    np.testing.assert_allclose(a.truths_.to_numpy(), b.truths_.to_numpy(), atol=1e-9)
    np.testing.assert_allclose(a.answer_rate_.to_numpy(), b.answer_rate_.to_numpy(), atol=1e-9)
    assert (b.truths_.loc[gold.index] == gold).all()


@pytest.mark.parametrize("estimate", ["variational", "map"])
def test_compiled_null_e_step_is_the_numpy_one(estimate):
    # The compiled E step (symmetric channel, digamma as log(y) + c) against AwareNull.e_step,
    # which is checked against enumeration in test_aware_null.py.
    rng = np.random.default_rng(6)
    channel = null_channel(KRRNull.from_epsilon(1.0, 0, 3))
    counts = rng.integers(0, 9, (50, 5)).astype(float)
    n_q = counts.sum(axis=1)
    expected = rng.uniform(0.01, 1.0, (50, 5)) * n_q[:, None] / 3.0
    rate, prior = np.array([3.0, 7.0]), np.array([0.2, 1.5, 0.1, 4.0])
    want, predicted = AwareNull.e_step(counts, channel, expected, n_q, rate, prior, estimate)
    out, w = np.empty(5), np.empty(5)
    for q in range(50):
        n_total = n_q[q] + rate.sum()
        y, c = _kernels._psi_parts_nb(n_total)
        task = (channel[0, 0], channel[0, 1], *rate, prior, prior.sum(), np.log(y) + c, n_total)
        use_map = estimate == "map"
        loglik = _kernels._null_e_step_nb(counts[q], *task, use_map, expected[q], out, w, True)
        np.testing.assert_allclose(out, want[q], rtol=1e-12)
        np.testing.assert_allclose(loglik, counts[q] @ np.log(predicted[q]), rtol=1e-12)
        # Unscored (a step's first two E steps): the same counts, no log-likelihood.
        unscored = _kernels._null_e_step_nb(counts[q], *task, use_map, expected[q], out, w, False)
        np.testing.assert_allclose(out, want[q], rtol=1e-12)
        assert unscored == 0.0


def test_compiled_digamma_is_scipys():
    x = np.r_[np.logspace(-12, 7, 2000), np.linspace(0.01, 12, 2000)]
    parts = np.array([_kernels._psi_parts_nb(v) for v in x])
    got, want = np.log(parts[:, 0]) + parts[:, 1], digamma(x)
    # Relative where |psi| is large (psi(1e-12) = -1e12), absolute near its root (1.46).
    assert (np.abs(got - want) <= 1e-12 * np.maximum(1.0, np.abs(want))).all()


def test_layout_sorts_only_when_needed():
    t = np.array([0, 0, 1, 2, 2], dtype=np.int32)
    layout = _kernels.TaskLayout(t, t, t, 3)
    assert layout.task is t and layout.start.tolist() == [0, 2, 3, 5]
    shuffled = np.array([2, 0, 1, 0, 2], dtype=np.int32)
    layout = _kernels.TaskLayout(shuffled, shuffled, shuffled, 3)
    assert layout.task.tolist() == [0, 0, 1, 2, 2]


def test_unknown_backend():
    with pytest.raises(ValidationError, match="Backend must be 'numpy' or 'numba'"):
        _kernels.set_backend("cuda")
