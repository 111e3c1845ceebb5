"""P3's matrix-factorisation perturbation: the closed form solves the perturbed objective."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd import Answers, ValidationError
from privtd.mechanisms import MFPerturbation, task_profiles, worker_totals
from privtd.mechanisms._random import Draws, id_hashes


def crowd(n_workers=30, n_tasks=12, answered=0.7, seed=0) -> Answers:
    rng = np.random.default_rng(seed)
    mask = rng.random((n_workers, n_tasks)) < answered
    w, t = np.nonzero(mask)
    values = rng.integers(0, 5, size=w.size).astype(float)
    return Answers(
        t.astype(np.int32),
        w.astype(np.int32),
        values,
        pd.RangeIndex(n_tasks),
        pd.RangeIndex(n_workers),
    )


def test_profiles_and_epsilon():
    v = task_profiles(50, 6, rng=1)
    assert v.shape == (6, 50) and np.allclose(v.sum(axis=0), 1.0) and (v >= 0).all()
    m = MFPerturbation.from_epsilon(2.0, v, low=0, high=9)
    assert m.scale == pytest.approx(5.0) and m.epsilon == pytest.approx(2.0)
    with pytest.raises(ValidationError, match="l1 norm <= 1"):
        MFPerturbation(2 * v, 5.0, 0, 4)
    with pytest.raises(ValidationError, match="'solver' parameter"):
        MFPerturbation(v, 5.0, 0, 4, solver="svd")


def test_rows_solve_the_perturbed_objective():
    data = crowd()
    v = task_profiles(data.n_tasks, 3, rng=2)
    m = MFPerturbation.from_epsilon(1.0, v, 0, 4)
    out = m.perturb(data, rng=5)
    rows = out.value.reshape(data.n_workers, data.n_tasks)
    eta = m._eta(id_hashes(data.workers), Draws(5))
    for w in range(data.n_workers):
        sel = data.worker == w
        vt = v[:, data.task[sel]]
        # min_u sum (a - u.v)^2 + 2 u.eta  <=>  (V_T V_T^T) u = V_T a - eta
        u = np.linalg.lstsq(vt @ vt.T, vt @ data.value[sel] - eta[w], rcond=None)[0]
        np.testing.assert_allclose(rows[w], u @ v, rtol=1e-6, atol=1e-6 * np.abs(u @ v).max())


def test_noise_is_laplace():
    m = MFPerturbation.from_epsilon(1.0, task_profiles(10, 50, rng=0), 0, 4)
    eta = m._eta(id_hashes(np.arange(400)), Draws(3)).ravel()
    assert stats.kstest(eta, stats.laplace(scale=m.scale).cdf).pvalue > 1e-3


def test_solvers_agree_when_well_posed():
    # Orthonormal-ish profiles and complete answers: a unique minimiser that every solver finds.
    data = crowd(n_workers=5, n_tasks=8, answered=1.0)
    v = np.abs(np.linalg.qr(np.random.default_rng(0).normal(size=(8, 8)))[0][:3])
    v = v / v.sum(axis=0, keepdims=True)
    results = {
        s: MFPerturbation.from_epsilon(1.0, v, 0, 4, solver=s, gd_steps=20000)
        .perturb(data, rng=1)
        .value
        for s in ("lstsq", "ridge", "gd")
    }
    np.testing.assert_allclose(results["ridge"], results["lstsq"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(results["gd"], results["lstsq"], rtol=1e-3, atol=1e-3)


def test_record_local_equals_batch_and_accounting():
    data = crowd()
    m = MFPerturbation.from_epsilon(1.0, task_profiles(data.n_tasks, 3, rng=2), 0, 4)
    batch = m.perturb(data, rng=7).value.reshape(data.n_workers, data.n_tasks)
    tasks = list(data.tasks)
    for w in range(data.n_workers):
        sel = data.worker == w
        mine = dict(zip(data.task[sel].tolist(), data.value[sel].tolist(), strict=True))
        row = m.perturb_worker(mine, tasks=tasks, worker=data.workers[w], rng=7)
        np.testing.assert_allclose(row, batch[w], rtol=1e-9, atol=1e-9)
    totals = worker_totals(data, m)
    assert (totals["epsilon_total"] == data.n_tasks * 1.0).all()


def test_profile_shape_must_match():
    data = crowd()
    m = MFPerturbation.from_epsilon(1.0, task_profiles(data.n_tasks + 1, 3, rng=2), 0, 4)
    with pytest.raises(ValidationError, match="task columns"):
        m.perturb(data)
    assert math.isfinite(m.epsilon)


def test_a_real_release_is_refused_unless_the_float_leak_is_accepted(tmp_path, capsys):
    # mf's rows are floating-point least-squares solutions, not grid points: a real release
    # (no seed) is refused by default, since its guarantee holds for real arithmetic only.
    from test_cli import run

    data = crowd()
    profiles = task_profiles(data.n_tasks, 3, rng=0)
    m = MFPerturbation.from_epsilon(1.0, profiles, 0, 4)
    with pytest.raises(ValidationError, match="real mf release is refused.*allow_float_leak"):
        m.perturb(data)
    with pytest.raises(ValidationError, match="real mf release is refused"):
        m.perturb_worker({0: 1.0}, tasks=list(range(data.n_tasks)))
    assert m.perturb(data, rng=0).n_answers == data.n_workers * data.n_tasks  # simulation
    allowed = MFPerturbation.from_epsilon(1.0, profiles, 0, 4, allow_float_leak=True)
    assert np.isfinite(allowed.perturb(data).value).all()
    # The CLI: refused in one line without the flag; with it, a warning and the release.
    path = tmp_path / "a.csv"
    frame = data.to_frame()
    frame["task"] = "t" + frame["task"].astype(str)
    frame.to_csv(path, index=False)
    out = tmp_path / "p.csv"
    base = ["perturb", str(path), "-M", "mf", "-e", "1", "-p", "low=0", "-p", "high=4"]
    code, _, err = run([*base, "-o", str(out)], capsys)
    assert code != 0 and "--allow-float-leak" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    code, _, err = run([*base, "-o", str(out), "--allow-float-leak"], capsys)
    assert code == 0 and "floating-point leak" in err and out.exists(), err
    code, _, err = run(
        [
            "perturb",
            str(path),
            "-M",
            "laplace",
            "-e",
            "1",
            "-p",
            "low=0",
            "-p",
            "high=4",
            "-o",
            str(tmp_path / "q.csv"),
            "--seed",
            "0",
            "--allow-float-leak",
        ],
        capsys,
    )
    assert code != 0 and "applies to mf only" in err
