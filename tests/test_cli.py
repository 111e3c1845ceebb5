"""The command line: happy paths, and bad input giving one line, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from cli_runner import run_cli as run
from privtd import cli as cli_mod
from privtd import datasets, evaluate, make_estimator
from privtd.mechanisms import OneLayerRR, TwoLayerRR


@pytest.fixture
def dog(tmp_path, capsys):
    code, _, _ = run(["datasets", "export", "dog", "-o", str(tmp_path / "dog")], capsys)
    assert code == 0
    return tmp_path / "dog"


def test_infer_and_evaluate(dog, tmp_path, capsys):
    out, workers, probas = tmp_path / "t.csv", tmp_path / "w.csv", tmp_path / "p.csv"
    code, _, err = run(
        [
            "infer",
            str(dog / "answers.csv"),
            "-m",
            "ds",
            "-o",
            str(out),
            "--workers-output",
            str(workers),
            "--probas-output",
            str(probas),
        ],
        capsys,
    )
    assert code == 0 and "converged" in err
    truths = pd.read_csv(out)
    assert list(truths.columns) == ["task", "truth"] and len(truths) == 807
    assert {"worker", "weight", "n_answers"} <= set(pd.read_csv(workers).columns)
    assert list(pd.read_csv(probas).columns) == ["task", "0", "1", "2", "3"]
    code, text, _ = run(["evaluate", str(out), "--truth", str(dog / "truth.csv"), "--json"], capsys)
    metrics = json.loads(text)
    assert code == 0 and metrics["n_evaluated"] == 807 and metrics["accuracy"] > 0.8


def test_numeric_infer_and_evaluate(tmp_path, capsys):
    run(["datasets", "export", "emotion", "-o", str(tmp_path / "e")], capsys)
    out = tmp_path / "t.csv"
    code, _, _ = run(
        [
            "infer",
            str(tmp_path / "e" / "answers.csv"),
            "-m",
            "crh",
            "--kind",
            "numeric",
            "-o",
            str(out),
        ],
        capsys,
    )
    assert code == 0
    code, text, _ = run(
        ["evaluate", str(out), "--truth", str(tmp_path / "e" / "truth.csv")], capsys
    )
    assert code == 0 and "mae" in text and "rmse" in text


def test_params_and_gold(dog, tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    pd.DataFrame({"task": ["1"], "truth": [0]}).to_csv(gold, index=False)
    out = tmp_path / "t.csv"
    code, _, _ = run(
        [
            "infer",
            str(dog / "answers.csv"),
            "-m",
            "one-coin-ds",
            "-o",
            str(out),
            "-P",
            "max_iter=5",
            "-P",
            "tol=0",
            "--gold",
            str(gold),
        ],
        capsys,
    )
    assert code == 0
    assert pd.read_csv(out, dtype={"task": str}).set_index("task").loc["1", "truth"] == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["infer", "missing.csv", "-m", "mv", "-o", "x.csv"], "No such file"),
        (["infer", "{dup}", "-m", "mv", "-o", "x.csv"], "repeat a (task, worker) pair"),
        (["infer", "{words}", "-m", "gtm", "-o", "x.csv"], "gtm takes numbers"),
        (["infer", "{dog}", "-m", "gtm", "--kind", "categorical", "-o", "x"], "numeric answers"),
        (["infer", "{dog}", "-m", "mv", "-o", "x.csv", "-P", "bogus=1"], "unknown parameter"),
        (["infer", "{dog}", "-m", "mv", "-o", "x.csv", "-p", "novalue"], "KEY=VALUE"),
        (["infer", "{dog}", "-m", "ds", "-o", "x.csv", "-P", "max_iter=0"], "must be an int >= 1"),
        (["infer", "{dog}", "-m", "ds", "-o", "nofolder/x.csv"], "does not exist"),
        (
            [
                "infer",
                "{dog}",
                "-m",
                "mean",
                "-o",
                "x.csv",
                "--kind",
                "numeric",
                "--probas-output",
                "p.csv",
            ],
            "gives no probabilities",
        ),
        (
            ["infer", "{dog}", "--mechanism", "one-layer", "-o", "x.csv"],
            "'one-layer': it needs f or an epsilon",
        ),
        (
            ["perturb", "{words}", "-M", "laplace", "-e", "1", "-o", "x.csv"],
            "The laplace mechanism perturbs numbers; for labels use one of one-layer,",
        ),
        (["evaluate", "{dog}", "--truth", "{dog}"], "lacks column(s) ['truth']"),
        (["datasets", "export", "nope"], "Unknown dataset"),
    ],
)
def test_errors_are_one_line(args, message, dog, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dup = tmp_path / "dup.csv"
    pd.DataFrame({"task": [1, 1], "worker": ["a", "a"], "answer": [0, 1]}).to_csv(dup, index=False)
    words = tmp_path / "words.csv"
    pd.DataFrame({"task": [1, 2], "worker": ["a", "a"], "answer": ["x", "y"]}).to_csv(
        words, index=False
    )
    args = [a.format(dog=dog / "answers.csv", dup=dup, words=words) for a in args]
    code, out, err = run(args, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("privtd: error: ") and message in lines[-1]
    assert "Traceback" not in err
    assert not (tmp_path / "x.csv").exists()  # nothing half-written


def test_usage_errors_exit_nonzero(capsys):
    code, _, err = run(["infer"], capsys)
    assert code == 2 and "Missing argument" in err


def test_datasets_list_and_demo(capsys):
    code, out, _ = run(["datasets", "list"], capsys)
    assert code == 0 and "duchenne" in out and "numeric" in out
    code, out, _ = run(["demo", "--epsilon", "0.5", "--seed", "1"], capsys)
    # The main job's mechanism: one-layer, whose per-answer figure holds given the worker's
    # other answers and composes, both printed with their units.
    assert code == 0 and "one-layer mechanism" in out and "epsilon=0.5 per answer" in out
    assert "epsilon=917 per worker: the worker's whole release of 1834 answer(s)" in out
    assert "epsilon=0.5 per answer: one answer given the worker's other 1833" in out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100  # readable in a 100-column terminal
    header = next(i for i, line in enumerate(lines) if line.startswith("method"))
    assert lines[header - 1].split() == ["accuracy", "balanced", "accuracy"]
    # Indented lines are notes under a row (the baseline's, one-coin DS's one-class fit), not
    # rows.
    table = [line for line in lines[header + 1 :] if not line.startswith(" ")]
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in table}
    assert list(rows) == [
        "baseline", "mv", "wv", "crh", "catd", "ds", "one-coin-ds", "lc", "aware-ds"
    ]  # fmt: skip
    data = datasets.load("duchenne")
    # The trivial baseline heads the table: the experts' majority class (101 of 159) scores its
    # share in accuracy, clean and private alike, and 1/2 in balanced accuracy.
    assert rows["baseline"] == pytest.approx([101 / 159, 101 / 159, 0.5, 0.5], abs=1e-4)
    assert "majority class '0' (101 of 159 truths)" in out
    assert rows["mv"][0] == pytest.approx(0.7610, abs=1e-4)  # clean MV (paper: 0.76)
    # The perturbation-aware default, told the mechanism on the release (told none on the clean
    # answers), is what infer picks for it; the footnote, the last note, says so.
    notes = [line for line in lines if line.startswith("  ") and not line.startswith("   ")]
    assert notes[-1].startswith("  aware-ds: the perturbation-aware default")
    clean_fit = make_estimator("aware-ds", mechanism=None).fit(data.answers)
    clean = evaluate(clean_fit.truths_, data.truth)
    mech = OneLayerRR.from_epsilon(0.5, n_labels=2)
    release = mech.perturb(data.answers, rng=1)
    private_fit = make_estimator("aware-ds", mechanism=mech).fit(release)
    private = evaluate(private_fit.truths_, data.truth)
    # Accuracy clean, private, change; then balanced accuracy clean, private, change; seconds.
    expected = [
        clean["accuracy"],
        private["accuracy"],
        private["accuracy"] - clean["accuracy"],
        clean["balanced_accuracy"],
        private["balanced_accuracy"],
        private["balanced_accuracy"] - clean["balanced_accuracy"],
    ]
    assert rows["aware-ds"][:6] == pytest.approx(expected, abs=1e-4)
    # One-coin DS labels (nearly) every task '0': its accuracy is the baseline's and its
    # balanced accuracy chance, which the balanced column shows at a glance.
    assert rows["one-coin-ds"][3:5] == pytest.approx([0.5, 0.5], abs=1e-4)


def test_demo_two_layer_prints_what_a_worker_gets(capsys):
    code, out, _ = run(["demo", "-M", "two-layer", "--seed", "1"], capsys)
    mech = TwoLayerRR.from_epsilon(1.0, n_labels=2)
    assert code == 0 and "two-layer mechanism" in out and "epsilon=1 per answer" in out
    assert f"epsilon={mech.answer_epsilon(1834):.4g} per answer: one answer given" in out
    assert f"epsilon={mech.release_epsilon(1834):.4g} per worker: the worker's whole" in out
    assert "not a worker-level guarantee" in " ".join(out.split())
    assert max(map(len, out.splitlines())) <= 100


def test_demo_two_layer_over_four_labels_picks_a_feasible_a(capsys):
    # Two-layer at stated 1 over 4 labels is infeasible with the paper's a = 0 (a + b > 1).
    code, out, _ = run(["demo", "--dataset", "dog", "-M", "two-layer"], capsys)
    assert code == 0 and "two-layer mechanism" in out and "U(0.04927, 1)" in out


def test_console_script_help():
    result = subprocess.run(
        [sys.executable, "-m", "privtd.cli", "infer", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    for option in ("--method", "--output", "--workers-output", "--on-duplicate", "--gold"):
        assert option in result.stdout


def test_single_answer_policy_is_reported(tmp_path, capsys):
    data = tmp_path / "a.csv"
    pd.DataFrame({"task": [1, 1, 2], "worker": ["a", "b", "a"], "answer": [0, 1, 1]}).to_csv(
        data, index=False
    )
    out = tmp_path / "t.csv"
    code, _, err = run(
        ["infer", str(data), "-m", "mv", "-o", str(out), "--single-task", "drop"], capsys
    )
    assert code == 0 and "note: dropped 1 task(s) with a single answer" in err
    assert pd.read_csv(out)["task"].tolist() == [1]
    code, _, err = run(
        ["infer", str(data), "-m", "mv", "-o", str(out), "--single-worker", "error"], capsys
    )
    assert code == 2 and "exactly one answer" in err


def test_perturb_then_infer(tmp_path, capsys):
    run(["datasets", "export", "sentiment", "-o", str(tmp_path / "s")], capsys)
    out, report = tmp_path / "p.csv", tmp_path / "r.json"
    code, _, err = run(
        [
            "perturb",
            str(tmp_path / "s" / "answers.csv"),
            "-M",
            "two-layer",
            "-e",
            "1.0",
            "--seed",
            "3",
            "-o",
            str(out),
            "--report",
            str(report),
        ],
        capsys,
    )
    assert code == 0 and "epsilon=1 per answer (one answer alone: the paper's marginal)" in err
    summary = json.loads(report.read_text())
    largest = summary["largest_release"]["release"]["k"]
    # The human report names the largest worker's figures, each with its unit.
    two = TwoLayerRR.from_epsilon(1.0, n_labels=summary["parameters"]["n_labels"])
    assert f"epsilon={two.answer_epsilon(largest):.4g} per answer: one answer given" in err
    assert f"epsilon={two.release_epsilon(largest):.4g} per worker: the worker's whole" in err
    assert summary["guarantee"]["epsilon"] == pytest.approx(1.0)
    assert summary["parameters"]["b"] == pytest.approx(0.5379, abs=1e-4)
    assert len(summary["workers"]) == 85
    some = next(iter(summary["workers"].values()))
    # One draw per worker: its total is the whole release's, beside one answer given the others.
    mech = TwoLayerRR.from_epsilon(1.0, n_labels=summary["parameters"]["n_labels"])
    assert some["epsilon_total"] == pytest.approx(mech.release_epsilon(some["n_released"]))
    assert some["epsilon_answer_given_others"] == pytest.approx(
        mech.answer_epsilon(some["n_released"])
    )
    assert summary["largest_release"]["marginal"]["epsilon"] == pytest.approx(1.0)
    assert set(summary["conditional_epsilon_quantiles"]) == {"0.1", "0.5", "0.9", "1.0"}
    perturbed = pd.read_csv(out)
    original = pd.read_csv(tmp_path / "s" / "answers.csv")
    assert len(perturbed) == len(original)
    # Same seed, same output.
    again = tmp_path / "p2.csv"
    run(
        [
            "perturb",
            str(tmp_path / "s" / "answers.csv"),
            "-M",
            "two-layer",
            "-e",
            "1.0",
            "--seed",
            "3",
            "-o",
            str(again),
        ],
        capsys,
    )
    assert again.read_text() == out.read_text()
    code, _, _ = run(["infer", str(out), "-m", "wv", "-o", str(tmp_path / "t.csv")], capsys)
    assert code == 0
    # Told the mechanism, infer models its channel (the perturbation-aware estimator).
    aware = tmp_path / "aware.csv"
    code, _, err = run(["infer", str(out), "-M", "two-layer", "-e", "1", "-o", str(aware)], capsys)
    assert code == 0 and err.startswith("aware-ds:"), err  # two labels: the two-coin model
    assert len(pd.read_csv(aware)) == original.task.nunique()
    # A plain method asked for by name runs, and says the mechanism goes unused.
    plain = ["infer", str(out), "-M", "two-layer", "-e", "1", "-m", "mv", "-o", str(aware)]
    code, _, err = run(plain, capsys)
    assert code == 0 and "mv does not model the two-layer mechanism" in err
    assert "default (aware-ds)" in err and "\nmv:" in err
    laplace = ["-M", "laplace", "-e", "1", "--mechanism-param", "low=0"]
    laplace += ["--mechanism-param", "high=1"]
    code, _, err = run(["infer", str(out), *laplace, "-o", str(aware)], capsys)
    assert code == 2 and "No perturbation-aware estimator for the laplace mechanism" in err
    assert "NULL's report has the law of an answer" in err and "--method" in err
    code, _, err = run(["infer", str(out), "-e", "1", "-o", str(aware)], capsys)
    assert code == 2 and "needs --mechanism" in err
    code, _, err = run(["infer", str(out), "-o", str(aware)], capsys)
    assert code == 2 and "Pass --method" in err


def test_epsilon_command(capsys):
    code, out, _ = run(["epsilon", "-M", "one-layer", "-e", "1.0"], capsys)
    assert code == 0 and "f=0.268941" in out and "epsilon=1 per answer" in out
    code, out, _ = run(["epsilon", "-M", "binary-rr", "-p", "f=0.2"], capsys)
    assert code == 0 and "epsilon=1.38629 per attribute" in out
    args = ["epsilon", "-M", "two-layer", "-e", "0.5", "-p", "n_labels=4"]
    code, _, err = run([*args, "-p", "a=0"], capsys)
    assert code == 2 and "Choose a in [0.290" in err and "-p a=VALUE" in err
    code, out, _ = run(args, capsys)
    assert code == 0 and "a=0.290" in out
    code, _, err = run(["epsilon", "-M", "one-layer", "-e", "-1"], capsys)
    assert code == 2 and "must be a float in [0, inf)" in err


def test_epsilon_command_prints_what_a_worker_of_k_answers_gets(capsys):
    code, out, _ = run(["epsilon", "-M", "two-layer", "-e", "1", "--answers", "100"], capsys)
    assert code == 0
    assert "epsilon=1 per answer: one answer alone" in out
    assert "epsilon=4.605 per answer: one answer given the worker's other 99" in out
    assert "epsilon=67.19 per worker: the worker's whole release of 100" in out
    code, out, _ = run(["epsilon", "-M", "two-layer", "-e", "1", "-k", "100", "--json"], capsys)
    record = json.loads(out)
    assert record["marginal"]["epsilon"] == pytest.approx(1.0)
    assert record["answer_given_others"] == {
        "epsilon": pytest.approx(4.6052, abs=1e-4),
        "unit": "answer",
        "covers": "one answer given the worker's other 99",
        "k": 100,
    }
    assert record["release"]["epsilon"] == pytest.approx(67.186, abs=1e-3)
    assert record["release"]["unit"] == "worker"
    code, out, _ = run(["epsilon", "-M", "one-layer", "-e", "1", "-k", "100", "--json"], capsys)
    record = json.loads(out)
    assert record["answer_given_others"]["epsilon"] == pytest.approx(1.0)
    assert record["release"]["epsilon"] == pytest.approx(100.0)
    code, out, _ = run(["epsilon", "-M", "two-layer", "-e", "1"], capsys)
    assert "share one private draw: pass --answers K" in out
    code, out, _ = run(["epsilon", "-M", "one-layer", "-e", "1"], capsys)
    assert "--answers" not in out
    code, _, err = run(["epsilon", "-M", "one-layer", "-e", "1", "-k", "0"], capsys)
    assert code == 2 and "--answers" in err
    # Review attack: a mechanism that gives answers away (f = 1 always flips two labels) has an
    # infinite epsilon, which json.dumps wrote as the non-JSON token Infinity; strict parsers
    # (browsers, jq) reject the whole document.
    code, out, _ = run(
        ["epsilon", "-M", "two-layer", "-p", "a=1", "-p", "b=1", "-k", "5", "--json"], capsys
    )
    record = json.loads(out, parse_constant=lambda token: pytest.fail(f"non-JSON {token}"))
    assert record["release"]["epsilon"] == "inf"


def test_audit_command(capsys):
    code, out, _ = run(["audit", "-M", "two-layer", "-e", "1", "-n", "100000", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["verdict"] == "holds (tight)"
    assert 0.9 <= result["lower_bound"] <= result["claimed_epsilon"]


def test_audit_command_worker_level(capsys):
    # Two-layer's 20 answers under one draw at stated 0.1: one answer given the others, half of
    # them and all of them, each against the figure privtd now prints; all hold, and the first
    # two measure more than composition of the marginal (0.1 per answer, 2 per worker).
    args = ["audit", "-M", "two-layer", "-e", "0.1", "--answers", "20", "-n", "20000", "--json"]
    code, out, _ = run(args, capsys)
    records = json.loads(out)
    assert code == 0 and [r["differ"] for r in records] == [1, 10, 20]
    assert records[0]["claim"] == "one answer given the worker's other 19"
    assert records[0]["claimed_epsilon"] == pytest.approx(2.9957, abs=1e-3)
    assert records[0]["lower_bound"] > 2.0 and records[1]["lower_bound"] > 4.0
    assert records[1]["claimed_epsilon"] == pytest.approx(12.127, abs=1e-3)
    # Review attack: the three verdicts were each at 95%, so the exit status of a claim that
    # holds could be 1 up to 15% of the time; each now gets its share of the 5%.
    assert [r["confidence"] for r in records] == pytest.approx([1 - 0.05 / 3] * 3)
    code, _, err = run(["audit", "-M", "one-layer", "-e", "1", "--differ", "2"], capsys)
    assert code == 2 and "--differ needs --answers" in err


def test_perturb_numeric(tmp_path, capsys):
    run(["datasets", "export", "emotion", "-o", str(tmp_path / "e")], capsys)
    out, report = tmp_path / "p.csv", tmp_path / "r.json"
    code, _, err = run(
        [
            "perturb",
            str(tmp_path / "e" / "answers.csv"),
            "-M",
            "exp-gaussian",
            "-e",
            "2",
            "-p",
            "low=-100",
            "-p",
            "high=100",
            "--seed",
            "1",
            "-o",
            str(out),
            "--report",
            str(report),
        ],
        capsys,
    )
    assert code == 0 and "epsilon=2 per report" in err
    assert json.loads(report.read_text())["parameters"]["rate"] == pytest.approx(4 / (2 * 200**2))
    # Told the mechanism, infer picks the perturbation-aware Gaussian model.
    told = ["-M", "exp-gaussian", "-e", "2", "--mechanism-param", "low=-100"]
    told += ["--mechanism-param", "high=100", "-o", str(tmp_path / "t.csv")]
    code, _, err = run(["infer", str(out), *told], capsys)
    assert code == 0 and err.startswith("aware-gaussian:"), err
    code, _, err = run(
        [
            "perturb",
            str(tmp_path / "e" / "answers.csv"),
            "-M",
            "exp-gaussian",
            "-e",
            "2",
            "-p",
            "low=0",
            "-p",
            "high=10",
            "-o",
            str(out),
        ],
        capsys,
    )
    assert code == 2 and "outside the declared range" in err


def test_perturb_null_aware_is_dense(tmp_path, capsys):
    run(["datasets", "export", "web", "-o", str(tmp_path / "w")], capsys)
    out, report = tmp_path / "p.csv", tmp_path / "r.json"
    code, _, err = run(
        [
            "perturb",
            str(tmp_path / "w" / "answers.csv"),
            "-M",
            "laplace",
            "-e",
            "1",
            "-p",
            "low=1",
            "-p",
            "high=5",
            "--seed",
            "2",
            "-o",
            str(out),
            "--report",
            str(report),
        ],
        capsys,
    )
    assert code == 0 and "epsilon=1 per cell" in err
    summary = json.loads(report.read_text())
    assert summary["n_output"] == 177 * 2665  # every worker's row over every task
    assert all(w["n_released"] == 2665 for w in summary["workers"].values())


def test_attack_command(tmp_path, capsys):
    answers, _, _ = datasets.make_categorical(
        200, 40, 2, answers_per_task=15, accuracy=(0.75, 0.95), rng=2
    )
    original = tmp_path / "o.csv"
    answers.to_csv(str(original))
    out = tmp_path / "p.csv"
    code, _, _ = run(
        ["perturb", str(original), "-M", "two-layer", "-e", "0.2", "--seed", "1", "-o", str(out)],
        capsys,
    )
    assert code == 0
    code, text, _ = run(
        ["attack", str(out), "--original", str(original), "-M", "two-layer", "-e", "0.2", "--json"],
        capsys,
    )
    result = json.loads(text)
    assert code == 0 and result["n_answers"] == answers.n_answers
    assert result["best"] >= result["as_reported"] and 0 <= result["chance"] <= 1
    assert result["claimed"] == "epsilon=0.2 per answer"


def test_secure_em_command(dog, tmp_path, capsys):
    answers = pd.read_csv(dog / "answers.csv")
    small = tmp_path / "small.csv"
    answers[answers.task.isin(answers.task.unique()[:80])].to_csv(small, index=False)
    out, rounds = tmp_path / "t.csv", tmp_path / "r.csv"
    code, _, err = run(
        ["secure-em", str(small), "--backend", "masking", "-o", str(out)]
        + ["--rounds-output", str(rounds)],
        capsys,
    )
    assert code == 0, err
    assert "secure-em (multiclass, masking)" in err and "round    1 em" in err
    truths = pd.read_csv(out)
    assert list(truths.columns) == ["task", "truth"] and len(truths) == 80
    cost = pd.read_csv(rounds)
    assert {"requester_bytes_sent", "worker_bytes_sent", "seconds"} <= set(cost.columns)
    # Numeric answers need the public range; a bad backend is a usage error.
    numeric = tmp_path / "numeric.csv"
    pd.DataFrame(
        {"task": [1, 1, 1, 2, 2, 2], "worker": list("abcabc"), "answer": [1.0, 2, 3, 4, 5, 6]}
    ).to_csv(numeric, index=False)
    code, _, err = run(["secure-em", str(numeric)], capsys)
    assert code == 2 and "needs the public answer range" in err and "Traceback" not in err
    code, out_text, err = run(["secure-em", str(numeric), "--value-range", "0", "10", "-q"], capsys)
    assert code == 0 and out_text.startswith("task,truth")
    code, _, err = run(["secure-em", str(small), "--backend", "rot13"], capsys)
    assert code != 0 and "Traceback" not in err
    code, out_text, err = run(["secure-em", str(small), "--model", "one-coin", "-q"], capsys)
    assert code == 0 and "secure-em (one-coin, masking)" in err, err
    assert len(out_text.strip().splitlines()) == 81
    # GLAD has no secure form: one line that says why.
    code, _, err = run(["secure-em", str(small), "--model", "glad"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "GLAD is not available under the secure sum: its M-step fits" in err


def test_a_missing_extra_is_one_line(monkeypatch, tmp_path, capsys):
    from privtd.secure import masking

    monkeypatch.setattr(masking, "HAVE_CRYPTOGRAPHY", False)
    answers = tmp_path / "a.csv"
    pd.DataFrame({"task": [1, 1, 1], "worker": list("abc"), "answer": [0, 1, 1]}).to_csv(
        answers, index=False
    )
    code, _, err = run(["secure-em", str(answers)], capsys)
    assert code == 2
    assert err.strip() == (
        "privtd: error: The masking secure sum needs cryptography: pip install 'privtd[secure]'."
    )


def test_infer_told_krr_null_deconvolves(tmp_path, capsys):
    run(["datasets", "export", "web", "-o", str(tmp_path / "w")], capsys)
    out = tmp_path / "p.csv"
    mech = ["-M", "krr-null", "-e", "3", "--mechanism-param", "low=1"]
    mech += ["--mechanism-param", "high=5"]
    code, _, err = run(
        ["perturb", str(tmp_path / "w" / "answers.csv"), *mech, "--seed", "2", "-o", str(out)],
        capsys,
    )
    assert code == 0, err
    code, _, err = run(["infer", str(out), *mech, "-o", str(tmp_path / "t.csv")], capsys)
    assert code == 0 and err.startswith("aware-null:"), err
    truths = pd.read_csv(tmp_path / "t.csv")
    assert len(truths) == 2665 and truths["truth"].between(1, 5).all()
    assert "treat them as uncertain" not in err  # at epsilon 3 Web's median is fixed to 0.2
    # At epsilon 0.1 the release leaves the pooled answers' median open over most of 1..5
    # (tests/test_aware_null.py), and infer says so.
    low = ["-M", "krr-null", "-e", "0.1", "--mechanism-param", "low=1"]
    low += ["--mechanism-param", "high=5"]
    faint = tmp_path / "faint.csv"
    answers = str(tmp_path / "w" / "answers.csv")
    code, _, err = run(["perturb", answers, *low, "--seed", "2", "-o", str(faint)], capsys)
    assert code == 0, err
    code, _, err = run(["infer", str(faint), *low, "-o", str(tmp_path / "t.csv")], capsys)
    assert code == 0 and "fixes the pooled answers' median only to" in err, err
    cli_mod._note_pooled_interval(3.5, 4.4)  # a score or less: nothing to say
    assert capsys.readouterr().err == ""
    cli_mod._note_pooled_interval(1.0, 5.0)
    assert capsys.readouterr().err.startswith("privtd: note: this release fixes the pooled")
    # Without the range, the one-line error names the flag that every command accepts.
    code, _, err = run(["infer", str(out), "-M", "krr-null", "-e", "3", "-o", "x.csv"], capsys)
    assert code == 2
    assert err.strip().endswith("pass low and high (CLI: -p low=VALUE, -p high=VALUE).")
    for command in (["epsilon"], ["audit", "-n", "1000"]):
        code, _, err = run([*command, *mech], capsys)
        assert code == 0, err
