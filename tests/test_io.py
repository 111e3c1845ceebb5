"""Platform importers (privtd.io, docs/formats.md) and the CLI's reading options.

The files in tests/data/formats/ are built from each platform's documented export: real column
names, a byte-order mark (MTurk), quoted JSON in a cell (Toloka), empty answers, rejected,
skipped and tainted work, control tasks. Every count below is read off those files by hand.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cli_runner import run_cli as run
from privtd import Answers, _csv, io
from privtd.errors import SchemaError, ValidationError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "formats"
TOLOKA = str(DATA / "toloka_results.tsv")
MTURK = str(DATA / "mturk_batch_results.csv")
MTURK_RADIO = str(DATA / "mturk_radio_results.csv")
LABEL_STUDIO = str(DATA / "label_studio_export.json")
APPEN = str(DATA / "appen_full_report.csv")


def triples(imported):
    return set(imported.answers.to_frame().astype(str).itertuples(index=False, name=None))


# ---------------------------------------------------------------------- detection
@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (TOLOKA, "toloka"),
        (MTURK, "mturk"),
        (MTURK_RADIO, "mturk"),
        (LABEL_STUDIO, "label-studio"),
        (APPEN, "appen"),
    ],
)
def test_detect_names_each_platform(path, fmt):
    assert io.detect(path) == fmt


def test_detect_falls_back_to_the_long_table(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("task,worker,answer\nt,w,a\n")
    assert io.detect(str(path)) == "long"


def test_cli_format_choices_match_the_readers():
    from privtd.cli._names import FORMAT_NAMES

    assert FORMAT_NAMES == ("auto", *io.FORMATS)


# ---------------------------------------------------------------------- Toloka
def test_toloka_reads_answers_and_golden_tasks():
    data = Answers.from_toloka(TOLOKA)
    assert data.format == "toloka"
    # 13 rows: 2 REJECTED and 1 SKIPPED (empty OUTPUT) left out.
    assert (data.answers.n_answers, data.answers.n_tasks, data.answers.n_workers) == (10, 4, 3)
    assert data.gold.to_dict() == {"00005d0e45--61bf1a": "cat", "00005d0e45--61bf1d": "dog"}
    assert any("2 row(s) of REJECTED" in n for n in data.notes)
    assert any("1 row(s) of SKIPPED" in n for n in data.notes)
    assert list(data.answers.labels) == ["cat", "dog"]


def test_toloka_keep_rejected_and_task_by_input(tmp_path):
    assert io.read(TOLOKA, keep_rejected=True).answers.n_answers == 12
    by_image = io.read(TOLOKA, task="INPUT:image")
    assert set(by_image.answers.tasks) == {
        f"https://tlk.s3.yandex.net/dataset/cats_vs_dogs/{n}.jpg"
        for n in ("cat1", "dog7", "cat9", "dog2")
    }
    # Without ASSIGNMENT:task_id the task is its input data (the quoted JSON cell included).
    frame = pd.read_csv(TOLOKA, sep="\t", dtype=str, keep_default_na=False)
    assert frame["INPUT:meta"].iloc[0] == '{"source": "flickr", "size": [640, 480]}'
    path = tmp_path / "no_task_id.tsv"
    frame.drop(columns="ASSIGNMENT:task_id").to_csv(path, sep="\t", index=False)
    data = io.read(str(path))
    assert data.answers.n_tasks == 4 and data.answers.n_answers == 10
    assert len(data.gold) == 2


def test_toloka_several_outputs_need_a_choice(tmp_path):
    frame = pd.read_csv(TOLOKA, sep="\t", dtype=str, keep_default_na=False)
    frame["OUTPUT:comment"] = ""
    path = tmp_path / "two.tsv"
    frame.to_csv(path, sep="\t", index=False)
    with pytest.raises(SchemaError, match=r"several output fields \['result', 'comment'\]"):
        io.read(str(path))
    assert io.read(str(path), answer="OUTPUT:result").answers.n_answers == 10


def test_toloka_without_usable_answers_or_worker_column(tmp_path):
    frame = pd.read_csv(TOLOKA, sep="\t", dtype=str, keep_default_na=False)
    rejected = frame.assign(**{"ASSIGNMENT:status": "REJECTED"})
    path = tmp_path / "rejected.tsv"
    rejected.to_csv(path, sep="\t", index=False)
    with pytest.raises(ValidationError, match="Toloka export .* has no usable answers"):
        io.read(str(path))
    path = tmp_path / "no_worker.tsv"
    frame.drop(columns="ASSIGNMENT:worker_id").to_csv(path, sep="\t", index=False)
    with pytest.raises(SchemaError, match=r"Toloka export: it lacks column\(s\) \['ASSIGNMENT:"):
        io.read(str(path))


def test_toloka_conflicting_golden_answers_are_an_error(tmp_path):
    frame = pd.read_csv(TOLOKA, sep="\t", dtype=str, keep_default_na=False)
    frame.loc[1, "GOLDEN:result"] = "dog"
    path = tmp_path / "clash.tsv"
    frame.to_csv(path, sep="\t", index=False)
    with pytest.raises(ValidationError, match="different golden answers"):
        io.read(str(path))


# ---------------------------------------------------------------------- MTurk
def test_mturk_lists_its_answer_fields_and_reads_the_chosen_one():
    with pytest.raises(
        SchemaError, match=r"\['sentiment.label', 'comments'\]; pick one with answer"
    ):
        Answers.from_mturk(MTURK)
    for name in ("sentiment.label", "Answer.sentiment.label"):
        data = Answers.from_mturk(MTURK, answer=name)
        # 12 assignments: 2 Rejected, 1 with an empty answer.
        assert data.answers.n_answers == 9
        assert data.answers.tasks[0] == "3XH7ZM9YX2RHK8"  # the BOM did not eat HITId
        assert "A4SPAMMER00001" not in set(data.answers.workers)
        assert data.gold is None
    assert (
        Answers.from_mturk(MTURK, answer="sentiment.label", keep_rejected=True).answers.n_answers
        == 11
    )


def test_mturk_honeypot_column_becomes_gold():
    data = io.read(MTURK, answer="sentiment.label", gold="Input.gold_label")
    assert data.gold.to_dict() == {"3XH7ZM9YX2RHK8": "Positive", "3MG8450X2OASXZ": "Negative"}


def test_mturk_radio_buttons_read_as_one_label():
    data = io.read(MTURK_RADIO)
    plain = io.read(MTURK, answer="sentiment.label")
    expected = {(t, w, a.lower()) for t, w, a in triples(plain)}
    assert triples(data) == expected
    assert list(data.answers.labels) == ["negative", "neutral", "positive"]


def test_mturk_single_checkbox_is_a_yes_no_answer(tmp_path):
    frame = pd.read_csv(MTURK_RADIO, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    frame = frame.drop(columns=["Answer.negative.on", "Answer.neutral.on"])
    path = tmp_path / "checkbox.csv"
    frame.to_csv(path, index=False)
    data = io.read(str(path))
    # Unchecked boxes are answers ("false"), not missing ones: only the 2 Rejected rows go.
    assert data.answers.n_answers == 10
    assert list(data.answers.labels) == ["false", "true"]


def test_mturk_several_checked_options_are_an_error(tmp_path):
    frame = pd.read_csv(MTURK_RADIO, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    frame.loc[3, ["Answer.negative.on", "Answer.positive.on"]] = "true"
    path = tmp_path / "checkbox.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ValidationError, match=r"row 5: \['negative', 'positive'\]"):
        io.read(str(path))


# ---------------------------------------------------------------------- Label Studio
def test_label_studio_reads_choices_and_ground_truth():
    data = Answers.from_label_studio(LABEL_STUDIO)
    # 15 annotations: 1 cancelled, 2 ground truth (gold, not answers); task 105 has none.
    assert (data.answers.n_answers, data.answers.n_tasks, data.answers.n_workers) == (10, 4, 3)
    assert data.gold.to_dict() == {"101": "Positive", "104": "Positive"}
    assert "1" not in set(data.answers.workers)  # the reviewer who set the ground truth
    assert any("cancelled" in n for n in data.notes)
    assert any("not choices" in n for n in data.notes)


def test_label_studio_several_choices_error_or_join():
    path = str(DATA / "label_studio_multi.json")
    with pytest.raises(ValidationError, match="several choices"):
        io.read(path)
    joined = io.read(path, multiple="join")
    assert ("1", "3", "Price|Speed") in triples(joined)


def test_label_studio_several_controls_and_bad_json(tmp_path):
    tasks = json.loads(Path(LABEL_STUDIO).read_text())
    tasks[0]["annotations"][0]["result"][0]["from_name"] = "topic"
    path = tmp_path / "two.json"
    path.write_text(json.dumps(tasks))
    with pytest.raises(SchemaError, match=r"several Choices controls \['sentiment', 'topic'\]"):
        io.read(str(path))
    assert io.read(str(path), answer="sentiment").answers.n_answers == 9
    path.write_text(json.dumps({"data": 1}))
    with pytest.raises(SchemaError, match="not a Label Studio export"):
        io.read(str(path))


# ---------------------------------------------------------------------- Appen
def test_appen_reads_the_question_with_a_gold_column():
    data = Answers.from_appen(APPEN)
    # 12 judgments: 1 tainted, 1 empty answer.
    assert (data.answers.n_answers, data.answers.n_tasks, data.answers.n_workers) == (10, 4, 3)
    assert "45199999" not in set(data.answers.workers)
    # Unit 1893404 accepts two answers: no single truth, so no gold for it.
    assert data.gold.to_dict() == {"1893401": "relevant"}
    assert io.read(APPEN, keep_rejected=True).answers.n_answers == 11


def test_appen_without_gold_columns_needs_the_question(tmp_path):
    frame = pd.read_csv(APPEN, dtype=str, keep_default_na=False)
    frame = frame.drop(columns=["is_relevant_gold", "is_relevant_gold_reason"])
    path = tmp_path / "report.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(SchemaError, match=r"as question among \['is_relevant', 'query', 'url'\]"):
        io.read(str(path))
    data = io.read(str(path), answer="is_relevant")
    assert data.gold is None and data.answers.n_answers == 10


# ---------------------------------------------------------------------- long tables
def test_long_tsv_and_semicolons_are_sniffed(tmp_path):
    tsv = tmp_path / "a.tsv"
    tsv.write_text("worker\ttask\tanswer\nw1\tt1\ta\nw2\tt1\tb\nw1\tt2\ta\n")
    semi = tmp_path / "b.csv"
    semi.write_text("worker;task;answer\nw1;t1;a\nw2;t1;b\nw1;t2;a\n")
    for path in (tsv, semi):
        data = io.read(str(path))
        assert data.format == "long" and data.answers.n_answers == 3
        assert set(data.answers.tasks) == {"t1", "t2"}
    assert Answers.from_csv(str(tsv), delimiter="\t").n_answers == 3


@pytest.mark.parametrize("delimiter", ["\t", ";"])
def test_pyarrow_and_pandas_agree_with_a_delimiter(tmp_path, delimiter):
    pytest.importorskip("pyarrow")
    path = tmp_path / "a.txt"
    d = delimiter
    rows = [f"task{d}worker{d}answer", f"007{d}w1{d}1.5", f"t2{d}w2{d}", f'x{d}"w{d}3"{d}2']
    path.write_text("\n".join(rows) + "\n")
    fast = _csv._read_pyarrow(str(path), ["task", "worker"], delimiter)
    slow = _csv._read_pandas(str(path), ["task", "worker"], delimiter)
    assert fast is not None
    pd.testing.assert_frame_equal(fast, slow)


def test_unknown_table_and_wrong_format_are_one_clear_error(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(SchemaError, match="looks like no known format"):
        io.read(str(path))
    with pytest.raises(SchemaError, match="looks like a Toloka export, not MTurk"):
        io.read(TOLOKA, format="mturk")


# ---------------------------------------------------------------------- CLI
@pytest.mark.parametrize(
    ("path", "extra", "n_tasks", "n_gold", "label"),
    [
        (TOLOKA, [], 4, 2, "Toloka"),
        (MTURK, ["--answer-col", "sentiment.label"], 4, 0, None),
        (MTURK_RADIO, [], 4, 0, None),
        (LABEL_STUDIO, [], 4, 2, "Label Studio"),
        (APPEN, [], 4, 1, "Appen"),
    ],
)
def test_infer_reads_each_export(tmp_path, capsys, path, extra, n_tasks, n_gold, label):
    out = tmp_path / "truths.csv"
    code, _, err = run(["infer", path, "-m", "ds", "-o", str(out), *extra], capsys)
    assert code == 0, err
    assert len(pd.read_csv(out)) == n_tasks
    if n_gold:
        assert f"the {label} export has {n_gold} golden task(s); using them as gold" in err
    else:
        assert "golden" not in err


def test_infer_gold_flag_replaces_the_exports(tmp_path, capsys):
    gold = tmp_path / "gold.csv"
    gold.write_text("task,truth\n00005d0e45--61bf1c,dog\n")
    out = tmp_path / "truths.csv"
    code, _, err = run(["infer", TOLOKA, "-m", "ds", "-o", str(out), "--gold", str(gold)], capsys)
    assert code == 0, err
    assert "--gold replaces them" in err
    truths = pd.read_csv(out).set_index("task")["truth"]
    assert truths["00005d0e45--61bf1c"] == "dog"  # the given gold holds during the fit


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([MTURK], "several answer fields ['sentiment.label', 'comments']"),
        ([TOLOKA, "--format", "appen"], "looks like a Toloka export, not Appen"),
        ([TOLOKA, "--delimiter", "tab"], "Leave it out (CLI: --delimiter)."),
        ([APPEN, "--answer-col", "nope"], "has no question column 'nope'"),
        ([LABEL_STUDIO, "--task-col", "id"], "(CLI: --task-col, --worker-col)."),
    ],
)
def test_cli_errors_are_one_line_and_write_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "truths.csv"
    code, _, err = run(["infer", *args, "-m", "mv", "-o", str(out)], capsys)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_tsv_export_and_perturb_column_mapping(tmp_path, capsys):
    tsv = tmp_path / "export.tsv"
    tsv.write_text("worker\ttask\tanswer\nw1\tt1\ta\nw2\tt1\tb\nw1\tt2\ta\nw2\tt2\ta\n")
    out = tmp_path / "truths.csv"
    code, _, err = run(["infer", str(tsv), "-m", "mv", "-o", str(out)], capsys)
    assert code == 0, err
    assert set(pd.read_csv(out)["task"]) == {"t1", "t2"}
    code, _, err = run(
        ["infer", str(tsv), "-m", "mv", "-o", str(out), "--delimiter", "\\t"], capsys
    )
    assert code == 0, err
    mapped = tmp_path / "mapped.csv"
    mapped.write_text("HITId,WorkerName,Answer\nh1,w1,a\nh1,w2,b\nh2,w1,a\n")
    perturbed = tmp_path / "perturbed.csv"
    code, _, err = run(
        [
            "perturb",
            str(mapped),
            "-M",
            "one-layer",
            "-e",
            "1",
            "--seed",
            "0",
            "--task-col",
            "HITId",
            "--worker-col",
            "WorkerName",
            "--answer-col",
            "Answer",
            "-o",
            str(perturbed),
        ],
        capsys,
    )
    assert code == 0, err
    result = pd.read_csv(perturbed)
    assert list(result.columns) == ["task", "worker", "answer"]
    assert set(zip(result["task"], result["worker"], strict=True)) == {
        ("h1", "w1"),
        ("h1", "w2"),
        ("h2", "w1"),
    }


def test_perturb_reads_a_platform_export(tmp_path, capsys):
    out = tmp_path / "perturbed.csv"
    code, _, err = run(
        ["perturb", APPEN, "-M", "one-layer", "-e", "2", "--seed", "1", "-o", str(out)], capsys
    )
    assert code == 0, err
    assert len(pd.read_csv(out)) == 10
    assert "tainted" in err


def test_evaluate_scores_against_an_exports_golden_tasks(tmp_path, capsys):
    out = tmp_path / "truths.csv"
    code, _, err = run(["infer", TOLOKA, "-m", "mv", "-o", str(out)], capsys)
    assert code == 0, err
    # Held fixed to those very truths, they would score 1 by construction: refused.
    assert pd.read_csv(out)["gold"].sum() == 2
    code, _, err = run(["evaluate", str(out), "--truth", TOLOKA], capsys)
    assert code == 2 and "held fixed as gold" in err and "--no-gold" in err
    code, _, err = run(["infer", TOLOKA, "-m", "mv", "--no-gold", "-o", str(out)], capsys)
    assert code == 0 and "golden task" not in err, err
    assert list(pd.read_csv(out).columns) == ["task", "truth"]
    code, stdout, err = run(["evaluate", str(out), "--truth", TOLOKA, "--json"], capsys)
    assert code == 0, err
    assert "scoring against the 2 golden task(s) of the Toloka export" in err
    assert json.loads(stdout)["n_evaluated"] == 2
    code, _, err = run(["evaluate", str(out), "--truth", MTURK_RADIO], capsys)
    assert code == 2 and "has no golden tasks" in err


# ---------------------------------------------------------------------- README
def test_readme_first_screen_runs_a_platform_export(tmp_path, capsys, monkeypatch):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:30])
    match = re.search(r"privtd (infer examples/\S+ [^\n`]*)", first_screen)
    assert match, "the README's first screen shows no `privtd infer examples/...` command"
    args = match.group(1).split()
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(args, capsys)
    assert code == 0, err
    assert "using them as gold" in err
    output = args[args.index("-o") + 1]
    truths = pd.read_csv(output).set_index("task")["truth"]
    reference = pd.read_csv("examples/toloka_truth.csv").set_index("task")["truth"]
    accuracy = (truths.reindex(reference.index) == reference).mean()
    # 40 tasks, 5 answers each from workers right 55-95% of the time: expected near 0.95; the
    # bound sits 3 standard errors of a 40-task proportion (3 * 0.035) below that.
    assert accuracy >= 0.85
