"""The compiled (numba) and numpy kernels compute the same EM, estimator by estimator."""

from __future__ import annotations

import numpy as np
import pytest

from privtd import ValidationError, datasets
from privtd.inference import (
    AwareGaussian,
    AwareOneCoin,
    DawidSkene,
    OneCoinDawidSkene,
    WeightedVote,
    _kernels,
)
from privtd.mechanisms import ExpGaussian, TwoLayerRR


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
