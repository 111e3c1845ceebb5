"""The compiled (numba) and numpy kernels compute the same EM, estimator by estimator."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy.special import digamma

from privtd import ValidationError, datasets
from privtd._config import config_context, get_config, set_config
from privtd.errors import ConvergenceWarning
from privtd.experiments import bigdata18
from privtd.inference import (
    MACE,
    AwareDawidSkene,
    AwareGaussian,
    AwareNull,
    AwareOneCoin,
    DawidSkene,
    MajorityVote,
    OneCoinDawidSkene,
    WeightedVote,
    _kernels,
    aware_dawid_skene,
)
from privtd.inference._kernels import _numba, _numpy
from privtd.inference.aware_null import null_channel
from privtd.mechanisms import ExpGaussian, KRRNull, OneLayerRR, TwoLayerNull, TwoLayerRR


def test_numba_is_installed_for_tests():
    # The test extra installs numba, so both backends are always exercised here.
    assert _kernels.available_backends() == ["numpy", "numba"]


@pytest.fixture
def backend():
    with config_context():  # the thread's setting as it was, after the test
        yield _kernels.set_backend


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


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_aware_gaussian_and_null_tick_once_per_iteration(name, backend):
    # One loop drives both backends' steps: progress hears of every iteration, in order.
    backend(name)
    answers, _, _ = datasets.make_numeric(60, 80, error_rate=1.0, rng=15)
    released, _ = bigdata18.synthetic(300, 40, 0.5, np.random.default_rng(3))
    mech = KRRNull.from_epsilon(1.0, 0, 9)
    for est, data in ((AwareGaussian(), answers), (AwareNull(mech), mech.perturb(released, rng=4))):
        ticks: list[tuple[int, int]] = []
        est.progress = lambda n, total, ticks=ticks: ticks.append((n, total))
        est.fit(data)
        assert est.converged_ and est.n_iter_ > 3
        assert ticks == [(n, est.max_iter) for n in range(1, est.n_iter_ + 1)]


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_aware_null_objective_counts_every_task_once(name, backend):
    # After the first step every task has stepped once from the pooled start: the objective is
    # their summed log-likelihood per report cell. Later, the tasks that stopped count with
    # their last value, so the objective never drops to the share still stepping.
    backend(name)
    mech = KRRNull.from_epsilon(1.0, 0, 9)
    answers, _ = bigdata18.synthetic(300, 40, 0.5, np.random.default_rng(3))
    released = mech.perturb(answers, rng=4)
    with pytest.warns(ConvergenceWarning):
        first = AwareNull(mech, max_iter=1).fit(released)
    counts, channel, _, n_q, rate, prior, _ = first._posterior
    start = np.outer(n_q, np.maximum(first.pooled_, 1e-12))
    _, loglik = _numpy.null_accelerated_step(counts, channel, start, n_q, rate, prior, "map")
    np.testing.assert_allclose(first.objective_, [loglik.sum() / n_q.sum()], rtol=1e-9)
    full = AwareNull(mech).fit(released)
    np.testing.assert_allclose(full.objective_[0], first.objective_[0], rtol=1e-12)
    assert np.all(np.abs(np.diff(full.objective_)) < 0.1 * abs(full.objective_[0]))


def test_aware_null_step_is_the_same_over_the_threads(backend, monkeypatch):
    # The compiled step over the threads and on one: the same 16 blocks, the same bits.
    backend("numba")
    mech = KRRNull.from_epsilon(0.5, 0, 9)
    answers, _ = bigdata18.synthetic(60, 400, 0.5, np.random.default_rng(6))
    released = mech.perturb(answers, rng=7)
    fits = []
    for tasks in (10**9, 0):
        monkeypatch.setattr(_numba, "NULL_PARALLEL_TASKS", tasks)
        fits.append(AwareNull(mech, estimate="variational").fit(released))
    one, threads = fits
    assert one.n_iter_ == threads.n_iter_ > 3
    assert np.array_equal(one.objective_, threads.objective_)
    assert np.array_equal(one.truths_.to_numpy(), threads.truths_.to_numpy())
    assert np.array_equal(one.answer_rate_.to_numpy(), threads.answer_rate_.to_numpy())


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
    # The compiled E step (symmetric channel, digamma as log(y) + c) against the numpy one,
    # which is checked against enumeration in test_aware_null.py.
    rng = np.random.default_rng(6)
    channel = null_channel(KRRNull.from_epsilon(1.0, 0, 3))
    counts = rng.integers(0, 9, (50, 5)).astype(float)
    n_q = counts.sum(axis=1)
    expected = rng.uniform(0.01, 1.0, (50, 5)) * n_q[:, None] / 3.0
    rate, prior = np.array([3.0, 7.0]), np.array([0.2, 1.5, 0.1, 4.0])
    want, predicted = _numpy.null_e_step(counts, channel, expected, n_q, rate, prior, estimate)
    out, w = np.empty(5), np.empty(5)
    for q in range(50):
        n_total = n_q[q] + rate.sum()
        y, c = _numba._psi_parts_nb(n_total)
        task = (channel[0, 0], channel[0, 1], *rate, prior, prior.sum(), np.log(y) + c, n_total)
        use_map = estimate == "map"
        loglik = _numba._null_e_step_nb(counts[q], *task, use_map, expected[q], out, w, True)
        np.testing.assert_allclose(out, want[q], rtol=1e-12)
        np.testing.assert_allclose(loglik, counts[q] @ np.log(predicted[q]), rtol=1e-12)
        # Unscored (a step's first two E steps): the same counts, no log-likelihood.
        unscored = _numba._null_e_step_nb(counts[q], *task, use_map, expected[q], out, w, False)
        np.testing.assert_allclose(out, want[q], rtol=1e-12)
        assert unscored == 0.0


def test_compiled_digamma_is_scipys():
    x = np.r_[np.logspace(-12, 7, 2000), np.linspace(0.01, 12, 2000)]
    parts = np.array([_numba._psi_parts_nb(v) for v in x])
    got, want = np.log(parts[:, 0]) + parts[:, 1], digamma(x)
    # Relative where |psi| is large (psi(1e-12) = -1e12), absolute near its root (1.46).
    assert (np.abs(got - want) <= 1e-12 * np.maximum(1.0, np.abs(want))).all()


def test_both_backends_give_every_kernel():
    # One set of names: a kernel one backend lacks would fail only when a fit on it reached it.
    assert set(_numpy.KERNELS) == set(_numba.KERNELS)
    assert [b.reads_task_codes for b in _kernels.BACKENDS.values()] == [True, False]


def test_layout_sorts_only_when_needed():
    t = np.array([0, 0, 1, 2, 2], dtype=np.int32)
    layout = _kernels.TaskLayout(t, t, t, 3)
    assert layout.task is t and layout.start.tolist() == [0, 2, 3, 5]
    shuffled = np.array([2, 0, 1, 0, 2], dtype=np.int32)
    layout = _kernels.TaskLayout(shuffled, shuffled, shuffled, 3)
    assert layout.task.tolist() == [0, 0, 1, 2, 2]


def test_unknown_backend():
    with pytest.raises(ValidationError, match="must be 'auto', 'numpy' or 'numba'. Got 'cuda'"):
        _kernels.set_backend("cuda")
    with pytest.raises(ValidationError, match="must be 'auto', 'numpy' or 'numba'"):
        set_config(backend="gpu")


def test_privtd_backend_is_checked_where_it_is_read():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PRIVTD_BACKEND": "gpu"}
    out = subprocess.run(
        [sys.executable, "-c", "import privtd._config"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 1
    assert "PRIVTD_BACKEND must be 'auto', 'numpy' or 'numba'. Got 'gpu'." in out.stderr


# ---------------------------------------------------------------------- the default backend
@pytest.fixture
def default_policy():
    """The kernels under the "auto" setting, as after a plain import with numba installed and
    no PRIVTD_BACKEND."""
    # numba is a core dependency: the default install has it.
    assert "numba" in _kernels.available_backends()
    with config_context(backend="auto"):
        yield _kernels


def test_planned_passes():
    assert MajorityVote()._planned_passes() == 1
    assert DawidSkene()._planned_passes() == DawidSkene.typical_iterations == 30
    assert DawidSkene(max_iter=12)._planned_passes() == 12
    assert DawidSkene(max_iter=400, tol=0.0)._planned_passes() == 400  # tol=0 runs them all
    assert MACE()._planned_passes() == 10 * 50
    assert MACE(n_restarts=3, max_iter=80, tol=0.0)._planned_passes() == 240
    assert MACE(n_restarts=3, max_iter=20)._planned_passes() == 60


def test_the_default_backend_weighs_answers_times_passes(default_policy, monkeypatch):
    import threading

    kernels = default_policy
    monkeypatch.setattr(kernels, "NUMBA_MIN_WORK", 1000)
    assert kernels.choose_backend(999) == "numpy"
    assert kernels.choose_backend(1000) == "numba"
    assert kernels.choose_backend(100, passes=9) == "numpy"
    assert kernels.choose_backend(100, passes=10) == "numba"
    with kernels.backend_for(100, passes=9) as name:
        assert name == kernels.get_backend() == "numpy"
        seen: list[str] = []
        other = threading.Thread(target=lambda: seen.append(kernels.get_backend()))
        other.start()
        other.join()
        assert seen == ["numba"]  # another thread's fit is not affected
        with kernels.backend_for(10**9) as inner:  # a fit inside a fit keeps its backend
            assert inner == kernels.get_backend() == "numpy"
    assert kernels.get_backend() == "numba"  # outside a fit: as for a fit of unknown size
    # What ran before does not count: after numba's kernels ran, a small fit still runs numpy.
    with kernels.backend_for(10**9) as name:
        assert name == "numba"
        DawidSkene().fit(datasets.make_categorical(50, 5, 2, rng=0)[0])
    assert kernels.choose_backend(999) == "numpy"


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_a_configured_backend_always_wins(default_policy, name):
    kernels = default_policy
    with config_context(backend=name):
        for work in (1, 10**12):
            with kernels.backend_for(work) as used:
                assert used == kernels.get_backend() == kernels.current_backend().name == name
    assert get_config()["backend"] == "auto"  # restored after the block


def test_the_settings_are_public_on_privtd(default_policy):
    import privtd

    assert privtd.config_context is config_context
    with privtd.config_context(backend="numpy"):
        assert privtd.get_config()["backend"] == "numpy"
        with default_policy.backend_for(10**12) as used:
            assert used == "numpy"
    assert {"config_context", "get_config", "set_config"} <= set(privtd.__all__)


def test_the_setting_is_per_thread(default_policy):
    import threading

    seen: list[str] = []

    def fit_in_thread() -> None:
        seen.append(get_config()["backend"])
        set_config(backend="numba")  # this thread's only
        seen.append(get_config()["backend"])

    with config_context(backend="numpy"):
        other = threading.Thread(target=fit_in_thread)
        other.start()
        other.join()
        assert get_config()["backend"] == "numpy"
    # A new thread starts from the process's default (PRIVTD_BACKEND, else "auto").
    assert seen == [os.environ.get("PRIVTD_BACKEND", "auto"), "numba"]


@pytest.mark.filterwarnings("ignore::privtd.errors.ConvergenceWarning")
def test_a_fit_records_and_runs_the_backend_its_work_picks(default_policy, monkeypatch):
    kernels = default_policy
    monkeypatch.setattr(kernels, "NUMBA_MIN_WORK", 10_000)
    calls: list[str] = []
    for backend, table in (("numpy", _numpy.KERNELS), ("numba", _numba.KERNELS)):
        step = table["ds_step"]
        monkeypatch.setitem(
            table, "ds_step", lambda *a, _s=step, _b=backend: calls.append(_b) or _s(*a)
        )
    answers, truth, _ = datasets.make_categorical(200, 20, 2, rng=0)  # 1,000 answers
    few = DawidSkene(max_iter=9, tol=0.0).fit(answers)  # work 9,000
    assert few._kernel_backend == "numpy" and set(calls) == {"numpy"}
    calls.clear()
    many = DawidSkene(max_iter=10, tol=0.0).fit(answers)  # work 10,000
    assert many._kernel_backend == "numba" and set(calls) == {"numba"}
    # MACE plans restarts x iterations: 2 x 5 x 1,000 answers.
    assert MACE(n_restarts=2, max_iter=5, tol=0.0).fit(answers)._kernel_backend == "numba"
    assert MACE(n_restarts=1, max_iter=5, tol=0.0).fit(answers)._kernel_backend == "numpy"
    # 200 tasks of 5 answers from workers of accuracy 0.55-0.95: about 0.85 right (sd 0.03)
    assert (few.truths_ == truth.reindex(few.truths_.index)).mean() > 0.7


def test_numba_is_imported_only_when_its_backend_runs():
    # In a fresh process: this one has imported numba already.
    code = (
        "import sys\n"
        "from privtd.inference import _kernels, DawidSkene\n"
        "from privtd import datasets\n"
        "compiled = 'privtd.inference._kernels._numba'\n"
        "a = datasets.make_categorical(50, 5, 2, rng=0)[0]\n"
        "print('numba' in sys.modules, compiled in sys.modules)\n"
        "used = DawidSkene().fit(a)._kernel_backend\n"
        "print(used, 'numba' in sys.modules, compiled in sys.modules)\n"
        "_kernels.set_backend('numba')\n"
        "print(DawidSkene().fit(a)._kernel_backend, 'numba' in sys.modules)\n"
        "print(type(sys.modules[compiled]._ds_step_nb).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PRIVTD_BACKEND", None)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.split() == [
        *("False", "False"),
        *("numpy", "False", "False"),
        *("numba", "True"),
        "CPUDispatcher",
    ]


def test_the_measured_threshold_keeps_small_fits_on_numpy():
    # Where benchmarks/bench_backend_choice.py put it: the demo's fits (duchenne) run numpy;
    # MACE's defaults on adult_content (89,799 answers) run numba.
    duchenne = datasets.load("duchenne").answers
    for est in (DawidSkene(), OneCoinDawidSkene(), MACE()):
        assert duchenne.n_answers * est._planned_passes() < _kernels.NUMBA_MIN_WORK
    assert 89_799 * MACE()._planned_passes() >= _kernels.NUMBA_MIN_WORK
