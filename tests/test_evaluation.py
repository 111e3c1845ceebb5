"""evaluate: scores beside the trivial baseline, checked by hand, and gold left out."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from cli_runner import run_cli as run
from privtd import evaluate
from privtd.errors import ValidationError

# Ten tasks, three classes in the reference (a: 5, b: 3, c: 2); the inferred truths also use a
# label 'd' the reference never has.
REF = pd.Series(list("aaaaabbbcc"), index=[f"t{i}" for i in range(10)])
INF = pd.Series(list("aaabbbbacd"), index=REF.index)


def test_label_scores_by_hand():
    m = evaluate(INF, REF)
    # Confusion (rows reference a, b, c; columns inferred a, b, c, d):
    #   a: 3 2 0 0 / b: 1 2 0 0 ... by task: t0-t2 a->a, t3-t4 a->b, t5-t6 b->b, t7 b->a,
    #   t8 c->c, t9 c->d.
    assert m["confusion"] == {
        "a": {"a": 3, "b": 2, "c": 0, "d": 0},
        "b": {"a": 1, "b": 2, "c": 0, "d": 0},
        "c": {"a": 0, "b": 0, "c": 1, "d": 1},
    }
    assert m["accuracy"] == pytest.approx(6 / 10)
    assert m["recall"] == pytest.approx({"a": 3 / 5, "b": 2 / 3, "c": 1 / 2})
    assert m["balanced_accuracy"] == pytest.approx((3 / 5 + 2 / 3 + 1 / 2) / 3)
    # F1 = 2 TP / (2 TP + FP + FN): a 6/9, b 4/7, c 2/3, d 0 (inferred once, never right).
    assert m["macro_f1"] == pytest.approx((6 / 9 + 4 / 7 + 2 / 3 + 0) / 4)
    assert (m["baseline_label"], m["baseline_accuracy"]) == ("a", 0.5)
    assert m["baseline_balanced_accuracy"] == pytest.approx(1 / 3)
    assert m["accuracy_margin"] == pytest.approx(0.1)
    assert m["balanced_accuracy_margin"] == pytest.approx(m["balanced_accuracy"] - 1 / 3)
    assert m["n_predicted_labels"] == 4
    json.dumps(m)  # the whole dict is JSON: labels are keyed as strings


def test_one_class_scores_its_share_and_no_more():
    m = evaluate(pd.Series("a", index=REF.index), REF)
    assert m["accuracy"] == m["baseline_accuracy"] == 0.5
    assert m["balanced_accuracy"] == pytest.approx(1 / 3) and m["accuracy_margin"] == 0.0
    assert m["n_predicted_labels"] == 1


def test_integer_labels_keep_their_order():
    ref = pd.Series([10, 2, 2, 10, 1])
    m = evaluate(pd.Series([10, 2, 1, 10, 1]), ref)
    assert list(m["recall"]) == ["1", "2", "10"] and m["baseline_label"] == "2"


def test_numeric_baseline_is_the_median_of_the_answers_or_the_reference():
    ref = pd.Series([0.0, 1.0, 2.0, 10.0])
    inferred = pd.Series([0.5, 1.0, 2.5, 9.0])
    m = evaluate(inferred, ref)
    assert m["mae"] == pytest.approx((0.5 + 0 + 0.5 + 1) / 4)
    assert m["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 0.25 + 1) / 4))
    # The reference's median is 1.5: errors 1.5, 0.5, 0.5, 8.5.
    assert m["baseline"] == "the median of the reference" and m["baseline_value"] == 1.5
    assert m["baseline_mae"] == pytest.approx(11 / 4)
    assert m["mae_margin"] == pytest.approx(11 / 4 - 0.5)
    answers = pd.DataFrame({"task": [0, 0, 1, 2, 3], "worker": list("abaab")})
    answers["answer"] = [4.0, 6.0, 5.0, 100.0, -3.0]
    m = evaluate(inferred, ref, answers=answers)
    # The answers' median is 5: errors 5, 4, 3, 5.
    assert m["baseline"] == "the median of the answers" and m["baseline_value"] == 5.0
    assert m["baseline_mae"] == pytest.approx(17 / 4)
    assert m["baseline_rmse"] == pytest.approx(np.sqrt((25 + 16 + 9 + 25) / 4))
    # A method worse than the constant: a negative margin.
    assert evaluate(pd.Series([9.0, 9.0, 9.0, 0.0]), ref)["mae_margin"] < 0


def test_gold_is_left_out_and_counted():
    m = evaluate(INF, REF, gold=["t9", "t8", "t99"])
    assert m["n_gold"] == 2 and m["n_evaluated"] == 8 and m["n_missing"] == 0
    assert "c" not in m["recall"]
    # A gold Series counts by its index.
    assert evaluate(INF, REF, gold=REF.iloc[:2])["n_gold"] == 2
    with pytest.raises(ValidationError, match="held fixed as gold"):
        evaluate(INF, REF, gold=REF)
    assert "n_gold" not in evaluate(INF, REF)


def test_cli_names_gold_and_evaluate_leaves_it_out(tmp_path, capsys):
    answers = tmp_path / "a.csv"
    rows = ["task,worker,answer"]
    for t in range(6):
        rows += [f"t{t},w{w},{(t + (w == 2)) % 2}" for w in range(3)]
    answers.write_text("\n".join(rows) + "\n")
    gold = tmp_path / "gold.csv"
    gold.write_text("task,truth\nt0,1\nt1,1\n")
    out = tmp_path / "t.csv"
    code, _, err = run(["infer", answers, "-m", "ds", "--gold", gold, "-o", out], capsys)
    assert code == 0, err
    table = pd.read_csv(out)
    assert list(table.columns) == ["task", "truth", "gold"]
    assert table.set_index("task")["gold"].to_dict() == {f"t{i}": int(i < 2) for i in range(6)}
    reference = tmp_path / "ref.csv"
    reference.write_text("task,truth\n" + "".join(f"t{t},{t % 2}\n" for t in range(6)))
    code, text, err = run(["evaluate", out, "--truth", reference, "--json"], capsys)
    assert code == 0, err
    assert "left out 2 task(s) that infer held fixed as gold" in err
    metrics = json.loads(text)
    assert metrics["n_gold"] == 2 and metrics["n_evaluated"] == 4
    code, _, err = run(
        ["infer", answers, "-m", "ds", "--gold", gold, "--no-gold", "-o", out], capsys
    )
    assert code == 2 and "contradict" in err


def test_cli_text_shows_baseline_recall_and_confusion(tmp_path, capsys):
    truths, reference = tmp_path / "t.csv", tmp_path / "r.csv"
    INF.rename_axis("task").rename("truth").reset_index().to_csv(truths, index=False)
    REF.rename_axis("task").rename("truth").reset_index().to_csv(reference, index=False)
    code, text, err = run(["evaluate", truths, "--truth", reference], capsys)
    assert code == 0, err
    lines = text.splitlines()
    assert "accuracy: 0.6000   baseline 0.5000, margin +0.1000" in text
    assert any(line.strip().startswith("balanced_accuracy: 0.5889") for line in lines)
    assert "every task 'a', the reference's majority class" in text
    assert "recall: a 0.6000, b 0.6667, c 0.5000" in text
    assert lines[-4].split() == ["a", "b", "c", "d"] and lines[-1].split() == [
        "c",
        "0",
        "0",
        "1",
        "1",
    ]
    INF.map(lambda _: "a").rename_axis("task").rename("truth").reset_index().to_csv(
        truths, index=False
    )
    code, text, _ = run(["evaluate", truths, "--truth", reference], capsys)
    assert "every scored task got one label" in text


def test_cli_numeric_baseline_from_the_answers(tmp_path, capsys):
    answers, truths, reference = tmp_path / "a.csv", tmp_path / "t.csv", tmp_path / "r.csv"
    answers.write_text("task,worker,answer\nt1,a,40.0\nt1,b,60.0\nt2,a,50.0\n")
    truths.write_text("task,truth\nt1,0.0\nt2,100.0\n")
    reference.write_text("task,truth\nt1,49.0\nt2,51.0\n")
    code, text, err = run(["evaluate", truths, "--truth", reference, "--answers", answers], capsys)
    assert code == 0, err
    assert "every task 50, the median of the answers" in text
    assert "note: the constant guess has the smaller mean absolute error" in text


def test_docstring_examples_run():
    import doctest

    import privtd.evaluation
    import privtd.inference.decision

    for module in (privtd.evaluation, privtd.inference.decision):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
