"""Numeric answers on the command line: clipping before the mechanism (perturb --clip) and the
warning when the mechanism's noise is wider than the answers' spread (infer)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from cli_runner import run_cli as run


def _answers(path, truth_std, n_tasks=150, n_workers=12, seed=0, outliers=()):
    """Tasks with truths around 50 (spread ``truth_std``), workers off by N(0, 2); the given
    ``(row, value)`` outliers replace answers."""
    rng = np.random.default_rng(seed)
    truth = 50 + truth_std * rng.standard_normal(n_tasks)
    rows = [
        (f"t{t}", f"w{w}", round(float(truth[t] + 2 * rng.standard_normal()), 1))
        for t in range(n_tasks)
        for w in range(n_workers)
    ]
    frame = pd.DataFrame(rows, columns=["task", "worker", "answer"])
    for row, value in outliers:
        frame.loc[row, "answer"] = value
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def claims(tmp_path):
    """Claims in [0, 100] but for two out of range: 500 and -300."""
    return _answers(tmp_path / "claims.csv", 10, outliers=[(3, 500.0), (7, -300.0)])


# ---------------------------------------------------------------------- perturb --clip
def test_clip_clips_before_the_mechanism_and_says_how_many(claims, tmp_path, capsys):
    out, report = tmp_path / "p.csv", tmp_path / "r.json"
    args = ["perturb", claims, "-M", "exp-gaussian", "-e", "1", "--clip", "0,100", "--seed", "3"]
    code, _, err = run([*args, "-o", out, "--report", report], capsys)
    assert code == 0, err
    line = [x for x in err.splitlines() if x.startswith("clipped")]
    assert line == [
        "clipped 2 of 1,800 answers to [0, 100] (1 below, 1 above) before exp-gaussian, whose "
        "guarantee uses sensitivity 100 (high - low on the grid of step 0.0976562)"
    ], err
    written = json.loads(report.read_text())
    assert written["clipped"] == {"low": 0.0, "high": 100.0, "below": 1, "above": 1}
    # The mechanism's range is the clip's: its rate is calibrated to a width of 100.
    assert written["parameters"]["low"] == 0.0 and written["parameters"]["high"] == 100.0
    assert written["parameters"]["rate"] == pytest.approx(1 / (2 * 100**2))


def test_out_of_range_answers_without_clip_name_the_flag(claims, tmp_path, capsys):
    args = ["perturb", claims, "-M", "exp-gaussian", "-e", "1", "-p", "low=0", "-p", "high=100"]
    code, _, err = run([*args, "-o", tmp_path / "p.csv"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "2 of 1800 answer(s) fall outside the declared range [0, 100]" in err
    assert "--clip 0,100" in err


def test_clip_agrees_with_the_mechanisms_range(claims, tmp_path, capsys):
    out = tmp_path / "p.csv"
    base = ["perturb", claims, "--seed", "0", "-o", out]
    # Integer-score mechanisms take integer bounds.
    code, _, err = run([*base, "-M", "laplace", "-e", "1", "--clip", "0.5,100"], capsys)
    assert code == 2 and "--clip takes two integers" in err, err
    # A -p range that contradicts --clip is refused, not silently overridden.
    code, _, err = run(
        [*base, "-M", "exp-gaussian", "-e", "1", "--clip", "0,100", "-p", "high=90"], capsys
    )
    assert code == 2 and "-p high=90 disagrees with --clip 0,100" in err, err
    code, _, err = run([*base, "-M", "one-layer", "-e", "1", "--clip", "0,1"], capsys)
    assert code == 2 and "--clip applies to numeric answers" in err, err
    code, _, err = run([*base, "-M", "exp-gaussian", "-e", "1", "--clip", "100,0"], capsys)
    assert code == 2 and "finite LOW < HIGH" in err, err


def test_clip_feeds_integer_score_mechanisms(tmp_path, capsys):
    scores = tmp_path / "s.csv"
    pd.DataFrame(
        {"task": ["a", "a", "b", "b"], "worker": ["u", "v", "u", "v"], "answer": [1, 7, 3, -2]}
    ).to_csv(scores, index=False)
    out = tmp_path / "p.csv"
    args = ["perturb", scores, "-M", "laplace", "-e", "2", "--clip", "0,5", "--seed", "1"]
    code, _, err = run([*args, "-o", out], capsys)
    assert code == 0, err
    assert "clipped 2 of 4 answers to [0, 5] (1 below, 1 above) before laplace" in err
    assert "sensitivity high - low = 5" in err


# ---------------------------------------------------------------------- infer's noise warning
def _noise_warnings(err):
    return [x for x in err.splitlines() if x.startswith("privtd: warning:") and "noise" in x]


def test_infer_warns_when_the_noise_dwarfs_the_answers(tmp_path, capsys):
    # Truths spread by 5 in a declared range of 1,000 at epsilon 1: noise std 1,414.
    narrow = _answers(tmp_path / "narrow.csv", 5)
    out = tmp_path / "p.csv"
    mech = ["-M", "exp-gaussian", "-e", "1", "-p", "low=0", "-p", "high=1000"]
    assert run(["perturb", narrow, *mech, "--seed", "0", "-o", out], capsys)[0] == 0
    code, _, err = run(["infer", out, *mech, "-o", tmp_path / "t.csv"], capsys)
    assert code == 0, err
    (warning,) = _noise_warnings(err)
    assert "exp-gaussian noise (std 1414 per answer at epsilon 1) exceeds the spread" in warning
    # The expected error per answer and after averaging the task's 12 answers:
    # the Laplace scale 1000 / 1, and sqrt(2 / pi) 1414.2 / sqrt(12).
    assert "expected error 1000 per answer" in warning
    assert "about 325.7 in the mean of a task's 12 answers" in warning
    assert "Raise epsilon" in warning
    assert warning.endswith("before the mechanism (CLI: privtd perturb --clip LOW,HIGH).")


def test_infer_stays_quiet_when_the_answers_outspread_the_noise(tmp_path, capsys):
    # Truths spread by 200 in [-1000, 1000] at epsilon 20: noise std 141.
    wide = _answers(tmp_path / "wide.csv", 200)
    out = tmp_path / "p.csv"
    mech = ["-M", "exp-gaussian", "-e", "20", "-p", "low=-1000", "-p", "high=1000"]
    assert run(["perturb", wide, *mech, "--seed", "0", "-o", out], capsys)[0] == 0
    code, _, err = run(["infer", out, *mech, "-o", tmp_path / "t.csv"], capsys)
    assert code == 0 and not _noise_warnings(err), err


def test_noise_figures_match_the_laws():
    from privtd.mechanisms import ExpGaussian, LaplaceNull

    eg = ExpGaussian.from_epsilon(1.0, 0.0, 100.0)
    assert eg.noise_std == pytest.approx(100 * 2**0.5, rel=1e-12)
    assert eg.noise_mae == pytest.approx(100.0, rel=1e-12)  # the Laplace scale, W / epsilon
    # The discrete Laplace's moments, summed directly.
    lap = LaplaceNull.from_epsilon(0.5, 0, 4)
    j = np.arange(-2000, 2001)
    pmf = np.exp(-np.abs(j) / lap.scale)
    pmf /= pmf.sum()
    assert lap.noise_std == pytest.approx(float(np.sqrt((pmf * j * j).sum())), rel=1e-9)
    assert lap.noise_mae == pytest.approx(float((pmf * np.abs(j)).sum()), rel=1e-9)


# ---------------------------------------------------------------------- the client clips too
def _numeric_campaign(tmp_path, monkeypatch):
    from cli_runner import offline_worker
    from privtd.mechanisms import ExpGaussian

    mech = ExpGaussian.from_epsilon(1.0, 0.0, 100.0)
    return offline_worker(tmp_path, monkeypatch, {"name": "exp-gaussian", "params": mech.params()})


def test_worker_submit_clips_into_the_campaigns_range_and_counts(tmp_path, monkeypatch):
    from privtd.client import Worker, declared_answers
    from privtd.errors import ValidationError

    state, sent = _numeric_campaign(tmp_path, monkeypatch)
    worker = Worker(state)
    given = {"t1": 150, "t2": "50.5", "t3": -5.0}
    out, clipped = declared_answers(worker.campaign(), given)
    assert out == {"t1": 100.0, "t2": 50.5, "t3": 0.0} and clipped == 2
    assert worker.submit(given)["n_clipped"] == 2 and len(sent[0]["reports"]) == 3
    with pytest.raises(ValidationError, match="outside the declared range"):
        worker.submit({"t4": 101}, clip=False)
    for bad in ("many", float("inf"), "nan"):
        with pytest.raises(ValidationError, match="to task 't5' is not a finite number"):
            worker.submit({"t5": bad})


def test_client_submit_prints_the_clipped_count(tmp_path, monkeypatch, capsys):
    state, sent = _numeric_campaign(tmp_path, monkeypatch)
    answers = tmp_path / "mine.csv"
    answers.write_text("task,answer\nt1,120\nt2,40\nt3,99.5\n")
    code, _, err = run(["client", "submit", answers, "--state", state], capsys)
    assert code == 0, err
    assert "clipped 1 of 3 answer(s) to the campaign's range [0, 100] here" in err
