"""The command line's input and output friction a new user met:
each test here failed before the fix it covers."""

from __future__ import annotations

import json
import os
import stat

import pandas as pd
import pytest

from cli_runner import run_cli as run
from privtd._csv import _read_pandas, read_csv


def one_line_error(code, err):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privtd: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    from privtd import datasets

    folder = tmp_path_factory.mktemp("population")
    datasets.export("population", folder)
    return folder


@pytest.fixture
def binary(tmp_path):
    """12 tasks x 5 workers, labels 0/1 (integers), every worker right on 10 of 12 tasks."""
    rows = [
        (f"t{t}", f"w{w}", (t % 2) ^ int((t + w) % 6 == 0)) for t in range(12) for w in range(5)
    ]
    path = tmp_path / "binary.csv"
    pd.DataFrame(rows, columns=["task", "worker", "answer"]).to_csv(path, index=False)
    return path


@pytest.fixture
def four_labels(tmp_path):
    """Answers over labels 0..3, perturbed by one-layer RR (which finds the 4 labels)."""
    rows = [(f"t{t}", f"w{w}", (t + int(w == 0)) % 4) for t in range(40) for w in range(6)]
    path = tmp_path / "four.csv"
    pd.DataFrame(rows, columns=["task", "worker", "answer"]).to_csv(path, index=False)
    return path


# ---------------------------------------------------------------------- 1: integer numbers
def test_numeric_method_reads_integer_answers_as_numbers(population, tmp_path, capsys):
    out = tmp_path / "t.csv"
    code, _, err = run(["infer", population / "answers.csv", "-m", "gtm", "-o", out], capsys)
    assert code == 0, err
    assert err.startswith("gtm: 1172 tasks") and "warning" not in err
    truths = pd.read_csv(out)
    assert pd.api.types.is_float_dtype(truths["truth"]) and len(truths) == 1172


def test_huge_label_set_warns_and_names_the_flag(population, tmp_path, capsys):
    code, _, err = run(
        ["infer", population / "answers.csv", "-m", "mv", "-o", tmp_path / "t.csv"], capsys
    )
    assert code == 0
    warning = [line for line in err.splitlines() if line.startswith("privtd: warning:")]
    assert len(warning) == 1 and "2,617 distinct labels among 4,183 answers" in warning[0]
    assert "--kind numeric" in warning[0] and "kind=" not in err


def test_small_label_set_does_not_warn(four_labels, tmp_path, capsys):
    code, _, err = run(["infer", four_labels, "-m", "mv", "-o", tmp_path / "t.csv"], capsys)
    assert code == 0 and "warning" not in err


def test_kind_errors_name_the_flag(tmp_path, capsys):
    words = tmp_path / "words.csv"
    words.write_text("task,worker,answer\n1,a,x\n2,a,y\n")
    line = one_line_error(*run(["infer", words, "-m", "mean", "-o", tmp_path / "t"], capsys)[::2])
    assert "--kind categorical" in line and "kind=" not in line
    line = one_line_error(
        *run(["infer", words, "-m", "mv", "--kind", "numeric", "-o", tmp_path / "t"], capsys)[::2]
    )
    assert "--kind" in line and "kind=" not in line


# ---------------------------------------------------------------------- 2: one -p scheme
def test_p_is_the_mechanism_parameter_in_infer(binary, tmp_path, capsys):
    out = tmp_path / "t.csv"
    args = ["infer", binary, "-M", "two-layer", "-e", "1", "-p", "a=0.1", "-o", out]
    code, _, err = run(args, capsys)
    assert code == 0, err
    assert err.startswith("aware-ds:") and len(pd.read_csv(out)) == 12


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["infer", "{f}", "-M", "two-layer", "-e", "1", "-p", "zz=1", "-o", "t.csv"],
            "unknown parameter 'zz' for mechanism two-layer with --epsilon; it takes: n_labels, a",
        ),
        (
            ["infer", "{f}", "-M", "two-layer", "-e", "1", "-P", "zz=1", "-o", "t.csv"],
            "unknown parameter 'zz' for method aware-ds; it takes: prior_strength,",
        ),
        (["infer", "{f}", "-m", "ds", "-P", "zz=1", "-o", "t.csv"], "for method ds; it takes:"),
        (["infer", "{f}", "-m", "ds", "-p", "zz=1", "-o", "t.csv"], "ds takes: max_iter, tol"),
        (
            ["perturb", "{f}", "-M", "two-layer", "-e", "1", "-p", "zz=1", "-o", "p.csv"],
            "unknown parameter 'zz' for mechanism two-layer with --epsilon",
        ),
        (
            ["epsilon", "-M", "one-layer", "-p", "zz=1"],
            "unknown parameter 'zz' for mechanism one-layer; it takes: f, n_labels",
        ),
    ],
)
def test_unknown_parameters_are_named(args, message, binary, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run([a.format(f=binary) for a in args], capsys)
    line = one_line_error(code, err)
    assert message in line
    assert "__init__" not in line and "keyword argument" not in line


def test_old_p_spelling_for_estimator_still_works_with_a_warning(binary, tmp_path, capsys):
    out = tmp_path / "t.csv"
    code, _, err = run(["infer", binary, "-m", "ds", "-p", "max_iter=3", "-o", out], capsys)
    assert code == 0
    assert "-p max_iter=... for an estimator parameter is deprecated" in err
    assert "-P max_iter=" in err and "3 iteration(s)" in err
    code, _, err = run(["infer", binary, "-m", "ds", "-P", "max_iter=3", "-o", out], capsys)
    assert code == 0 and "deprecated" not in err and "3 iteration(s)" in err


def test_infer_help_documents_the_scheme(capsys):
    code, out, _ = run(["infer", "--help"], capsys)
    assert code == 0
    assert "-P, --method-param" in out and "-p, --param, --mechanism-param" in out
    assert "--mechanism-report" in out


# ---------------------------------------------------------------------- 3: label count, report
def test_infer_takes_the_label_count_from_the_answers(four_labels, tmp_path, capsys):
    pert, report = tmp_path / "p.csv", tmp_path / "r.json"
    args = ["perturb", four_labels, "-M", "one-layer", "-e", "1", "--seed", "3", "-o", pert]
    code, _, err = run([*args, "--report", report], capsys)
    assert code == 0, err
    code, _, err = run(["infer", pert, "-M", "one-layer", "-e", "1", "-o", tmp_path / "a"], capsys)
    assert code == 0, err
    assert err.startswith("aware-ds: 40 tasks")
    # perturb found 4 labels, so the report names them, as JSON integers
    summary = json.loads(report.read_text())
    assert summary["labels"] == [0, 1, 2, 3] and summary["parameters"]["n_labels"] == 4


def test_infer_reads_the_mechanism_from_perturbs_report(four_labels, tmp_path, capsys):
    pert, report = tmp_path / "p.csv", tmp_path / "r.json"
    args = ["perturb", four_labels, "-M", "two-layer", "-e", "2", "--seed", "3", "-o", pert]
    assert run([*args, "--report", report], capsys)[0] == 0
    told = tmp_path / "told.csv"
    code, _, err = run(["infer", pert, "-M", "two-layer", "-e", "2", "-o", told], capsys)
    assert code == 0, err
    from_report = tmp_path / "report.csv"
    code, _, err = run(["infer", pert, "--mechanism-report", report, "-o", from_report], capsys)
    assert code == 0, err
    assert err.startswith("aware-ds: 40 tasks")
    # The report's parameters are the calibrated ones: the same model, the same truths.
    assert from_report.read_text() == told.read_text()


@pytest.mark.parametrize(
    "extra, content, message",
    [
        (["-M", "one-layer"], None, "-M one-layer disagrees with"),
        (["-e", "1"], None, "fixes the mechanism's parameters; drop -e and -p"),
        ([], "{not json", "as JSON"),
        ([], '{"mechanism": "nope"}', "is not a report of `privtd perturb --report`"),
    ],
)
def test_bad_mechanism_reports(extra, content, message, four_labels, tmp_path, capsys):
    report = tmp_path / "r.json"
    if content is None:
        args = ["perturb", four_labels, "-M", "two-layer", "-e", "2", "--seed", "3"]
        assert run([*args, "-o", tmp_path / "p.csv", "--report", report], capsys)[0] == 0
    else:
        report.write_text(content)
    args = ["infer", four_labels, "--mechanism-report", report, *extra, "-o", tmp_path / "t"]
    assert message in one_line_error(*run(args, capsys)[::2])


# ---------------------------------------------------------------------- 6: files
@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_output_files_respect_the_umask(umask, binary, tmp_path, capsys):
    out, report, pert = tmp_path / "t.csv", tmp_path / "r.json", tmp_path / "p.csv"
    old = os.umask(umask)
    try:
        assert run(["infer", binary, "-m", "mv", "-o", out], capsys)[0] == 0
        args = ["perturb", binary, "-M", "one-layer", "-e", "1", "--seed", "1", "-o", pert]
        assert run([*args, "--report", report], capsys)[0] == 0
    finally:
        os.umask(old)
    for path in (out, report, pert):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_rewriting_a_file_keeps_its_mode(binary, tmp_path, capsys):
    out = tmp_path / "t.csv"
    out.write_text("old")
    out.chmod(0o640)
    assert run(["infer", binary, "-m", "mv", "-o", out], capsys)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and out.read_text().startswith("task,")


def test_dash_means_standard_output(binary, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["infer", binary, "-m", "mv", "-o", "-"], capsys)
    assert code == 0 and "-> standard output" in err
    truths = out.splitlines()
    assert truths[0] == "task,truth" and len(truths) == 13
    args = ["perturb", binary, "-M", "one-layer", "-e", "1", "--seed", "1", "-o", "p.csv"]
    code, out, _ = run([*args, "--report", "-"], capsys)
    assert code == 0 and json.loads(out)["mechanism"] == "one-layer"
    code, out, _ = run([*args[:-1], "-"], capsys)
    assert code == 0 and out.startswith("task,worker,answer\n") and len(out.splitlines()) == 61
    assert not (tmp_path / "-").exists()
    both = ["infer", binary, "-m", "mv", "-o", "-", "--workers-output", "-"]
    assert "both name standard output" in one_line_error(*run(both, capsys)[::2])


def test_integer_labels_survive_a_blank_cell(tmp_path, capsys):
    answers = tmp_path / "a.csv"
    answers.write_text(
        "task,worker,answer\nt1,a,1\nt1,b,1\nt1,c,\nt2,a,0\nt2,b,0\nt2,c,1\nt3,a,1\nt3,b,1\n"
    )
    out = tmp_path / "t.csv"
    code, _, err = run(["infer", answers, "-m", "mv", "--on-missing", "drop", "-o", out], capsys)
    assert code == 0, err
    assert out.read_text().splitlines() == ["task,truth", "t1,1", "t2,0", "t3,1"]
    # The reference may have blanks too: integer truths stay integers, blank ones are left out.
    reference = tmp_path / "ref.csv"
    reference.write_text("task,truth\nt1,1\nt2,\nt3,0\n")
    code, text, _ = run(["evaluate", out, "--truth", reference, "--json"], capsys)
    metrics = json.loads(text)
    assert code == 0
    assert {k: metrics[k] for k in ("n_evaluated", "n_missing", "accuracy", "error_rate")} == {
        "n_evaluated": 2,
        "n_missing": 0,
        "accuracy": 0.5,
        "error_rate": 0.5,
    }
    assert metrics["recall"] == {"0": 0.0, "1": 1.0}  # integer labels keyed as written


def test_reader_tells_integers_from_floats_beside_blanks(tmp_path):
    ints, floats = tmp_path / "i.csv", tmp_path / "f.csv"
    ints.write_text("task,worker,answer\nt1,a,1\nt2,a,\nt3,a,-2\n")
    floats.write_text("task,worker,answer\nt1,a,1.0\nt2,a,\nt3,a,-2\n")
    for reader in (read_csv, _read_pandas):
        assert str(reader(ints, ["task", "worker"])["answer"].dtype) == "Int64"
        assert pd.api.types.is_float_dtype(reader(floats, ["task", "worker"])["answer"])


def test_evaluate_refuses_labels_that_cannot_match(tmp_path, capsys):
    inferred, reference = tmp_path / "t.csv", tmp_path / "ref.csv"
    inferred.write_text("task,truth\nt1,1.0\nt2,0.0\nt3,1.0\n")
    reference.write_text("task,truth\nt1,yes\nt2,no\nt3,yes\n")
    line = one_line_error(*run(["evaluate", inferred, "--truth", reference], capsys)[::2])
    assert "No inferred label is a reference label" in line and "kind='numeric'" in line
    assert line.endswith("(CLI: --kind).")
    # One label on each side, all wrong, same type: a real score of 0, not a mismatch.
    inferred.write_text("task,truth\nt1,no\nt2,no\n")
    reference.write_text("task,truth\nt1,yes\nt2,yes\n")
    code, text, _ = run(["evaluate", inferred, "--truth", reference, "--json"], capsys)
    assert code == 0 and json.loads(text)["accuracy"] == 0.0


# ---------------------------------------------------------------------- 7: unreadable truths
@pytest.mark.parametrize("where", ["evaluate", "gold"])
def test_unreadable_truth_files_give_infers_parse_error(where, binary, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\x00\xff\xfe task,truth\n")
    if where == "evaluate":
        truths = tmp_path / "t.csv"
        truths.write_text("task,truth\nt1,1\n")
        args = ["evaluate", truths, "--truth", bad]
    else:
        args = ["infer", binary, "-m", "mv", "--gold", bad, "-o", tmp_path / "t.csv"]
    line = one_line_error(*run(args, capsys)[::2])
    answers_line = one_line_error(*run(["infer", bad, "-m", "mv", "-o", "x"], capsys)[::2])
    assert line == answers_line
    assert line.startswith(f"privtd: error: Cannot parse {str(bad)!r} as csv: 'utf-8' codec")


def test_private_files_stay_0600(tmp_path):
    # A worker's state holds its token; enrolment codes admit workers: not for other users.
    from privtd._files import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "state.json", "{}", private=True)
        atomic_write_text(tmp_path / "out.csv", "a\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "out.csv").stat().st_mode) == 0o644


def test_devices_are_written_into_not_replaced(binary, tmp_path, capsys):
    # Renaming a temporary file over /dev/null would replace the device when run as root; a
    # named pipe shows the same without touching /dev.
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[str] = []

    def read() -> None:
        with open(pipe) as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code, _, err = run(["infer", binary, "-m", "mv", "-o", pipe], capsys)
    reader.join(timeout=5)  # a daemon: left blocked if the pipe was renamed over instead
    assert code == 0, err
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert got and got[0].startswith("task,truth\n")


# ------------------------------------------------------------- aware methods asked for by name
@pytest.mark.parametrize(
    "method, plain",
    [
        ("aware-glad", "glad"),
        ("aware-mace", "mace"),
        ("aware-zencrowd", "zencrowd"),
        ("aware-ds", None),
        ("aware-one-coin", None),
    ],
)
def test_aware_method_without_a_mechanism_says_it_is_the_plain_one(
    method, plain, four_labels, tmp_path, capsys
):
    out = tmp_path / "aware.csv"
    code, _, err = run(["infer", four_labels, "-m", method, "-o", out], capsys)
    assert code == 0, err
    note = [line for line in err.splitlines() if line.startswith("privtd: note:")]
    assert len(note) == 1 and f"{method} without a mechanism is " in note[0], err
    assert "-M NAME -e EPSILON" in note[0] and "--mechanism-report FILE" in note[0]
    if plain is not None:
        # What the note says is what runs: the plain model's truths, to the byte.
        assert f"is plain {plain};" in note[0]
        again = tmp_path / "plain.csv"
        code, _, err = run(["infer", four_labels, "-m", plain, "-o", again], capsys)
        assert code == 0 and "note" not in err, err
        assert out.read_text() == again.read_text()
    # Told the mechanism, it models it and says nothing.
    args = ["infer", four_labels, "-m", method, "-M", "one-layer", "-e", "1", "-o", out]
    code, _, err = run(args, capsys)
    assert code == 0 and "note" not in err, err


def test_aware_gaussian_without_a_mechanism_says_so(tmp_path, capsys):
    rows = [(f"t{t}", f"w{w}", t + 0.1 * ((t * w) % 5)) for t in range(10) for w in range(4)]
    path = tmp_path / "scores.csv"
    pd.DataFrame(rows, columns=["task", "worker", "answer"]).to_csv(path, index=False)
    code, _, err = run(["infer", path, "-m", "aware-gaussian", "-o", tmp_path / "t.csv"], capsys)
    assert code == 0, err
    assert "note: aware-gaussian without a mechanism is a hierarchical Gaussian model" in err
    assert "--mechanism-report FILE" in err


def test_aware_null_without_a_mechanism_is_an_error_that_names_it(binary, tmp_path, capsys):
    code, _, err = run(["infer", binary, "-m", "aware-null", "-o", tmp_path / "t.csv"], capsys)
    line = one_line_error(code, err)
    assert "aware-null reads the rows a mechanism (krr-null or two-layer-null)" in line
    assert "-M NAME -e EPSILON" in line and "check their types" not in line


@pytest.mark.parametrize(
    "method, form, default",
    [
        ("glad", "aware-glad", "aware-ds"),
        ("mace", "aware-mace", "aware-ds"),
        ("zencrowd", "aware-zencrowd", "aware-ds"),
        ("ds", "aware-ds", None),
        ("one-coin-ds", "aware-one-coin", "aware-ds"),
        ("mv", None, "aware-ds"),
    ],
)
def test_plain_method_with_a_mechanism_suggests_its_own_aware_form(
    method, form, default, four_labels, tmp_path, capsys
):
    args = ["infer", four_labels, "-m", method, "-M", "two-layer", "-e", "2"]
    code, _, err = run([*args, "-o", tmp_path / "t.csv"], capsys)
    assert code == 0, err
    note = [line for line in err.splitlines() if line.startswith("privtd: note:")]
    assert len(note) == 1 and f"{method} does not model the two-layer mechanism" in note[0]
    if form is None:
        assert "pass -m" not in note[0]
    else:
        assert f"pass -m {form}, its perturbation-aware form" in note[0]
    if default is None:
        assert "(the default here)" in note[0]
    else:
        assert f"perturbation-aware default ({default})" in note[0]


def test_plain_method_with_binary_rr_suggests_its_aware_form(binary, tmp_path, capsys):
    # Over two labels the default is aware-ds: ds's own form, while glad's is still aware-glad.
    args = ["infer", binary, "-M", "binary-rr", "-e", "2", "-o", tmp_path / "t.csv"]
    code, _, err = run([*args, "-m", "ds"], capsys)
    assert code == 0 and "pass -m aware-ds, its perturbation-aware form (the default" in err, err
    code, _, err = run([*args, "-m", "glad"], capsys)
    assert code == 0 and "pass -m aware-glad" in err and "default (aware-ds)" in err, err


def test_every_aware_method_has_its_notes():
    # A new aware method is named in infer's tables, or its note would be missing.
    from privtd.cli.infer import AWARE_FORM, AWARE_WITHOUT_MECHANISM
    from privtd.inference import AWARE_METHODS, METHODS, RELEASE_METHODS

    assert set(AWARE_WITHOUT_MECHANISM) == AWARE_METHODS - set(RELEASE_METHODS)
    assert set(AWARE_FORM) <= set(METHODS) - AWARE_METHODS
    assert set(AWARE_FORM.values()) <= AWARE_METHODS


# ---------------------------------------------------------------------- spreadsheets
def _workbook(path, content=b"PK\x03\x04\x14\x00\x06\x00[Content_Types].xml"):
    path.write_bytes(content + b"\x00" * 64)
    return path


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("answers.xlsx", b"PK\x03\x04\x14\x00\x06\x00[Content_Types].xml"),
        ("answers.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"),
        ("answers.ods", b"PK\x03\x04mimetypeapplication/vnd.oasis.opendocument.spreadsheet"),
        # A workbook renamed .csv is still told apart by its first bytes.
        ("renamed.csv", b"PK\x03\x04\x14\x00\x06\x00[Content_Types].xml"),
    ],
)
def test_spreadsheets_get_one_line_saying_save_as_csv(name, content, tmp_path, capsys):
    book = _workbook(tmp_path / name, content)
    out = tmp_path / "o.csv"
    commands = [
        ["infer", book, "-m", "mv", "-o", out],
        ["perturb", book, "-M", "one-layer", "-e", "1", "--seed", "0", "-o", out],
        ["evaluate", book, "--truth", book],
    ]
    for args in commands:
        line = one_line_error(*run(args, capsys)[::2])
        assert "Excel files are not read; save as CSV" in line, (args, line)


def test_spreadsheet_refused_by_the_python_readers(tmp_path):
    from privtd import Answers, io
    from privtd.errors import ValidationError

    book = _workbook(tmp_path / "a.xlsx")
    for read in (io.read, Answers.from_path, Answers.from_csv):
        with pytest.raises(ValidationError, match="Excel files are not read; save as CSV"):
            read(str(book))


# ---------------------------------------------------------------------- Worker.submit's labels
@pytest.mark.parametrize(
    ("labels", "given", "expected"),
    [
        ([0, 1], {"t1": "1", "t2": "0", "t3": " 1 "}, [1, 0, 1]),  # text of the labels
        ([0, 1], {"t1": 1.0, "t2": 0.0}, [1, 0]),  # whole floats
        (["0", "1"], {"t1": 1, "t2": 0}, ["1", "0"]),  # numbers for text labels
        ([True, False], {"t1": "true", "t2": "False"}, [True, False]),
        (["yes", "no"], {"t1": "yes"}, ["yes"]),
    ],
)
def test_worker_submit_takes_the_campaigns_label_types(
    labels, given, expected, tmp_path, monkeypatch
):
    from cli_runner import offline_worker
    from privtd.client import Worker

    mechanism = {"name": "one-layer", "params": {"f": 0.1, "n_labels": 2}}
    state, sent = offline_worker(tmp_path, monkeypatch, mechanism, labels)
    Worker(state).submit(given)
    # Perturbed, every report is one of the campaign's labels, of its type.
    values = [r["value"] for r in sent[0]["reports"]]
    assert {type(v) for v in values} == {type(labels[0])} and set(values) <= set(labels)
    # Without perturbation (f close to 0 is not allowed: check the coercion itself).
    from privtd.client import declared_answers

    campaign = Worker(state).campaign()
    out, clipped = declared_answers(campaign, given)
    assert list(out.values()) == expected and clipped == 0
    assert [type(v) for v in out.values()] == [type(v) for v in expected]


@pytest.mark.parametrize(
    ("labels", "given"),
    [([0, 1], {"t1": "1.5"}), ([0, 1], {"t1": 0.5}), ([0, 1], {"t1": "yes"}), (["a"], {"t": 1})],
)
def test_worker_submit_refuses_a_lossy_label_in_one_line(labels, given, tmp_path, monkeypatch):
    from cli_runner import offline_worker
    from privtd.client import Worker
    from privtd.errors import ValidationError

    mechanism = {"name": "one-layer", "params": {"f": 0.1, "n_labels": max(2, len(labels))}}
    state, sent = offline_worker(tmp_path, monkeypatch, mechanism, [*labels, "z"][:2])
    with pytest.raises(ValidationError) as info:
        Worker(state).submit(given)
    message = str(info.value)
    assert "\n" not in message and "is not one of the campaign's labels" in message
    assert repr(next(iter(given))) in message and not sent


def test_client_submit_reads_a_csvs_numbers_as_text_labels(tmp_path, monkeypatch, capsys):
    from cli_runner import offline_worker

    mechanism = {"name": "one-layer", "params": {"f": 0.1, "n_labels": 2}}
    state, sent = offline_worker(tmp_path, monkeypatch, mechanism, ["0", "1"])
    answers = tmp_path / "mine.csv"
    answers.write_text("task,answer\nt1,1\nt2,0\n")  # pandas reads 1 and 0 as integers
    code, out, err = run(["client", "submit", answers, "--state", state], capsys)
    assert code == 0, err
    assert {r["value"] for r in sent[0]["reports"]} <= {"0", "1"}


# ---------------------------------------------------------------------- per-worker totals
def test_perturb_prints_the_per_worker_totals(tmp_path, capsys):
    # Three workers with 2, 4 and 6 answers at epsilon 0.5 each: totals 1, 2 and 3.
    rows = [(f"t{t}", f"w{w}", t % 2) for w, n in enumerate((2, 4, 6)) for t in range(n)]
    path = tmp_path / "a.csv"
    pd.DataFrame(rows, columns=["task", "worker", "answer"]).to_csv(path, index=False)
    args = ["perturb", path, "-M", "one-layer", "-e", "0.5", "--seed", "0", "-o", tmp_path / "p"]
    code, _, err = run(args, capsys)
    assert code == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith("per-worker epsilon totals")]
    assert "3 workers: median 2 (4 answers), largest 3 (6 answers)" in line, line
    assert "--report FILE" in line
    code, _, err = run([*args, "--report", tmp_path / "r.json"], capsys)
    assert code == 0 and f"every worker's in {tmp_path / 'r.json'}" in err


# ---------------------------------------------------------------------- uninformative settings
@pytest.mark.parametrize(
    "args",
    [
        ["-M", "one-layer", "-e", "0"],
        ["-M", "one-layer", "-p", "f=0.5"],
        ["-M", "binary-rr", "-e", "0"],
        ["-M", "two-layer", "-e", "0", "-p", "a=0.5"],  # a = b = 1/2: every worker flips so
    ],
)
def test_perturb_refuses_answers_that_carry_no_information(args, binary, tmp_path, capsys):
    out = tmp_path / "p.csv"
    line = one_line_error(*run(["perturb", binary, *args, "--seed", "0", "-o", out], capsys)[::2])
    assert "releases answers independent of the truth" in line and "--allow-uninformative" in line
    assert not out.exists()
    # Asked for, the old behaviour: a release of uniform draws.
    code, _, err = run(
        ["perturb", binary, *args, "--allow-uninformative", "--seed", "0", "-o", out], capsys
    )
    assert code == 0 and "epsilon=0 per" in err, err
    assert out.exists()


def test_two_layer_at_epsilon_0_is_not_uninformative(binary, tmp_path, capsys):
    # f_u ~ U(0, 1): one answer alone says nothing, but a worker's answers share f_u.
    out = tmp_path / "p.csv"
    code, _, err = run(
        ["perturb", binary, "-M", "two-layer", "-e", "0", "--seed", "0", "-o", out], capsys
    )
    assert code == 0, err


def test_allow_uninformative_is_for_the_mechanisms_that_can_be(binary, tmp_path, capsys):
    args = ["perturb", binary, "-M", "exp-gaussian", "-e", "1", "--clip", "0,1"]
    line = one_line_error(*run([*args, "--allow-uninformative", "-o", tmp_path / "p"], capsys)[::2])
    assert "--allow-uninformative applies to one-layer, two-layer, binary-rr and krr-null" in line


def test_mechanism_constructors_refuse_uninformative_settings():
    from privtd.errors import ValidationError
    from privtd.mechanisms import BinaryRR, KRRNull, OneLayerRR, TwoLayerRR

    builds = [
        lambda **kw: OneLayerRR(2 / 3, 3, **kw),
        lambda **kw: OneLayerRR.from_epsilon(0.0, 4, **kw),
        lambda **kw: BinaryRR.from_epsilon(0.0, **kw),
        lambda **kw: BinaryRR.from_keep(0.5, **kw),
        lambda **kw: TwoLayerRR(0.75, 0.75, 4, **kw),
        lambda **kw: TwoLayerRR.from_epsilon(0.0, 2, a=0.5, **kw),
        lambda **kw: KRRNull.from_epsilon(0.0, 0, 4, **kw),
        lambda **kw: KRRNull(1 / 6, 0, 4, **kw),
    ]
    for build in builds:
        with pytest.raises(ValidationError, match="independent of the truth"):
            build()
        mech = build(allow_uninformative=True)
        assert mech.uninformative and mech.epsilon == pytest.approx(0.0, abs=1e-12)
        # The consent travels with the parameters (a report, a campaign) ...
        assert mech.params()["allow_uninformative"] is True
        assert type(mech)(**mech.params()) == mech
    # ... and an informative mechanism's parameters do not name it.
    assert "allow_uninformative" not in OneLayerRR.from_epsilon(1.0).params()
    assert not TwoLayerRR.from_epsilon(0.0).uninformative  # a = 0, b = 1: a shared f_u


# ---------------------------------------------------------------------- numbers mixed with words
@pytest.fixture
def mixed(tmp_path):
    """Scores 1..5 with one stray word."""
    rows = [(f"t{t}", f"w{w}", str(1 + (t + w) % 5)) for t in range(6) for w in range(3)]
    rows[4] = ("t1", "w1", "unsure")
    path = tmp_path / "mixed.csv"
    pd.DataFrame(rows, columns=["task", "worker", "score"]).to_csv(path, index=False)
    return path


def test_a_column_mixing_numbers_and_words_says_so(mixed, tmp_path, capsys):
    args = ["infer", mixed, "-m", "mv", "--answer-col", "score", "-o", tmp_path / "t.csv"]
    code, _, err = run(args, capsys)
    assert code == 0, err
    (line,) = [x for x in err.splitlines() if "mixes numbers and words" in x]
    assert line.startswith("privtd: warning: column 'score' mixes numbers and words (e.g. ")
    assert "'unsure'" in line and ("'1'" in line or "'2'" in line), line
    # Read as numbers, the error names the column and an example of each too, in one line.
    numeric = ["perturb", mixed, "--answer-col", "score", "-M", "exp-gaussian", "-e", "1"]
    line = one_line_error(*run([*numeric, "--clip", "0,5", "-o", tmp_path / "p"], capsys)[::2])
    assert "Column 'score' mixes numbers and words (e.g. " in line and "'unsure'" in line


def test_labels_that_are_all_words_or_all_numbers_do_not_warn(
    binary, four_labels, tmp_path, capsys
):
    for path in (binary, four_labels):
        code, _, err = run(["infer", path, "-m", "mv", "-o", tmp_path / "t.csv"], capsys)
        assert code == 0 and "mixes" not in err
    from privtd.answers import mixed_example

    assert mixed_example(["yes", "no"]) is None and mixed_example([1, 2, 3.5]) is None
    assert mixed_example(["1", "2", "n/a"]) == ("1", "n/a")
    assert mixed_example([3, "yes"]) == (3, "yes") and mixed_example([True, "x"]) is None


# ---------------------------------------------------------------------- perturb keeps the gold
TOLOKA = os.path.join(os.path.dirname(__file__), "data", "formats", "toloka_results.tsv")


def test_perturb_keeps_an_exports_gold_for_infer_and_evaluate(tmp_path, capsys):
    out = tmp_path / "p.csv"
    code, _, err = run(
        ["perturb", TOLOKA, "-M", "one-layer", "-e", "2", "--seed", "0", "-o", out], capsys
    )
    assert code == 0 and "kept the 2 golden task(s)" in err, err
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(table.columns) == ["task", "worker", "answer", "gold"]
    from privtd import io

    expected = io.read(TOLOKA).gold
    kept = table[table["gold"] != ""].drop_duplicates("task").set_index("task")["gold"]
    assert kept.sort_index().to_dict() == expected.sort_index().to_dict()  # unperturbed
    # infer holds them fixed (and names them); evaluate scores against them.
    code, _, err = run(
        ["infer", out, "-M", "one-layer", "-e", "2", "-o", tmp_path / "t.csv"], capsys
    )
    assert code == 0 and "its gold column has 2 golden task(s); using them as gold" in err, err
    assert pd.read_csv(tmp_path / "t.csv")["gold"].sum() == 2
    args = ["infer", out, "-M", "one-layer", "-e", "2", "--no-gold", "-o", tmp_path / "n.csv"]
    assert run(args, capsys)[0] == 0
    code, text, err = run(["evaluate", tmp_path / "n.csv", "--truth", out, "--json"], capsys)
    assert code == 0 and json.loads(text)["n_evaluated"] == 2, err


def test_a_long_tables_gold_column_passes_through_with_its_type(binary, tmp_path, capsys):
    table = pd.read_csv(binary)
    # Integer truths on two tasks' rows, blank elsewhere.
    truths = {"t0": 0, "t1": 1}
    table["gold"] = table["task"].map(truths).astype("Int64")
    source = tmp_path / "with_gold.csv"
    table.to_csv(source, index=False)
    out = tmp_path / "p.csv"
    code, _, err = run(
        ["perturb", source, "-M", "one-layer", "-e", "1", "--seed", "2", "-o", out], capsys
    )
    assert code == 0, err
    from privtd import io

    read = io.read(str(out))
    assert read.gold.to_dict() == truths and read.answers.labels.tolist() == [0, 1]
    assert "1.0" not in out.read_text()
    # A TSV's gold column too, its delimiter sniffed.
    tsv = tmp_path / "p.tsv"
    tsv.write_text(out.read_text().replace(",", "\t"))
    assert io.read(str(tsv)).gold.to_dict() == truths
