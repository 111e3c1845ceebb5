"""Numeric releases on a public grid with exact discrete noise.

- Mironov's floating-point attack (CCS 2012; ``benchmarks/attacks/float_laplace.py``) finds no
  release that rules out a neighbouring answer, seeded and real (OpenDP), 200,000 releases per
  mechanism; on the continuous samplers privtd used before, most releases did.
- The sampled laws match the exact pmfs (chi-square, fixed seeds; the statistic's own law sets
  the tolerance).
- Real releases never touch numpy's generator; seeded ones are unchanged and reproducible.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd import Answers, ValidationError
from privtd.mechanisms import (
    ExpGaussian,
    KRRNull,
    LaplaceNull,
    OneLayerRR,
    TwoLayerNull,
    TwoLayerRR,
)
from privtd.mechanisms._discrete import (
    dgaussian_log_pmf,
    dlaplace_log_pmf,
    opendp_gaussian,
    opendp_laplace,
    sample_dgaussian,
    sample_dlaplace,
)
from privtd.mechanisms._random import Draws

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "attacks"))
import float_laplace as attack  # noqa: E402

N = 200_000


# ---------------------------------------------------------------------------- the attack
def test_the_attack_breaks_the_old_continuous_sampler():
    # The sampler privtd used before (scale 5, answers 0 vs 1): most releases are impossible
    # under the neighbour, and none under the true answer (the inversion is exact).
    m = np.random.default_rng(0).integers(0, 2**53, 20_000)
    y = 0.0 + attack.continuous_laplace_noise(m, 5.0)
    assert attack.reachable_continuous_laplace(y, 0.0, 5.0).all()
    assert 1 - attack.reachable_continuous_laplace(y, 1.0, 5.0).mean() > 0.7


def test_the_addition_attack_breaks_real_valued_noise():
    # Any release computed as fl(x + z): near 0, releases of x = 0 carry low bits that
    # fl(10 + z) cannot produce, whatever the noise law.
    z = np.random.default_rng(1).laplace(scale=10.0, size=20_000)
    assert attack.reachable_by_addition(0.0 + z, 0.0).all()
    assert 1 - attack.reachable_by_addition(0.0 + z, 10.0).mean() > 0.3


@pytest.mark.parametrize(
    "mech, x, neighbour",
    [
        (LaplaceNull(5.0, low=0, high=4), 0.0, 1.0),
        (LaplaceNull(5.0, low=0, high=4), 0.0, 4.0),
        (ExpGaussian.from_epsilon(1.0, low=0.0, high=10.0), 0.0, 10.0),
        (ExpGaussian.from_epsilon(1.0, low=0.0, high=10.0), 3.3, 3.31),
    ],
)
def test_no_seeded_release_excludes_a_neighbour(mech, x, neighbour):
    assert attack.excluded_fraction(mech, x, neighbour, N, rng=7) == 0.0


def test_no_real_laplace_release_excludes_a_neighbour():
    mech = LaplaceNull(5.0, low=0, high=4)
    assert attack.excluded_fraction(mech, 0.0, 1.0, N, rng=None) == 0.0


def test_no_real_exp_gaussian_release_excludes_a_neighbour():
    # 200 workers x 1,000 tasks: each worker's own secret sigma, OpenDP's exact sampler.
    mech = ExpGaussian.from_epsilon(1.0, low=0.0, high=10.0)
    y = attack.releases(mech, 3.3, N, rng=None)
    assert y.size == N
    assert attack.grid_reachable(mech, y, 0.0).all()
    assert attack.grid_reachable(mech, y, 10.0).all()


# ---------------------------------------------------------------------------- exact laws
def _chi_square_pvalue(j: np.ndarray, log_pmf, cap: int) -> float:
    """Pearson's test of integer draws against a symmetric pmf, bins -cap..cap (tails pooled)."""
    edges = np.arange(-cap, cap + 1)
    probs = np.exp(log_pmf(edges))
    tail = (1.0 - probs.sum()) / 2
    counts = np.bincount(np.clip(j, -cap - 1, cap + 1) + cap + 1, minlength=2 * cap + 3)
    expected = np.concatenate(([tail], probs, [tail])) * j.size
    keep = expected > 5  # pool the thin bins into the first one, as Pearson's test requires
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("t", [0.3, 2.5, 40.0])
def test_seeded_discrete_laplace_matches_its_pmf(t):
    n = 100_000
    draws = Draws(3)
    j = sample_dlaplace(t, draws, (1, 2), np.uint64(5), np.arange(n, dtype=np.uint64))
    assert _chi_square_pvalue(j, lambda k: dlaplace_log_pmf(k, t), int(8 * t) + 2) > 1e-4


@pytest.mark.parametrize("s", [0.4, 1.7, 12.3])
def test_seeded_discrete_gaussian_matches_its_pmf(s):
    n = 100_000
    sigma = np.full(n, s)
    j = sample_dgaussian(sigma, Draws(4), 100, np.uint64(9), np.arange(n, dtype=np.uint64))
    assert _chi_square_pvalue(j, lambda k: dgaussian_log_pmf(k, s), int(6 * s) + 2) > 1e-4


def test_opendp_samples_the_same_laws():
    # Real draws are not reproducible: the threshold 1e-6 bounds the flake rate.
    zeros = np.zeros(20_000, dtype=np.int64)
    j = opendp_laplace(zeros, 2.5)
    assert _chi_square_pvalue(j, lambda k: dlaplace_log_pmf(k, 2.5), 22) > 1e-6
    j = opendp_gaussian(zeros, 1.7)
    assert _chi_square_pvalue(j, lambda k: dgaussian_log_pmf(k, 1.7), 12) > 1e-6
    assert (opendp_gaussian(np.array([3, 4]), 0.0) == [3, 4]).all()


def test_exp_gaussian_reports_follow_the_mixture():
    # One report per worker, each with its own secret sigma: the reports' offsets from the
    # answer's code follow the mixture pmf that the guarantee is computed from.
    mech = ExpGaussian(0.5, 0.0, 1.0, granularity=0.25)  # n = 4 steps, beta = 4 steps
    n = 100_000
    answers = Answers(
        task=np.zeros(n, dtype=np.int32),
        worker=np.arange(n, dtype=np.int32),
        value=np.full(n, 0.5),
        tasks=pd.Index(["q"]),
        workers=pd.RangeIndex(n),
    )
    y = mech.perturb(answers, rng=8).value
    j = np.round((y - mech.low) / mech.step).astype(np.int64) - 2
    assert (mech.low + (j + 2) * mech.step == y).all()  # exactly on the grid
    assert _chi_square_pvalue(j, mech.grid_log_pmf, 40) > 1e-4


# ---------------------------------------------------------------------------- epsilon
@pytest.mark.parametrize(
    "mech",
    [
        ExpGaussian.from_epsilon(1.0, 0.0, 10.0),
        ExpGaussian.from_epsilon(3.0, 0.0, 1.0, granularity=0.05),
        ExpGaussian(0.5, 0.0, 1.0, granularity=0.25),
    ],
)
def test_exp_gaussian_epsilon_is_the_supremum_of_the_report_loss(mech):
    beta = mech.n_steps / mech.epsilon  # the continuous limit's Laplace scale, in steps
    a = np.unique(np.concatenate([np.arange(200), np.geomspace(1, 60 * beta, 300).round()]))
    loss = mech.report_loss(a)
    # Never above (quadrature error is ~1e-14), and reached in the tail.
    assert loss.max() <= mech.epsilon * (1 + 1e-9)
    assert loss[-1] >= mech.epsilon * (1 - 1e-6)
    assert mech.epsilon == pytest.approx(mech.n_steps * mech.step * math.sqrt(2 * mech.rate))


def test_exp_gaussian_grid_parameters():
    mech = ExpGaussian.from_epsilon(1.0, 0.0, 10.0)
    assert mech.params()["granularity"] == 10.0 / 1024 and mech.n_steps == 1024
    assert mech.epsilon == pytest.approx(1.0)
    again = ExpGaussian(**mech.params())  # what a campaign stores rebuilds the same mechanism
    assert again == mech
    coarse = ExpGaussian.from_epsilon(1.0, 0.0, 1.0, granularity=0.3)  # 3.33 -> 3 steps
    assert coarse.n_steps == 3 and coarse.epsilon == pytest.approx(1.0)
    assert coarse.grid_code(np.array([0.0, 0.14, 0.16, 1.0])).tolist() == [0, 0, 1, 3]
    for bad in (0.0, -1.0, math.inf, 5.0):
        with pytest.raises(ValidationError, match="granularity"):
            ExpGaussian(1.0, 0.0, 1.0, granularity=bad)


# ---------------------------------------------------------------------------- random sources
@pytest.fixture
def no_numpy_generator(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a real release used numpy's generator")

    monkeypatch.setattr(np.random, "default_rng", refuse)
    monkeypatch.setattr(np.random, "PCG64", refuse)
    monkeypatch.setattr(np.random, "Generator", type("Refused", (), {}))


def _answers(value: float = 1.0, n: int = 50) -> Answers:
    return Answers(
        task=np.arange(n, dtype=np.int32) % 5,
        worker=np.arange(n, dtype=np.int32) // 5,
        value=np.full(n, value),
        tasks=pd.RangeIndex(5),
        workers=pd.RangeIndex(n // 5),
    )


REAL = [
    OneLayerRR.from_epsilon(1.0, n_labels=3),
    TwoLayerRR.from_epsilon(1.0, n_labels=3),
    KRRNull.from_epsilon(1.0, 0, 4),
    TwoLayerNull.from_epsilon(1.0, 0, 4),
    LaplaceNull.from_epsilon(1.0, 0, 4),
    ExpGaussian.from_epsilon(1.0, 0.0, 4.0),
]


@pytest.mark.parametrize("mech", REAL, ids=lambda m: m.name)
def test_real_releases_do_not_use_numpy_generator(mech, no_numpy_generator):
    if mech.kind == "categorical":
        out = mech.perturb_worker(["a", "b", "c", "a"], labels=["a", "b", "c"])
        assert set(out) <= {"a", "b", "c"}
    elif mech.unit == "report":
        assert len(mech.perturb_worker([1.0, 2.5, 4.0])) == 3
    else:
        out = mech.perturb_worker({"t1": 1, "t2": 3}, tasks=["t1", "t2", "t3"])
        assert len(out) == 3


@pytest.mark.parametrize("mech", REAL, ids=lambda m: m.name)
def test_seeded_releases_are_reproducible(mech):
    answers = _answers(1.0)
    if mech.kind == "categorical":
        answers = Answers(
            answers.task,
            answers.worker,
            answers.value.astype(np.int8),
            answers.tasks,
            answers.workers,
            labels=pd.RangeIndex(3),
        )
    a, b = mech.perturb(answers, rng=11), mech.perturb(answers, rng=11)
    np.testing.assert_array_equal(a.value, b.value)


def test_without_opendp_a_real_numeric_release_fails_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "opendp", None)
    monkeypatch.setitem(sys.modules, "opendp.prelude", None)
    with pytest.raises(ValidationError, match=r"pip install 'privtd\[dp\]'"):
        LaplaceNull.from_epsilon(1.0, 0, 4).perturb_worker({"t": 1}, tasks=["t"])
    # Simulation needs no OpenDP.
    assert len(LaplaceNull.from_epsilon(1.0, 0, 4).perturb_worker({"t": 1}, tasks=["t"], rng=1))


# ---------------------------------------------------------------------------- point 7
class _CountedTask(str):
    """A task id that counts how often it is hashed."""

    calls = 0

    def __hash__(self) -> int:
        _CountedTask.calls += 1
        return str.__hash__(self)


def test_null_aware_perturb_worker_is_linear_in_the_tasks():
    # Hashes of task ids, not time: the old code built set(tasks) once per answer (n^2).
    n = 3000
    tasks = [_CountedTask(f"t{i}") for i in range(n)]
    answers = {t: 2 for t in tasks}
    _CountedTask.calls = 0
    KRRNull.from_epsilon(1.0, 0, 4).perturb_worker(answers, tasks=tasks, rng=1)
    assert _CountedTask.calls <= 10 * n


def _cli(args, capsys):
    from privtd.cli import main

    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.err


def test_cli_real_and_seeded_numeric_releases(tmp_path, capsys, monkeypatch):
    csv = tmp_path / "a.csv"
    csv.write_text("task,worker,answer\nt1,w1,1.5\nt2,w1,9.25\nt1,w2,0\n")
    args = ["perturb", str(csv), "-M", "exp-gaussian", "-e", "1", "-p", "low=0", "-p", "high=10"]
    out = tmp_path / "o.csv"
    code, _ = _cli([*args, "--seed", "3", "-o", str(out)], capsys)
    first = out.read_text()
    code2, _ = _cli([*args, "--seed", "3", "-o", str(out)], capsys)
    assert code == code2 == 0 and out.read_text() == first  # seeded: reproducible
    values = pd.read_csv(out)["answer"].to_numpy()
    g = 10 / 1024
    assert (0.0 + np.round(values / g) * g == values).all()  # on the public grid
    code, _ = _cli([*args, "-o", str(out)], capsys)  # real: OpenDP
    assert code == 0
    monkeypatch.setitem(sys.modules, "opendp", None)
    monkeypatch.setitem(sys.modules, "opendp.prelude", None)
    code, err = _cli([*args, "-o", str(out)], capsys)
    assert code != 0 and "pip install 'privtd[dp]'" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_null_aware_perturb_worker_refuses_a_repeated_task():
    with pytest.raises(ValidationError, match="names 1 task\\(s\\) twice"):
        KRRNull.from_epsilon(1.0, 0, 4).perturb_worker({"a": 1}, tasks=["a", "b", "a"])


def test_perturb_help_says_which_source_is_which(capsys):
    from privtd.cli import main

    try:
        main(["perturb", "--help"])
    except SystemExit as exc:
        assert not exc.code
    text = " ".join(capsys.readouterr().out.split())
    assert "OS cryptographic generator" in text and "OpenDP" in text
    assert "not cryptographic" in text and "real arithmetic only" in text


def test_real_exp_gaussian_variance_keeps_the_exponential_tail():
    # attack_expgauss_tail: -ln of a 53-bit uniform stops at 53 ln 2 / rate, and past ~60
    # noise scales the loss of the mixture so truncated exceeds epsilon (1.40 at 100 scales,
    # epsilon 1). The real sampler must reach beyond that cap when the random bits say so.
    import attack_expgauss_tail as tail

    mech = ExpGaussian.from_epsilon(1.0, 0.0, 10.0)
    cap = tail.largest_variance(mech)
    assert cap > 100 * math.log(2) > 53 * math.log(2)
    beta = mech.n_steps / mech.epsilon
    loss = tail.report_loss(mech, np.array([60.0, 100.0, 150.0]) * beta, cap)
    assert loss.max() <= mech.epsilon * (1 + 1e-6)


def test_secure_exponential_law():
    from privtd.mechanisms._random import secure_exponential

    x = secure_exponential(200_000)
    # Kolmogorov-Smirnov against Exp(1); the sampler has no seed, so the level is loose.
    assert stats.kstest(x, "expon").pvalue > 1e-6
