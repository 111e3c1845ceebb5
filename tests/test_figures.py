"""Figures that read on their own and privtd.plot, on the Agg
backend."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from privtd.experiments import kdd18, report  # noqa: E402
from privtd.inference import DawidSkene, MajorityVote  # noqa: E402

SRC = str(Path(__file__).resolve().parent.parent / "src")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _kdd18_table(epsilons=kdd18.EPSILONS, balanced=False) -> pd.DataFrame:
    """A table shaped as kdd18.run's, with made-up values (seeded); ``balanced``: with the
    balanced-accuracy columns too."""
    rng = np.random.default_rng(0)
    names = ["mv", "td", "crh", "aware", "aware_vs_td", "aware_minus_td"]
    names += ["aware_ds", "aware_ds_vs_td", "aware_ds_minus_td"]
    names += [f"{n}_bacc" for n in kdd18.BACC_METHODS] if balanced else []
    row_names = [f"{m}_{n}{se}" for m in kdd18.MECHANISMS for n in names for se in ("", "_se")]
    table = pd.DataFrame(rng.uniform(0, 0.3, (len(epsilons), len(row_names))), columns=row_names)
    table.insert(0, "epsilon", list(epsilons))
    if balanced:
        table["majority_bacc"] = 0.5
    return table


def _tick_positions(ax, values):
    return ax.xaxis.get_transform().transform(np.asarray(values, dtype=float))


def test_epsilon_zero_and_small_values_are_apart_and_every_figure_has_a_title():
    table = _kdd18_table(balanced=True)
    fig2 = kdd18.weights_before_after("duchenne", epsilon=0.5, seed=0)
    dist = kdd18.error_change_distribution(samples=2000, seed=0)
    figures = kdd18.figure_set(table, fig2, dist, "duchenne", "2 trials, seed 0")
    assert set(figures) == {"table.png", "figure2.png", "error_change.png", "balanced_accuracy.png"}
    for name, fig in figures.items():
        assert fig._suptitle is not None and fig._suptitle.get_text(), name
    assert "duchenne" in figures["table.png"]._suptitle.get_text()
    assert "2 trials" in figures["table.png"]._suptitle.get_text()
    for ax in figures["table.png"].axes:
        assert ax.get_xscale() != "linear"
        x0, x1, x2, x3 = _tick_positions(ax, [0.0, 0.001, 0.01, 0.1])
        # On a linear axis from 0 to 1 these lie within 1% of the width; here each step is
        # at least 8% of the way from 0 to 1.
        full = _tick_positions(ax, [1.0])[0] - x0
        assert min(x1 - x0, x2 - x1, x3 - x2) > 0.08 * full
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert {"0", "0.001", "0.01", "1"} <= set(labels)
    # n = 2, 3, 5 workers: whole-number ticks only.
    for ax in figures["error_change.png"].axes:
        locator = ax.xaxis.get_major_locator()
        assert isinstance(locator, MaxNLocator) and locator._integer
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert all(float(t).is_integer() for t in ticks)


def test_positive_values_over_decades_get_a_log_axis_and_few_points_stay_linear():
    table = pd.DataFrame({"p": "a", "epsilon": [0.1, 0.5, 1, 2, 5], "y": np.arange(5.0)})
    ax = report.panels_figure(table, ["p"], "epsilon", ["y"], "y", "t").axes[0]
    assert ax.get_xscale() == "log"
    table = pd.DataFrame({"p": "a", "epsilon": [0.5, 1.0, 2.0, 4.0], "y": np.arange(4.0)})
    ax = report.panels_figure(table, ["p"], "epsilon", ["y"], "y", "t").axes[0]
    assert ax.get_xscale() == "linear"


def test_a_line_on_another_is_marked_in_the_legend():
    table = pd.DataFrame(
        {"p": "a", "x": [1, 2, 3], "first": [0.1, 0.2, 0.3], "second": [0.1, 0.2, 0.3]}
    )
    table["third"] = [0.3, 0.1, 0.2]
    fig = report.panels_figure(table, ["p"], "x", ["first", "second", "third"], "y", "title")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["first", "second (lies on first)", "third"]


def test_many_panels_wrap_into_rows():
    table = pd.DataFrame({"p": np.repeat(np.arange(7), 3), "x": np.tile([1, 2, 3], 7)})
    table["y"] = np.arange(21.0)
    fig = report.panels_figure(table, ["p"], "x", ["y"], "y", "seven settings")
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 7
    assert len({round(ax.get_position().y0, 3) for ax in visible}) == 2


def test_reproduce_without_matplotlib_says_once_which_extra_adds_the_figures(tmp_path):
    # A real kdd18 run, cut to two epsilons to stay fast, with matplotlib unimportable.
    code = f"""
import sys
sys.modules["matplotlib"] = None
from privtd.experiments import kdd18
real = kdd18.run
kdd18.run = lambda *a, **k: real(*a, **{{**k, "epsilons": (1.0, 0.0)}})
from privtd.cli import main
main(["reproduce", "kdd18", "--trials", "2", "--jobs", "1", "--out", {str(tmp_path)!r}])
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("pip install 'privtd[plot]'") == 1, done.stderr
    assert "privtd[plot]" not in done.stdout
    assert (tmp_path / "table.csv").exists()
    assert not list(tmp_path.glob("*.png"))
    facts = json.loads((tmp_path / "run.json").read_text())
    assert "privtd[plot]" in facts["figures"]


def test_reproduce_help_says_figures_need_the_plot_extra():
    from click.testing import CliRunner

    from privtd.cli import cli

    out = CliRunner().invoke(cli, ["reproduce", "--help"]).output
    assert "privtd[plot]" in " ".join(out.split())


def test_kdd18_summary_fits_100_columns_without_duplicate_columns():
    shown = kdd18.summary(_kdd18_table())
    text = report.markdown_table(shown)
    assert max(len(line) for line in text.splitlines()) <= 100
    values = shown.drop(columns=["mechanism", "epsilon"]).T
    assert not values.duplicated().any()
    assert len(shown) == 2 * len(kdd18.EPSILONS)


# ---------------------------------------------------------------------- privtd.plot
@pytest.fixture(scope="module")
def dog_fit(dog_answers):
    return DawidSkene().fit(dog_answers)


def test_plot_worker_quality_and_confusions(dog_fit):
    from privtd import plot

    fig = plot.worker_quality(dog_fit, top=10)
    hist, bars = fig.axes
    assert len(bars.patches) == 10
    assert sum(p.get_height() for p in hist.patches) == dog_fit.weights_.shape[0]
    assert "DawidSkene" in fig._suptitle.get_text()

    fig = plot.confusions(dog_fit, n=4, ncols=2)
    images = [ax for ax in fig.axes if ax.get_images()]
    assert len(images) == 4
    busiest = dog_fit.weights_["n_answers"].to_numpy().argmax()
    shown = images[0].get_images()[0].get_array()
    k = dog_fit.confusions_.shape[1]
    cube = dog_fit.confusions_.to_numpy().reshape(-1, k, k)  # [worker, answer, truth]
    np.testing.assert_allclose(shown, cube[busiest].T)
    # Rows are truths: each sums to one.
    np.testing.assert_allclose(np.asarray(shown).sum(axis=1), 1.0, atol=1e-6)


def test_plot_says_what_is_wrong(dog_fit, dog_answers):
    from privtd import plot
    from privtd.errors import NotFittedError, ValidationError

    with pytest.raises(ValidationError, match="confusions_"):
        plot.confusions(MajorityVote().fit(dog_answers))
    with pytest.raises(NotFittedError, match="fit"):
        plot.worker_quality(DawidSkene())
    with pytest.raises(ValidationError, match="no 'epsilon' column"):
        plot.accuracy_vs_epsilon(pd.DataFrame({"x": [1.0], "y": [2.0]}))


def test_plot_accuracy_vs_epsilon_reads_a_results_table(tmp_path):
    from privtd import plot

    path = tmp_path / "table.csv"
    _kdd18_table().to_csv(path, index=False)
    fig = plot.accuracy_vs_epsilon(path, columns=["two_layer_mv", "two_layer_td"], title="kdd18")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["two_layer_mv", "two_layer_td"]
    assert ax.get_xscale() != "linear"
    assert fig._suptitle.get_text() == "kdd18"
    every = plot.accuracy_vs_epsilon(path)
    assert len(every.axes[0].get_legend().get_texts()) == 18


def test_plot_without_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    monkeypatch.delitem(sys.modules, "privtd.plot", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'privtd\[plot\]'"):
        importlib.import_module("privtd.plot")
    monkeypatch.delitem(sys.modules, "privtd.plot", raising=False)


def test_evaluate_counts_stay_ints_in_json():
    from privtd import evaluate

    truth = pd.Series(["a", "b", "a"], index=["t1", "t2", "t3"])
    metrics = evaluate(truth.iloc[:2], truth)
    assert metrics["n_evaluated"] == 2 and metrics["n_missing"] == 1
    text = json.dumps(metrics)
    assert '"n_evaluated": 2,' in text and '"n_missing": 1,' in text
