"""privtd.plan and ``privtd plan``: predictions that can be checked by hand, and one that is
checked against a measured run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cli_runner import run_cli
from privtd.datasets import make_categorical
from privtd.errors import ValidationError
from privtd.inference import aware_method, make_estimator
from privtd.mechanisms import OneLayerRR, TwoLayerRR
from privtd.plan import (
    Crowd,
    NumericCrowd,
    answers_needed,
    make_plan_mechanism,
    predict,
    predict_numeric,
    recommend,
)


def test_perfect_workers_at_huge_epsilon_get_every_task_right():
    crowd = Crowd.from_accuracy(3, 0.999, spread=0.0, n_workers=20)
    mech = make_plan_mechanism("one-layer", 15.0, 3)
    pred = predict(crowd, mech, 3, n_tasks=300, replicates=2, rng=0)
    # With 3 answers at accuracy 0.999 a task is wrong with probability about 3e-6.
    assert pred.scores["accuracy"][0] > 0.99
    assert pred.scores["balanced"][0] > 0.99
    assert pred.baseline == pytest.approx(1 / 3)


def test_one_answer_a_task_under_one_layer_matches_the_closed_form():
    # One answer per task: the best any method can do is follow the report, right with
    # probability p q + (1 - p)(1 - q) (p the worker's accuracy, q = 1 - f the keep rate).
    p, eps, n, reps = 0.8, 1.0, 3000, 3
    q = 1 - OneLayerRR.from_epsilon(eps, 2).f
    expected = p * q + (1 - p) * (1 - q)
    crowd = Crowd.from_accuracy(2, p, spread=0.0, n_workers=30)
    mech = make_plan_mechanism("one-layer", eps, 2)
    # The sampler and the mechanism alone: the reports' match rate.
    answers, truth = crowd.sample(n, 1, rng=1)
    reports = mech.perturb(answers, rng=2)
    match = (reports.value == truth[reports.task]).mean()
    tol = 4 * math.sqrt(expected * (1 - expected) / n)
    assert match == pytest.approx(expected, abs=tol)
    # And through the default inference, which can do no better than follow the reports.
    pred = predict(crowd, mech, 1, n_tasks=n, replicates=reps, rng=3)
    tol = 4 * math.sqrt(expected * (1 - expected) / (n * reps))
    assert pred.scores["accuracy"][0] == pytest.approx(expected, abs=tol)
    lo, hi = pred.scores["accuracy"][1:]
    assert lo < expected < hi


def test_prediction_matches_a_measured_run_on_an_independent_sampler():
    # The crowd as a requester describes it, and the same crowd drawn by the data sets'
    # generator: predicted and measured agree to within the sampling error of a few runs.
    k, n_workers, n_tasks, shares, acc = 2, 40, 1500, np.array([0.7, 0.3]), 0.8
    mech = OneLayerRR.from_epsilon(2.0, k)
    method = aware_method(mech)
    scores = []
    for seed in range(3):
        answers, truth, _ = make_categorical(
            n_tasks, n_workers, k, answers_per_task=5, accuracy=np.full(n_workers, acc),
            prior=shares, rng=seed,
        )  # fmt: skip
        est = make_estimator(method, mechanism=mech).fit(mech.perturb(answers, rng=seed))
        hits = est.truths_.reindex(truth.index).to_numpy() == truth.to_numpy()
        recall = [hits[truth.to_numpy() == c].mean() for c in range(k)]
        scores.append([hits.mean(), np.mean(recall)])
    measured = np.mean(scores, axis=0)
    crowd = Crowd.from_accuracy(k, acc, shares, spread=0.0, n_workers=n_workers)
    pred = predict(crowd, mech, 5, n_tasks=n_tasks, replicates=3, rng=0)
    # Six runs of 1,500 tasks: standard error of a difference about 0.01.
    assert pred.scores["accuracy"][0] == pytest.approx(measured[0], abs=0.03)
    assert pred.scores["balanced"][0] == pytest.approx(measured[1], abs=0.03)


def test_a_pilot_gives_the_crowd_its_shares_and_accuracy():
    answers, truth, _ = make_categorical(
        400, 30, 2, answers_per_task=5, accuracy=np.full(30, 0.85),
        prior=np.array([0.75, 0.25]), rng=4,
    )  # fmt: skip
    crowd = Crowd.from_pilot(answers)
    # 400 tasks: the learned share is within a few binomial errors (0.022) of 0.75.
    assert crowd.shares[0] == pytest.approx(0.75, abs=0.08)
    assert crowd.minority == 1
    assert crowd.skills is not None
    mean_acc = float(crowd.skills.post.mean(axis=0) @ crowd.skills.grid)
    assert mean_acc == pytest.approx(0.85, abs=0.05)
    # Golden tasks give the shares directly.
    gold = truth.iloc[:200]
    with_gold = Crowd.from_pilot(answers, None, gold)
    counts = np.bincount(gold.to_numpy(), minlength=2) + 1.0
    assert with_gold.shares == pytest.approx(counts / counts.sum())
    # A perturbed pilot is fitted through its channel.
    mech = OneLayerRR.from_epsilon(2.0, 2)
    crowd = Crowd.from_pilot(mech.perturb(answers, rng=5), mech)
    assert float(crowd.skills.post.mean(axis=0) @ crowd.skills.grid) == pytest.approx(0.85, abs=0.1)


def test_answers_needed_finds_the_smallest_redundancy():
    crowd = Crowd.from_accuracy(2, 0.75, spread=0.0, n_workers=40)
    mech = make_plan_mechanism("one-layer", 2.0, 2)
    needed, at = answers_needed(
        crowd, mech, "accuracy", 0.8, max_per_task=15, n_tasks=600, replicates=2, rng=0
    )
    assert needed is not None and at.per_task == needed
    assert at.scores["accuracy"][0] >= 0.8
    below = predict(crowd, mech, needed - 1, n_tasks=600, replicates=2, rng=0)
    assert below.scores["accuracy"][0] < 0.8
    never, _ = answers_needed(crowd, mech, "accuracy", 1.0, max_per_task=3, n_tasks=200, rng=0)
    assert never is None
    with pytest.raises(ValidationError, match="Unknown metric"):
        answers_needed(crowd, mech, "f1", 0.8)


def test_two_layer_reports_its_true_figures_and_is_not_recommended_on_the_stated_one():
    crowd = Crowd.from_accuracy(2, 0.75, spread=0.1, n_workers=20)
    one = predict(crowd, make_plan_mechanism("one-layer", 1.0, 2), 3, n_tasks=400, replicates=2)
    two_mech = make_plan_mechanism("two-layer", 1.0, 2)
    two = predict(crowd, two_mech, 3, n_tasks=400, replicates=2)
    k = math.ceil(two.answers_per_worker)
    assert k == 60  # 400 tasks x 3 answers over 20 workers
    assert two.answer_epsilon == pytest.approx(two_mech.answer_epsilon(k))
    assert two.answer_epsilon > 1.0  # far above the stated figure
    assert one.answer_epsilon == pytest.approx(1.0)
    text = recommend([one, two])
    assert text.startswith("epsilon 1: per answer, within 1: one-layer")
    assert f"two-layer states 1 but loses {two.answer_epsilon:.3g} per answer" in text
    # Per worker, two-layer qualifies where its whole release is within one-layer's k epsilon.
    assert two.release_epsilon < k * 1.0
    assert (
        "per worker (60 answers), within 60: two-layer" in text
        or two.scores["balanced"][0] < one.scores["balanced"][0]
    )


def test_two_layer_over_four_labels_takes_the_smallest_feasible_a():
    mech = make_plan_mechanism("two-layer", 0.5, 4)
    assert isinstance(mech, TwoLayerRR) and mech.a > 0
    assert mech.epsilon == pytest.approx(0.5)
    assert make_plan_mechanism("two-layer", 3.0, 4).a == 0.0
    with pytest.raises(ValidationError, match="binary-rr is for two labels"):
        make_plan_mechanism("binary-rr", 1.0, 3)


def test_numeric_mae_shrinks_with_epsilon_and_has_the_median_baseline():
    crowd = NumericCrowd.from_noise(0.0, 10.0, 0.5, n_workers=20, spread=0.0)
    tight = predict_numeric(
        crowd, make_plan_mechanism("exp-gaussian", 50.0, low=0.0, high=10.0), 5,
        n_tasks=200, replicates=2,
    )  # fmt: skip
    loose = predict_numeric(
        crowd, make_plan_mechanism("exp-gaussian", 1.0, low=0.0, high=10.0), 5,
        n_tasks=200, replicates=2,
    )  # fmt: skip
    # Five answers with error SD 0.5: the mean's MAE is 0.5 sqrt(2 / pi) / sqrt(5), about 0.18.
    assert tight.scores["mae"][0] < 0.3
    assert loose.scores["mae"][0] > tight.scores["mae"][0]
    # Truths uniform on [0, 10]: predicting the median for every task has MAE about 2.5.
    assert tight.baseline == pytest.approx(2.5, abs=0.4)
    assert tight.method == "aware-gaussian"
    laplace = predict_numeric(
        crowd, make_plan_mechanism("laplace", 2.0, low=0, high=10), 3, n_tasks=100, replicates=2
    )
    assert laplace.method == "sigma"


# ---------------------------------------------------------------------- the command line
def test_cli_plan_prints_the_table_and_the_baseline(capsys, tmp_path):
    out_csv = tmp_path / "plan.csv"
    args = ["plan", "-K", "2", "--shares", "0.8,0.2", "--accuracy", "0.85", "-e", "2",
            "--tasks", "300", "--workers", "20", "--replicates", "2", "-o", out_csv]  # fmt: skip
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "accuracy 0.800, balanced accuracy 0.500" in out
    assert "one-layer" in out and "two-layer" in out and "binary-rr" in out
    assert "recommended" in out
    table = pd.read_csv(out_csv)
    assert set(table["mechanism"]) == {"one-layer", "two-layer", "binary-rr"}
    one = table[table["mechanism"] == "one-layer"].iloc[0]
    binary = table[table["mechanism"] == "binary-rr"].iloc[0]
    assert one["balanced"] == binary["balanced"]  # the same channel


def test_cli_plan_from_a_pilot_with_truths(capsys, tmp_path):
    answers, truth, _ = make_categorical(
        120, 15, 2, answers_per_task=5, accuracy=(0.7, 0.95), rng=0
    )
    mech = OneLayerRR.from_epsilon(2.0, 2)
    pilot = tmp_path / "pilot.csv"
    mech.perturb(answers, rng=1).to_csv(str(pilot))
    gold = tmp_path / "gold.csv"
    truth.iloc[:60].rename_axis("task").reset_index().to_csv(gold, index=False)
    args = ["plan", pilot, "--pilot-mechanism", "one-layer", "--pilot-epsilon", "2",
            "--pilot-truth", gold, "-M", "one-layer", "-e", "2", "--tasks", "200",
            "--replicates", "2", "--target", "balanced=0.7", "--max-answers", "6"]  # fmt: skip
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "15 workers (pilot" in out
    assert "target balanced >= 0.7: one-layer at epsilon 2" in out


def test_cli_plan_numeric(capsys):
    args = ["plan", "--kind", "numeric", "--range", "0,10", "--noise", "1",
            "-M", "exp-gaussian", "-e", "1", "-e", "20", "--tasks", "100", "--workers", "20",
            "--replicates", "2"]  # fmt: skip
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "MAE" in out and "median MAE" in out
    assert "the noise outweighs the answers" in out  # epsilon 1 on a range of 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan"], "Describe the crowd"),
        (["plan", "-K", "2", "--target", "f1=0.8"], "--target takes METRIC=VALUE"),
        (["plan", "-K", "2", "--target", "balanced=80"], "is a fraction in"),
        (["plan", "-K", "2", "-M", "laplace"], "perturbs numbers; pass --kind numeric"),
        (["plan", "-K", "3", "-M", "binary-rr"], "binary-rr is for two labels"),
        (["plan", "-K", "2", "--shares", "0.5,x"], "--shares takes numbers"),
        (["plan", "-K", "2", "--shares", "0.5,0.3,0.2"], "3 non-negative|2 non-negative"),
        (["plan", "--kind", "numeric", "--noise", "1"], "needs --range LOW,HIGH and --noise"),
        (
            ["plan", "--kind", "numeric", "--range", "0,1", "--noise", "1", "-M", "one-layer"],
            "perturbs labels",
        ),  # fmt: skip
        (["plan", "-K", "2", "--pilot-epsilon", "1"], "describe a PILOT file"),
        (["plan", "no-such-pilot.csv"], "No such file|does not exist|no-such-pilot"),
    ],
)
def test_cli_plan_errors_are_one_line(capsys, args, message):
    import re

    code, out, err = run_cli(args, capsys)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert re.search(message, lines[0]), lines[0]


def test_docs_validation_table_quotes_the_stored_results():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    stored = (root / "benchmarks" / "results" / "plan_validation.txt").read_text()
    docs = (root / "docs" / "plan.md").read_text()
    names = {"skewed": "skewed", "binary": "binary", "four": "four classes"}
    names |= {n: n for n in ("sentiment", "dog", "web")}
    for data, label in names.items():
        rows = [line for line in stored.splitlines() if line.split()[:1] == [data]]
        diffs = [[float(d) for d in re.findall(r"\(([+-]\d\.\d+)\)", row)] for row in rows]
        bal = [abs(d[1]) for d in diffs]
        rare = [abs(d[2]) for d in diffs]
        cells = (
            f"| {len(rows)} | {np.mean(bal):.3f} | {max(bal):.3f} | "
            f"{sum(b <= 0.03 for b in bal)} | {np.mean(rare):.3f}, {sum(r <= 0.03 for r in rare)} |"
        )
        line = next(row for row in docs.splitlines() if row.startswith(f"| {label} "))
        assert line.endswith(cells), (line, cells)


def test_cli_plan_refuses_a_numeric_pilot(capsys, tmp_path):
    pilot = tmp_path / "pilot.csv"
    pilot.write_text("task,worker,answer\nt1,w1,1.5\nt1,w2,2.5\nt2,w1,0.5\n")
    code, _, err = run_cli(["plan", pilot], capsys)
    assert code != 0
    assert err.count("\n") == 1 and "needs labels; these answers are numbers" in err


def test_a_small_pilot_widens_the_interval_by_its_refits():
    from dataclasses import replace

    answers, _, _ = make_categorical(40, 12, 2, answers_per_task=4, accuracy=(0.6, 0.9), rng=6)
    mech = OneLayerRR.from_epsilon(1.0, 2)
    crowd = Crowd.from_pilot(mech.perturb(answers, rng=7), mech, refits=3, rng=0)
    assert len(crowd.refits) == 3 and all(not c.refits for c in crowd.refits)
    alone = replace(crowd, refits=())
    wide = predict(crowd, mech, 3, n_tasks=300, replicates=3, rng=1)
    narrow = predict(alone, mech, 3, n_tasks=300, replicates=3, rng=1)
    assert wide.scores["balanced"][0] == narrow.scores["balanced"][0]  # same point prediction
    lo, hi = wide.scores["balanced"][1:]
    assert hi - lo > narrow.scores["balanced"][2] - narrow.scores["balanced"][1]
