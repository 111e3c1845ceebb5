"""Flag hints belong to the command line: library messages name parameters in the library's
terms (and in the error's ``param``), and the CLI's error handler adds the option of the
command being run."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import click
import pandas as pd
import pytest

from cli_runner import run_cli as run
from privtd import Answers, evaluate
from privtd.cli import _common
from privtd.errors import NotNumericError, PrivtdError, ServiceError, ValidationError
from privtd.inference import make_estimator
from privtd.io._base import Note

SRC = Path(__file__).resolve().parents[1] / "src" / "privtd"

#: A command-line option (``--on-missing``) or the word CLI.
CLI_MENTION = re.compile(r"(?<![\w-])--[a-z][\w-]+|\bCLI\b")

#: Library strings allowed to name a command's flag, with why.
ALLOWED = {
    # Addressed to the campaign's workers, through the requester: it lists the ways a worker
    # raises a ceiling (the command, the page), none of them the caller's own parameter.
    ("service/routes/campaigns.py", "privtd client ceiling --lifetime X"),
}


def cli_mentions(source: str) -> list[tuple[int, str]]:
    """The string literals of ``source`` (docstrings aside) that name a CLI flag."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and CLI_MENTION.search(node.value)
    ]


def test_the_scan_finds_a_flag_in_a_message():
    source = '''
def f(kind):
    """Docstrings may say --kind numeric."""
    raise ValueError(f"{kind} is wrong (CLI: --kind numeric).")
'''
    assert [line for line, _ in cli_mentions(source)] == [4]


def test_library_messages_name_no_cli_flag():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where.startswith("cli/"):
            continue
        for line, text in cli_mentions(path.read_text(encoding="utf-8")):
            if not any(where == file and part in text for file, part in ALLOWED):
                found.append(f"{where}:{line}: {text!r}")
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------- the library's side
def duplicated_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"task": ["t1", "t1", "t2"], "worker": ["w1", "w1", "w1"], "answer": ["a", "b", "a"]}
    )


def test_library_errors_name_the_parameter_not_the_flag():
    with pytest.raises(ValidationError) as dup:
        Answers.from_frame(duplicated_frame())
    assert dup.value.param == "on_duplicate" and "on_duplicate='first'" in str(dup.value)
    with pytest.raises(ValidationError) as unknown:
        make_estimator("ds", bogus=1)
    assert unknown.value.param == "method_params"
    truths, reference = pd.Series([1.0, 0.0], index=["a", "b"]), pd.Series(["y", "n"], ["a", "b"])
    with pytest.raises(ValidationError) as mismatch:
        evaluate(truths, reference)
    assert mismatch.value.param == "kind"
    for exc in (dup.value, unknown.value, mismatch.value):
        assert not CLI_MENTION.search(str(exc)), exc


def test_param_survives_pickling_and_defaults_to_none():
    assert PrivtdError("x").param is None
    for exc in (
        ValidationError("x", param="on_missing"),
        NotNumericError("found", "advice", param="kind"),
        ServiceError(422, "no", param=("a", "b")),
    ):
        back = pickle.loads(pickle.dumps(exc))
        assert (type(back), str(back), back.param) == (type(exc), str(exc), exc.param)
    note = pickle.loads(pickle.dumps(Note("left out 2 row(s)", "keep_rejected")))
    assert note == "left out 2 row(s)" and note.param == "keep_rejected"


# ---------------------------------------------------------------------- the CLI's side
@pytest.fixture
def answers_csv(tmp_path):
    path = tmp_path / "answers.csv"
    duplicated_frame().to_csv(path, index=False)
    return path


def error_line(code, err):
    """The error line (after any notes on how the answers were read)."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert all(x.startswith("privtd: note: ") for x in lines[:-1]), err
    assert lines[-1].startswith("privtd: error: ") and "Traceback" not in err
    return lines[-1]


def test_cli_appends_the_running_commands_option(tmp_path, answers_csv, capsys):
    out = tmp_path / "t.csv"
    line = error_line(*run(["infer", answers_csv, "-m", "mv", "-o", out], capsys)[::2])
    assert line.endswith("to merge them (CLI: --on-duplicate).")
    args = ["infer", answers_csv, "-m", "ds", "--on-duplicate", "first", "-o", out]
    line = error_line(*run([*args, "-P", "bogus=1"], capsys)[::2])
    assert line.endswith("it takes: max_iter, tol, smoothing (CLI: -P/--method-param).")
    line = error_line(*run([*args, "--decision", "mpa"], capsys)[::2])
    assert "Unknown decision 'mpa'" in line and line.endswith("(CLI: --decision).")
    # A mechanism's constructor parameter is set with -p KEY=VALUE.
    args = ["perturb", answers_csv, "-M", "two-layer", "-e", "0", "-p", "n_labels=4", "-p", "a=0"]
    line = error_line(*run([*args, "--on-duplicate", "first", "-o", out], capsys)[::2])
    assert "leave a unset" in line and line.endswith("(CLI: -p a=VALUE).")
    assert not out.exists()


def test_cli_hints_an_option_of_another_command_where_the_fix_is_there(tmp_path, capsys):
    truths = tmp_path / "t.csv"
    truths.write_text("task,truth,gold\nt1,a,1\nt2,b,1\n")
    reference = tmp_path / "r.csv"
    reference.write_text("task,truth\nt1,a\nt2,b\n")
    line = error_line(*run(["evaluate", truths, "--truth", reference], capsys)[::2])
    assert "leave them out of the fit's gold" in line
    assert line.endswith("(CLI: privtd infer --gold, or --no-gold for an export's).")


def test_the_hint_names_only_options_the_command_has(monkeypatch):
    infer_like = click.Command(
        "infer",
        params=[
            click.Option(["--on-missing"]),
            click.Option(["--method-param", "-P"], multiple=True),
            click.Option(["--param", "-p", "--mechanism-param", "param"], multiple=True),
        ],
    )
    monkeypatch.setattr(_common, "_running", [infer_like])
    assert _common._with_hint("Pass on_missing='drop'.", "on_missing") == (
        "Pass on_missing='drop' (CLI: --on-missing)."
    )
    assert _common._flag_hint(("method_params", "n_labels")) == (
        " (CLI: -P/--method-param, -p n_labels=VALUE)"
    )
    # A parameter no option of this command sets: the library's message alone.
    assert _common._with_hint("Pass single_task='keep'.", "single_task") == (
        "Pass single_task='keep'."
    )
    bare = click.Command("audit", params=[click.Option(["--answers"], type=int)])
    monkeypatch.setattr(_common, "_running", [bare])
    assert _common._flag_hint("n_labels") == ""  # no -p here: no -p hint
    assert _common._flag_hint("answers") == " (CLI: --answers)"
