"""The answer model: coding, round trips, and every input policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privtd import Answers, SchemaError, ValidationError


def frame(rows, columns=("task", "worker", "answer")):
    return pd.DataFrame(rows, columns=list(columns))


BASIC = [("t1", "w1", "a"), ("t1", "w2", "b"), ("t2", "w1", "b"), ("t3", "w3", "a")]


def test_codes_and_round_trip():
    ans = Answers.from_frame(frame(BASIC))
    assert (ans.n_answers, ans.n_tasks, ans.n_workers) == (4, 3, 3)
    assert list(ans.labels) == ["a", "b"]
    assert ans.task.tolist() == [0, 0, 1, 2]
    assert ans.value.tolist() == [0, 1, 1, 0]
    back = ans.to_frame()
    pd.testing.assert_frame_equal(back.astype(str), frame(BASIC).astype(str))
    assert ans.notes == ()


def test_label_alias_and_column_mapping():
    crowdkit = frame(BASIC, ("task", "worker", "label"))
    assert Answers.from_frame(crowdkit).n_answers == 4
    custom = frame(BASIC, ("item", "rater", "grade"))
    ans = Answers.from_frame(custom, task="item", worker="rater", answer="grade")
    assert list(ans.tasks) == ["t1", "t2", "t3"]


def test_missing_column_names_expected_and_found():
    with pytest.raises(SchemaError) as err:
        Answers.from_frame(frame(BASIC, ("task", "user", "answer")))
    message = str(err.value)
    assert "['worker']" in message and "found ['task', 'user', 'answer']" in message


def test_empty_input_is_an_error():
    with pytest.raises(ValidationError, match="empty"):
        Answers.from_frame(frame([]))


@pytest.mark.parametrize(
    "labels, expected",
    [
        ([0, 1, 1, 0], [0, 1]),
        ([True, False, True, False], [False, True]),
        (["yes", "no", "no", "yes"], ["no", "yes"]),
        (pd.Categorical(["x", "y", "y", "x"]), ["x", "y"]),
    ],
)
def test_label_types(labels, expected):
    data = pd.DataFrame({"task": [1, 1, 2, 2], "worker": ["a", "b", "a", "b"], "answer": labels})
    ans = Answers.from_frame(data)
    assert ans.is_categorical
    assert list(ans.labels) == expected
    assert list(ans.to_frame()["answer"]) == list(labels)


def test_float_answers_are_numeric_and_range_is_checked():
    data = pd.DataFrame({"task": [1, 1], "worker": ["a", "b"], "answer": [0.5, 2.5]})
    ans = Answers.from_frame(data, value_range=(0, 3))
    assert ans.kind == "numeric" and ans.value_range == (0.0, 3.0)
    with pytest.raises(
        ValidationError, match=r"outside the declared range \[0.0, 2.0\].*2.5 at row 1"
    ):
        Answers.from_frame(data, value_range=(0, 2))
    ints = pd.DataFrame({"task": [1, 1], "worker": ["a", "b"], "answer": [3, 4]})
    assert Answers.from_frame(ints, kind="numeric").kind == "numeric"


def test_non_numbers_in_numeric_answers():
    data = pd.DataFrame({"task": [1, 1], "worker": ["a", "b"], "answer": ["1.5", "high"]})
    with pytest.raises(ValidationError, match="non-numbers such as \\['high'\\]"):
        Answers.from_frame(data, kind="numeric")


def test_infinite_answer_rejected():
    data = pd.DataFrame({"task": [1, 1], "worker": ["a", "b"], "answer": [1.0, np.inf]})
    with pytest.raises(ValidationError, match="not finite"):
        Answers.from_frame(data)


def test_declared_labels_keep_unseen_and_reject_unknown():
    ans = Answers.from_frame(frame(BASIC), labels=["a", "b", "c"])
    assert list(ans.labels) == ["a", "b", "c"]
    with pytest.raises(ValidationError, match=r"\['b'\] are not in the declared labels"):
        Answers.from_frame(frame(BASIC), labels=["a"])


def test_missing_values_error_or_drop_with_note():
    rows = BASIC + [("t4", "w1", None)]
    with pytest.raises(
        ValidationError, match=r"1 row\(s\).*row 4.*\['answer'\].*on_missing='drop'"
    ):
        Answers.from_frame(frame(rows))
    ans = Answers.from_frame(frame(rows), on_missing="drop")
    assert ans.n_answers == 4
    assert ans.notes == ("dropped 1 row(s) with a missing task, worker or answer",)


DUPS = [("t1", "w1", "a"), ("t1", "w1", "b"), ("t1", "w1", "b"), ("t1", "w2", "a")]


def test_duplicates_error_by_default():
    with pytest.raises(ValidationError, match=r"2 answer\(s\) repeat.*task 't1', worker 'w1'"):
        Answers.from_frame(frame(DUPS))


@pytest.mark.parametrize("policy, kept", [("first", "a"), ("last", "b"), ("majority", "b")])
def test_duplicate_policies(policy, kept):
    ans = Answers.from_frame(frame(DUPS), on_duplicate=policy)
    out = ans.to_frame().set_index("worker")["answer"]
    assert out["w1"] == kept and out["w2"] == "a"
    assert ans.n_answers == 2
    assert len(ans.notes) == 1 and "2" in ans.notes[0]


def test_majority_tie_goes_to_smallest_label():
    rows = [("t1", "w1", "b"), ("t1", "w1", "a")]
    ans = Answers.from_frame(frame(rows), on_duplicate="majority")
    assert ans.to_frame()["answer"].tolist() == ["a"]


def test_numeric_duplicates_mean_and_policy_mismatch():
    data = pd.DataFrame({"task": [1, 1, 1], "worker": ["a", "a", "b"], "answer": [1.0, 3.0, 5.0]})
    ans = Answers.from_frame(data, on_duplicate="mean")
    assert ans.to_frame().set_index("worker")["answer"].to_dict() == {"a": 2.0, "b": 5.0}
    with pytest.raises(ValidationError, match="majority' needs categorical"):
        Answers.from_frame(data, on_duplicate="majority")
    with pytest.raises(ValidationError, match="mean' needs numeric"):
        Answers.from_frame(frame(DUPS), on_duplicate="mean")


def test_single_answer_policies():
    rows = [("t1", "w1", "a"), ("t1", "w2", "b"), ("t2", "w1", "a")]
    assert Answers.from_frame(frame(rows)).n_tasks == 2
    dropped = Answers.from_frame(frame(rows), single_task="drop")
    assert list(dropped.tasks) == ["t1"] and "dropped 1 task(s)" in dropped.notes[0]
    with pytest.raises(ValidationError, match="exactly one answer.*'t2'"):
        Answers.from_frame(frame(rows), single_task="error")
    workers = Answers.from_frame(frame(rows), single_worker="drop")
    assert list(workers.workers) == ["w1"] and workers.n_answers == 2
    with pytest.raises(ValidationError, match="leaves nothing"):
        Answers.from_frame(frame([("t1", "w1", "a")]), single_task="drop")


def test_bad_policy_name():
    with pytest.raises(ValidationError, match="'on_duplicate' parameter must be one of"):
        Answers.from_frame(frame(BASIC), on_duplicate="keep")


def test_wide_round_trip():
    ans = Answers.from_frame(frame(BASIC))
    wide = ans.to_wide()
    assert wide.shape == (3, 3) and wide.loc["t1", "w2"] == "b" and pd.isna(wide.loc["t3", "w1"])
    again = Answers.from_wide(wide)
    pd.testing.assert_frame_equal(
        again.to_frame().sort_values(["task", "worker"]).reset_index(drop=True).astype(str),
        ans.to_frame().sort_values(["task", "worker"]).reset_index(drop=True).astype(str),
    )


def test_wide_rejects_repeated_worker_column():
    wide = pd.DataFrame([[1, 0]], index=["t1"], columns=["w1", "w1"])
    with pytest.raises(SchemaError, match="worker 'w1' in more than one column"):
        Answers.from_wide(wide)


def test_csv_and_parquet_round_trip(tmp_path):
    ids = pd.DataFrame(
        {"task": ["007", "007", "8"], "worker": ["01", "02", "01"], "answer": [1, 0, 1]}
    )
    path = tmp_path / "a.csv"
    ids.to_csv(path, index=False)
    ans = Answers.from_csv(str(path))
    assert list(ans.tasks) == ["007", "8"]  # ids stay strings: "007" is not 7
    assert list(ans.labels) == [0, 1]
    pq = tmp_path / "a.parquet"
    ans.to_parquet(str(pq))
    again = Answers.from_path(str(pq))
    assert again.to_frame().equals(ans.to_frame())


def test_unreadable_files(tmp_path):
    with pytest.raises(ValidationError, match="No such file"):
        Answers.from_csv(str(tmp_path / "none.csv"))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValidationError, match="Cannot parse"):
        Answers.from_csv(str(empty))


def test_subset_recodes_densely():
    ans = Answers.from_frame(frame(BASIC))
    sub = ans.subset(ans.task != 1, "test")
    assert list(sub.tasks) == ["t1", "t3"] and sub.task.max() == 1
    assert sub.notes == ("test",)
