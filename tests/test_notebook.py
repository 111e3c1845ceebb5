"""What a notebook user sees: public namespaces, reprs and ``_repr_html_``, and the demo's
and the progress line's output."""

from __future__ import annotations

import importlib
import pkgutil
import types
import warnings

import numpy as np
import pandas as pd
import pytest

import privtd
from privtd import Answers, datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import DawidSkene, MajorityVote


def _public_packages() -> list[str]:
    names = ["privtd"]
    names += [f"privtd.{m.name}" for m in pkgutil.iter_modules(privtd.__path__) if m.ispkg]
    return [*names, "privtd.inference.distributed"]


@pytest.mark.parametrize("name", _public_packages())
def test_public_namespaces_hold_only_all_and_submodules(name):
    # The test extras install every package's extra, so each public package imports.
    module = importlib.import_module(name)
    exported = set(module.__all__)
    stray = [
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and attr not in exported
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(f"{name}."))
    ]
    assert stray == [], f"{name} leaks {stray}"
    assert "annotations" not in dir(module)


def test_privtd_plot_namespace():
    pytest.importorskip("matplotlib")
    plot = importlib.import_module("privtd.plot")
    public = {a for a in vars(plot) if not a.startswith("_")}
    assert public == set(plot.__all__)


def _answers(labels=("no", "yes"), n_workers=4) -> Answers:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "task": np.repeat([f"t{i}" for i in range(20)], n_workers),
            "worker": np.tile([f"w{j}" for j in range(n_workers)], 20),
            "answer": rng.choice(list(labels), size=20 * n_workers),
        }
    )
    return Answers.from_frame(frame)


def test_answers_repr_and_html_summarise():
    answers = _answers()
    assert repr(answers) == "Answers(80 answers, 20 tasks, 4 workers, labels=[no, yes])"
    html = answers._repr_html_()
    for text in ("<table", "answers", "80", "tasks", "20", "workers", "labels", "[no, yes]"):
        assert text in html
    assert "answers per task</th><td style='text-align:left'>4.0" in html


def test_a_large_label_set_is_cut_short():
    answers = _answers(labels=[f"l{i}" for i in range(30)], n_workers=6)
    assert "more]" in repr(answers) and len(repr(answers)) < 150


def test_estimator_repr_and_html_say_what_the_fit_found():
    est = DawidSkene(max_iter=50)
    assert repr(est) == "DawidSkene(max_iter=50, tol=1e-05, smoothing=0.0)"
    assert "call fit(answers)" in est._repr_html_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(_answers())
    text = repr(est)
    assert text.startswith("DawidSkene(max_iter=50, tol=1e-05, smoothing=0.0) fitted: ")
    for part in ("tasks=20", "workers=4", "answers=80", "labels=[no, yes]"):
        assert part in text
    assert f"iterations={est.n_iter_}" in text
    assert ("converged=yes" in text) == est.converged_
    html = est._repr_html_()
    assert "<table" in html and "DawidSkene" in html and "iterations" in html
    # A non-iterative method says nothing about iterations.
    mv = repr(MajorityVote().fit(_answers()))
    assert "tasks=20" in mv and "iterations" not in mv


def test_html_escapes_labels():
    answers = _answers(labels=("<b>", "ok"))
    assert "<b>," not in answers._repr_html_() and "&lt;b&gt;" in answers._repr_html_()


def test_demo_explains_a_one_class_fit(capsys):
    from privtd.cli import main

    try:
        main(["demo"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = capsys.readouterr().out
    assert "SPEC" not in out
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("one-coin-ds "))
    assert "+0.0000" in lines[row]
    # The next line, wrapped to 100 columns, says why: one label for (nearly) every task, the
    # majority class's share.
    end = next(i for i in range(row + 2, len(lines)) if not lines[i].startswith("    "))
    note = " ".join(line.strip() for line in lines[row + 1 : end])
    assert lines[row + 1].startswith("  one-coin-ds: ")
    assert note.startswith("one-coin-ds: labels ") and "tasks '0'" in note
    assert "class's share" in note
    data = datasets.load("duchenne")
    share = float((data.truth.astype(str) == "0").mean())
    assert f"{share:.4f}" in lines[row]


def test_progress_shows_iterations_and_elapsed_time_not_an_eta(capsys):
    from privtd.cli._common import _progress

    with _progress(True, "ds") as tick:
        assert tick is not None
        for n in range(1, 15):
            tick(n, 100)
    err = capsys.readouterr().err
    assert "ETA" not in err and "%" not in err
    assert "ds: iteration 1 (at most 100)" in err
    assert err.rstrip().splitlines()[-1].split("\r")[-1].startswith("ds: 14 iterations in ")
