"""The usual pictures of a fit, with matplotlib (``pip install 'privtd[plot]'``).

Each function returns a matplotlib ``Figure``, shown inline in a notebook and written with
``fig.savefig(path)``:

- :func:`worker_quality`: the workers' quality scores (``weights_``), as a histogram and as
  sorted bars of the busiest workers;
- :func:`confusions`: the confusion matrices (``confusions_``) of the busiest workers, for the
  Dawid-Skene family (docs/algorithms.md#dawid-skene);
- :func:`accuracy_vs_epsilon`: a reproduction's results table (``table.csv`` of ``privtd
  reproduce``, docs/reproduction.md) against epsilon, one line per method.

Examples
--------
>>> from privtd import datasets, plot                      # doctest: +SKIP
>>> from privtd.inference import DawidSkene                # doctest: +SKIP
>>> fit = DawidSkene().fit(datasets.load("dog").answers)   # doctest: +SKIP
>>> plot.confusions(fit, n=4).savefig("confusions.png")    # doctest: +SKIP
"""

# No ``from __future__ import annotations``: it would show up as ``privtd.plot.annotations``;
# the names only type checkers import are quoted instead.
import os as _os
import typing as _typing

try:
    import matplotlib.pyplot as _plt
except ImportError:  # the error names the extra, not just the missing module
    raise ImportError(
        "privtd.plot needs matplotlib, which the default install leaves out: "
        "pip install 'privtd[plot]'"
    ) from None

from .errors import ValidationError as _ValidationError

if _typing.TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from .inference import Estimator

__all__ = ["worker_quality", "confusions", "accuracy_vs_epsilon"]


def _fitted_name(estimator: "Estimator") -> str:
    # Reading weights_ raises NotFittedError (with what to do) on an unfitted estimator.
    estimator.weights_  # noqa: B018
    return type(estimator).__name__


def worker_quality(estimator: "Estimator", *, top: int = 30, bins: int = 20) -> "Figure":
    """The workers' quality scores (``weights_["weight"]``) of a fitted estimator: a histogram
    over every worker (left) and the ``top`` busiest workers' scores, sorted, with their answer
    counts (right).

    Parameters
    ----------
    estimator : fitted Estimator
    top : int
        How many of the busiest workers get a bar.
    bins : int
        Histogram bins.
    """
    name = _fitted_name(estimator)
    weights = estimator.weights_
    if top < 1:
        raise _ValidationError(f"top must be an int >= 1. Got {top!r}.")
    fig, (hist, bars) = _plt.subplots(1, 2, figsize=(11, 4.0), width_ratios=(1, 2))
    hist.hist(weights["weight"].dropna(), bins=bins, color="tab:blue", alpha=0.8)
    hist.set_xlabel("weight")
    hist.set_ylabel("workers")
    hist.set_title(f"all {len(weights):,} workers", fontsize=9)
    from matplotlib.ticker import MaxNLocator

    hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    busiest = weights.sort_values("n_answers", ascending=False, kind="stable").head(top)
    busiest = busiest.sort_values("weight", ascending=False, kind="stable")
    x = range(len(busiest))
    bars.bar(x, busiest["weight"], color="tab:blue")
    bars.set_xticks(
        list(x),
        [
            f"{str(w)[:10]} ({n:,})"
            for w, n in zip(busiest.index, busiest["n_answers"], strict=True)
        ],
        rotation=90,
        fontsize=7,
    )
    bars.set_xlabel("worker (answers)")
    bars.set_ylabel("weight")
    bars.set_title(f"the {len(busiest)} busiest workers, sorted by weight", fontsize=9)
    bars.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{name}: worker quality (weights_['weight'])", fontsize=10)
    fig.tight_layout()
    return fig


def confusions(estimator: "Estimator", *, n: int = 6, ncols: int = 3) -> "Figure":
    """The confusion matrices of the ``n`` busiest workers of a fitted Dawid-Skene-family
    estimator (``confusions_``), rows the true label and columns the worker's answer, each cell
    the probability of that answer given that truth.

    Parameters
    ----------
    estimator : fitted estimator with ``confusions_`` (DawidSkene, AwareDawidSkene, ...)
    n : int
        How many workers, the busiest first.
    ncols : int
        Matrices per row of the grid.
    """
    name = _fitted_name(estimator)
    matrices = vars(estimator).get("confusions_")
    if matrices is None:
        raise _ValidationError(
            f"{name} has no per-worker confusion matrices (confusions_); plot a Dawid-Skene "
            "fit (method 'ds' or 'aware-ds'), or use plot.worker_quality."
        )
    if n < 1 or ncols < 1:
        raise _ValidationError(f"n and ncols must be ints >= 1. Got n={n!r}, ncols={ncols!r}.")
    # confusions_ is a DataFrame, rows (worker, answer) and columns the truth, in the order of
    # weights_'s workers: the (workers, K, K) cube indexed [worker, answer, truth].
    cube = _np().asarray(matrices.to_numpy() if hasattr(matrices, "to_numpy") else matrices)
    cube = cube.reshape(-1, cube.shape[-1], cube.shape[-1])
    weights = estimator.weights_
    coded = estimator._answers.labels
    labels = [] if coded is None else [str(label) for label in coded]
    order = _np().argsort(-weights["n_answers"].to_numpy(), kind="stable")[:n]
    ncols = min(ncols, len(order))
    nrows = -(-len(order) // ncols)
    fig, axes = _plt.subplots(
        nrows, ncols, figsize=(3.2 * ncols + 0.8, 3.0 * nrows + 0.6), squeeze=False
    )
    image = None
    for ax, u in zip(axes.ravel(), order, strict=False):
        matrix = cube[u].T  # stored [answer, truth]; drawn truth by answer
        image = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="Blues")
        for (i, j), value in _np().ndenumerate(matrix):
            if len(labels) <= 6:  # the numbers stay legible up to 6 labels
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if value > 0.6 else "black",
                )
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel("answer", fontsize=8)
        ax.set_ylabel("truth", fontsize=8)
        worker = weights.index[u]
        ax.set_title(f"{str(worker)[:14]} ({weights['n_answers'].iloc[u]:,} answers)", fontsize=8)
    for ax in axes.ravel()[len(order) :]:
        ax.set_visible(False)
    fig.suptitle(f"{name}: confusion matrices of the {len(order)} busiest workers", fontsize=10)
    fig.tight_layout()
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="P(answer | truth)")
    return fig


def accuracy_vs_epsilon(
    table: "pd.DataFrame | str | _os.PathLike[str]",
    *,
    columns: list[str] | None = None,
    x: str = "epsilon",
    panels: list[str] | None = None,
    ylabel: str = "error-rate change",
    title: str = "",
) -> "Figure":
    """A results table against epsilon, one line per column (with ``{col}_se`` error bars
    where the table has them), one panel per value of the ``panels`` columns: the
    ``table.csv`` that ``privtd reproduce`` writes (docs/reproduction.md), or any table with an
    ``x`` column. Epsilon 0 and small values stay apart (a cube-root axis; a log one without 0).

    Parameters
    ----------
    table : DataFrame, or the path of a CSV file
    columns : list of str, optional
        The lines; default every numeric column but ``x``, the panels and the ``_se`` columns.
    x : str
        The x column.
    panels : list of str, optional
        Columns whose values split the table into panels.
    ylabel, title : str
    """
    import pandas as pd

    from .experiments.report import panels_figure

    frame = table if isinstance(table, pd.DataFrame) else pd.read_csv(table)
    if x not in frame.columns:
        raise _ValidationError(
            f"The table has no {x!r} column (found {list(frame.columns)}); pass x=..."
        )
    panels = list(panels or [])
    if columns is None:
        skip = {x, *panels}
        columns = [
            c
            for c in frame.columns
            if c not in skip
            and not str(c).endswith("_se")
            and pd.api.types.is_numeric_dtype(frame[c])
        ]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise _ValidationError(
            f"The table has no column(s) {missing}; found {list(frame.columns)}."
        )
    if not panels:
        frame = frame.assign(table="results")
        panels = ["table"]
    return panels_figure(frame, panels, x, list(columns), ylabel, title)


def _np() -> _typing.Any:
    import numpy as np

    return np
