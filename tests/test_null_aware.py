"""P3's NULL-aware mechanisms: RR with NULL and Laplace with NULL replacement."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd import Answers, ValidationError, datasets
from privtd.mechanisms import KRRNull, LaplaceNull, TwoLayerNull, worker_totals


def sparse(n_workers: int, n_tasks: int, value: int, answered: float, seed: int) -> Answers:
    rng = np.random.default_rng(seed)
    mask = rng.random((n_workers, n_tasks)) < answered
    w, t = np.nonzero(mask)
    return Answers(
        t.astype(np.int32),
        w.astype(np.int32),
        np.full(w.size, float(value)),
        pd.RangeIndex(n_tasks),
        pd.RangeIndex(n_workers),
    )


def test_keep_probability_oracle_and_inverse():
    m = KRRNull.from_epsilon(3.0, low=0, high=4)  # |Gamma| = 5
    assert m.keep == pytest.approx(0.80, abs=5e-3)  # P3: "about 80%"
    assert m.keep == pytest.approx(math.exp(3) / (5 + math.exp(3)))
    assert m.epsilon == pytest.approx(3.0)
    lp = LaplaceNull.from_epsilon(1.0, low=0, high=9)
    # Tight on the integer grid: a cell moves by at most high - low = 9 steps.
    assert lp.scale == pytest.approx(9.0) and lp.epsilon == pytest.approx(1.0)
    # P3's calibration, |Gamma| / epsilon, is stated at its exact value on the grid.
    assert LaplaceNull(10.0, 0, 9).epsilon == pytest.approx(0.9)


def test_krr_null_output_law_and_tightness():
    m = KRRNull.from_epsilon(1.5, low=0, high=4)
    data = sparse(400, 500, value=2, answered=0.5, seed=1)
    out = m.perturb(data, rng=2)
    answered = np.zeros((400, 500), bool)
    answered[data.worker, data.task] = True
    grid = np.full((400, 500), -1.0)  # -1 marks a NULL output
    grid[out.worker, out.task] = out.value
    other = 1 / (5 + math.exp(1.5))
    for cells, own in ((grid[answered], 2.0), (grid[~answered], -1.0)):
        n = cells.size
        for symbol in (-1.0, 0.0, 1.0, 2.0, 3.0, 4.0):
            p = m.keep if symbol == own else other
            freq = (cells == symbol).mean()
            assert abs(freq - p) < 4.5 * math.sqrt(p * (1 - p) / n), (own, symbol)
    # Tight: the keep / other ratio is exactly e^epsilon, NULL included.
    assert math.log(m.keep / other) == pytest.approx(m.epsilon)


def test_laplace_null_output():
    m = LaplaceNull(2.5, low=0, high=4)  # P3's calibration for epsilon 2; exactly 1.6
    data = sparse(300, 400, value=1, answered=0.3, seed=3)
    out = m.perturb(data, rng=4)
    assert out.n_answers == 300 * 400  # a complete real-valued row per worker
    answered = np.zeros((300, 400), bool)
    answered[data.worker, data.task] = True
    grid = np.empty((300, 400))
    grid[out.worker, out.task] = out.value
    noise = grid[answered] - 1.0
    assert (noise == np.round(noise)).all()  # on the integer grid
    # Discrete Laplace: P(|J| = k) = 2 (1 - p) p^k / (1 + p), k >= 1. Pool |J| >= 8.
    p = math.exp(-1 / 2.5)
    k = np.minimum(np.abs(noise).astype(int), 8)
    expected = np.array([(1 - p) / (1 + p)] + [2 * (1 - p) * p**i / (1 + p) for i in range(1, 8)])
    expected = np.append(expected, 1 - expected.sum()) * k.size
    assert stats.chisquare(np.bincount(k, minlength=9), expected).pvalue > 1e-3
    # NULLs are filled uniformly on {0..4}: mean 2, plus zero-mean noise.
    nulls = grid[~answered]
    sd = math.sqrt(2.0 + 2 * p / (1 - p) ** 2)
    assert abs(nulls.mean() - 2.0) < 4 * sd / math.sqrt(nulls.size)
    constant = LaplaceNull(2.5, low=0, high=4, fill=0.0).perturb(data, rng=4)
    grid[constant.worker, constant.task] = constant.value
    assert abs(grid[~answered].mean()) < 4 * 2.5 * math.sqrt(2) / math.sqrt(nulls.size)


def test_laplace_null_report_is_a_uniform_answers_report():
    # Why AwareNull has no Laplace variant (docs/reproduction.md): a NULL cell's report has the
    # law of an answer drawn uniformly from the scores, so no estimator can tell the answered
    # share from the reports.
    m = LaplaceNull.from_epsilon(4.0, low=0, high=4)  # noise scale 1.25
    n_workers, n_tasks = 400, 100
    worker = np.repeat(np.arange(n_workers, dtype=np.int32), n_tasks // 2)
    task = np.tile(np.arange(n_tasks // 2, dtype=np.int32), n_workers)
    uniform = np.random.default_rng(7).integers(0, 5, worker.size).astype(float)
    # Tasks 0-49 answered uniformly at random, tasks 50-99 left NULL by everyone.
    data = Answers(task, worker, uniform, pd.RangeIndex(n_tasks), pd.RangeIndex(n_workers))
    out = m.perturb(data, rng=8)
    from_answers = out.value[out.task < n_tasks // 2]
    from_nulls = out.value[out.task >= n_tasks // 2]
    assert from_answers.size == from_nulls.size == 20_000
    assert stats.ks_2samp(from_answers, from_nulls).pvalue > 1e-3
    # The test has power: answers all equal to the middle score are told apart at once.
    middle = Answers(task, worker, np.full(worker.size, 2.0), data.tasks, data.workers)
    out = m.perturb(middle, rng=8)
    assert stats.ks_2samp(out.value[out.task < 50], out.value[out.task >= 50]).pvalue < 1e-6


@pytest.mark.parametrize(
    "mech",
    [
        KRRNull.from_epsilon(1.0, 0, 4),
        LaplaceNull.from_epsilon(1.0, 0, 4),
        TwoLayerNull.from_epsilon(1.0, 0, 4),
    ],
)
def test_record_local_equals_batch(mech):
    data = sparse(20, 15, value=3, answered=0.4, seed=5)
    batch = mech.perturb(data, rng=8)
    tasks = list(data.tasks)
    for w in range(data.n_workers):
        mask = data.worker == w
        mine = dict(zip(data.tasks.take(data.task[mask]), data.value[mask], strict=True))
        row = mech.perturb_worker(mine, tasks=tasks, worker=data.workers[w], rng=8)
        expected = [None] * len(tasks)
        sel = batch.worker == w
        for t, v in zip(batch.task[sel], batch.value[sel], strict=True):
            expected[t] = float(v)
        assert row == expected


def test_every_cell_counts_towards_the_total():
    data = datasets.load("web").answers
    m = KRRNull.from_epsilon(0.5, low=1, high=5)
    totals = worker_totals(data, m)
    assert (totals["n_released"] == data.n_tasks).all()
    np.testing.assert_allclose(totals["epsilon_total"], 0.5 * data.n_tasks)


def test_bad_input():
    with pytest.raises(ValidationError, match="not integers in \\[0, 4\\]"):
        KRRNull.from_epsilon(1.0, 0, 4).perturb_worker({"a": 7}, tasks=["a"])
    with pytest.raises(ValidationError, match="not in the task list"):
        KRRNull.from_epsilon(1.0, 0, 4).perturb_worker({"z": 1}, tasks=["a"])
    with pytest.raises(ValidationError, match="low < high"):
        LaplaceNull(1.0, 3, 3)
    with pytest.raises(ValidationError, match="'fill' of LaplaceNull must be an integer in"):
        LaplaceNull(1.0, 0, 4, fill=9.0)
    with pytest.raises(ValidationError, match="'epsilon' parameter of LaplaceNull"):
        LaplaceNull.from_epsilon(0.0, 0, 4)


def test_two_layer_null_marginal_law():
    m = TwoLayerNull(1.0, 0, 4)
    # Numerical check of the closed-form marginal: average keep / other over eps_u.
    x = np.linspace(0, 2.0, 400_001)
    keep, other = (np.exp(x) / (5 + np.exp(x))).mean(), (1 / (5 + np.exp(x))).mean()
    assert m.epsilon == pytest.approx(math.log(keep / other), rel=1e-5)
    # 100,000 workers with one answered cell each: the marginal keep rate.
    data = sparse(100_000, 1, value=2, answered=1.0, seed=9)
    out = m.perturb(data, rng=10)
    kept = np.zeros(100_000, bool)
    kept[out.worker[out.value == 2.0]] = True
    assert abs(kept.mean() - keep) < 4.5 * math.sqrt(keep * (1 - keep) / 100_000)
    assert "not a worker-level guarantee" in m.guarantee.note and "share eps_u" in m.guarantee.note


@pytest.mark.parametrize("name", ["laplace", "krr-null", "two-layer-null", "exp-gaussian"])
def test_answer_range_is_required(name):
    from privtd.mechanisms import make_mechanism

    with pytest.raises(ValidationError, match="needs the declared answer range"):
        make_mechanism(name, 1.0)
