"""CSV injection: ids and labels that a spreadsheet would run as formulas (``=``, ``+``, ``-``,
``@``, tab, carriage return) are written escaped in every CSV privtd writes, and read back as
they were (docs/formats.md#spreadsheet-safe-csv).

benchmarks/attacks/attack_csv_injection.py counts the formula cells in each output.
"""

from __future__ import annotations

import csv
import io
import re

import pandas as pd
import pytest

from cli_runner import run_cli as run
from privtd import Answers, _csv

#: Ids an attacker picks: each starts a formula in a spreadsheet.
HOSTILE = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rz"]
#: Ids that must come back exactly: numbers stay numbers, quotes that are not an escape stay.
PLAIN = ["-1", "-2.5e3", "+7", "'quoted", "'", "ok", "'-1"]


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP, "CSV Injection"
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def formula_cells(text):
    """Cells of a CSV text that a spreadsheet would take for a formula."""
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, header=None)
    cells = [c for c in frame.to_numpy().ravel() if c]
    return [c for c in cells if c.startswith(FORMULA_START) and not NUMBER.fullmatch(c)]


@pytest.mark.parametrize("value", [*HOSTILE, *PLAIN, "'=x", "''=x", "'+1"])
def test_escape_is_undone_exactly(value):
    escaped = _csv.escape_text(value)
    assert _csv.unescape_text(escaped) == value
    assert not escaped.startswith(FORMULA_START) or NUMBER.fullmatch(escaped)


def test_numbers_are_not_escaped():
    for number in ["-1", "-2.5e3", "+7", "-.5", "1e-3"]:
        assert _csv.escape_text(number) == number
    for text in ["-inf", "-1,5", "--1", "-1a", "=1"]:
        assert _csv.escape_text(text) == "'" + text


def answers_file(tmp_path, tasks, workers):
    rows = [
        (t, w, ("yes", "no")[(i + j) % 2])
        for i, t in enumerate(tasks)
        for j, w in enumerate(workers)
    ]
    frame = pd.DataFrame(rows, columns=["task", "worker", "answer"])
    path = tmp_path / "answers.csv"
    # The user's file: unescaped, as a platform writes it (quoted, so that "\r" stays a cell's)
    frame.to_csv(path, index=False, quoting=csv.QUOTE_NONNUMERIC)
    return path


def test_infer_writes_no_formula_and_evaluate_reads_its_truths_back(tmp_path, capsys):
    tasks = [*HOSTILE, *PLAIN]
    workers = ["@w1", "=w2", "-w3", "w4", "-5"]
    path = answers_file(tmp_path, tasks, workers)
    truths, weights = tmp_path / "truths.csv", tmp_path / "workers.csv"
    code, _, err = run(
        ["infer", path, "-m", "mv", "-o", truths, "--workers-output", weights], capsys
    )
    assert code == 0, err
    for output in (truths, weights):
        text = output.read_text()
        assert formula_cells(text) == [], output.name
    # privtd reads its own truths back as the ids they were: evaluate against the same ids.
    assert set(_csv.read_csv(str(truths), ["task"])["task"]) == set(tasks)
    # Scored against the user's own gold (the inferred truths, unescaped): every task matches.
    gold = tmp_path / "gold.csv"
    inferred = _csv.read_csv(str(truths), ["task"])
    inferred.to_csv(gold, index=False, quoting=csv.QUOTE_NONNUMERIC)
    code, out, err = run(["evaluate", truths, "--truth", gold, "--json"], capsys)
    assert code == 0, err
    assert '"accuracy": 1.0' in out and f'"n_evaluated": {len(tasks)}' in out, out


def test_perturbed_answers_round_trip_into_infer(tmp_path, capsys):
    tasks = [*HOSTILE, "-1"]
    path = answers_file(tmp_path, tasks, ["@a", "b", "=c"])
    perturbed = tmp_path / "perturbed.csv"
    code, _, err = run(
        ["perturb", path, "-M", "one-layer", "-e", "2", "--seed", "1", "-o", perturbed],
        capsys,
    )
    assert code == 0, err
    assert formula_cells(perturbed.read_text()) == []
    back = Answers.from_csv(str(perturbed))
    assert set(back.tasks.astype(str)) == set(tasks)
    assert set(back.workers.astype(str)) == {"@a", "b", "=c"}


def test_answers_to_csv_round_trips(tmp_path):
    frame = pd.DataFrame(
        {"task": [*HOSTILE, *PLAIN], "worker": "=w", "answer": ["=x", "y"] * 6 + ["y"]}
    )
    data = Answers.from_frame(frame)
    path = tmp_path / "a.csv"
    data.to_csv(str(path))
    assert formula_cells(path.read_text()) == []
    back = Answers.from_csv(str(path)).to_frame().astype(str)
    assert back.equals(data.to_frame().astype(str))


def test_a_users_file_with_an_unescaped_formula_is_read_as_it_is(tmp_path):
    # '=x beside an unescaped =y: no privtd writer made this column, so nothing is undone.
    path = tmp_path / "user.csv"
    path.write_text("task,worker,answer\n'=x,w,a\n=y,w,b\n'quoted,w,a\n")
    assert list(_csv.read_csv(str(path), ["task"])["task"]) == ["'=x", "=y", "'quoted"]
    # A column every cell of which is in privtd's escaped form is read unescaped.
    path.write_text("task,worker,answer\n'=x,w,a\n-1,w,b\n'quoted,w,a\n")
    assert list(_csv.read_csv(str(path), ["task"])["task"]) == ["=x", "-1", "'quoted"]


def test_the_writer_escapes_index_and_header_too():
    frame = pd.DataFrame({"=label": [0.5, -1.0]}, index=pd.Index(["@t", "-1"], name="task"))
    text = _csv.to_csv(frame)
    assert text.splitlines() == ["task,'=label", "'@t,0.5", "-1,-1.0"]


pytest.importorskip("fastapi")

import test_service  # noqa: E402

url, api = test_service.url, test_service.api


def test_service_export_escapes_keys_names_and_labels(api):
    made = test_service.make_campaign(
        api, tasks=[{"key": "=t0"}, {"key": "-1"}], labels=["=yes", "no"]
    )
    cid = made["id"]
    alice = test_service.enrol(api, cid, "@alice")
    body = test_service.submission(
        ["=yes", "no"], ["=t0", "-1"], params=made["mechanism"]["params"]
    )
    assert test_service.post(api, cid, body, alice).status_code == 201
    text = api.get(f"/campaigns/{cid}/reports", headers=test_service.AUTH).text
    assert formula_cells(text) == []
    rows = text.splitlines()[1:]
    assert sorted(r.split(",")[:2] for r in rows) == [["'=t0", "'@alice"], ["-1", "'@alice"]]
