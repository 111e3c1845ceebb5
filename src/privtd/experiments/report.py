"""Writing an experiment's outputs: table.csv, table.md, run.json and (with the ``plot`` extra)
PNG figures."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._files import atomic_write_text


def markdown_table(table: pd.DataFrame, digits: int = 4) -> str:
    """A pipe table, values with ``digits`` decimals (no optional dependency needed)."""
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        cells = [f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(
    out: Path, table: pd.DataFrame, facts: dict[str, Any], title: str, stem: str = "table"
) -> list[Path]:
    """``{stem}.csv``, ``{stem}.md`` and ``run.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (
        (f"{stem}.csv", table.to_csv(index=False)),
        (f"{stem}.md", f"# {title}\n\n" + markdown_table(table)),
        ("run.json", json.dumps(facts, indent=2, default=str) + "\n"),
    ):
        atomic_write_text(out / name, text)
        written.append(out / name)
    return written


PLOT_HINT = "figures need matplotlib: pip install 'privtd[plot]'"

# Series drawn in one panel take turns through these, so a line lying exactly on another still
# shows its markers (and the legend says which one it repeats).
_MARKERS = ("o", "s", "^", "v", "D", "x", "P", "*")
_LINESTYLES = ("-", "--", "-.", ":")


def have_matplotlib() -> bool:
    """Whether the ``plot`` extra is installed (the figures are skipped without it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def use_agg() -> None:
    """Draw on the Agg backend: files only, never a window (the reproductions write PNGs; a
    notebook calling :mod:`privtd.plot` keeps its own backend)."""
    import matplotlib

    matplotlib.use("Agg")


def pyplot() -> Any:
    """matplotlib's pyplot, or an ImportError that names the extra to install."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"privtd's {PLOT_HINT}") from None
    return plt


def set_x_scale(ax: Any, values: Any, log: bool | None = None) -> None:
    """Readable x ticks for ``values``, each value its own tick when they span decades: a log
    scale, or, when 0 is among them (epsilon 0), a cube-root scale, which keeps 0, 0.001 and
    0.01 apart without crowding 0.1 to 1 as a log scale would; whole-number ticks on an
    integer axis. ``log``: force the log scale (True) or the linear one (False)."""
    from matplotlib.ticker import MaxNLocator, NullFormatter, NullLocator

    ticks = sorted({float(v) for v in values if v == v})
    positive = [t for t in ticks if t > 0]
    integer = all(float(t).is_integer() for t in ticks)
    spread = len(positive) >= 4 and positive[-1] / positive[0] >= 20
    if log is not None:
        spread = log and len(positive) == len(ticks)
    if spread and min(ticks) >= 0:
        if ticks[0] == 0:
            ax.set_xscale("function", functions=(np.cbrt, lambda v: np.power(v, 3)))
            ax.set_xlabel(f"{ax.get_xlabel()} (cube-root scale)")
        else:
            ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], rotation=90 if len(ticks) > 8 else 0)
    elif integer:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def panels_figure(
    table: pd.DataFrame,
    panels: list[str],
    x: str,
    columns: list[str],
    ylabel: str,
    title: str = "",
    logy: bool = False,
    logx: bool | None = None,
) -> Any:
    """One panel per distinct value of the ``panels`` columns, each with ``columns`` against
    ``x`` (with ``{col}_se`` error bars where present), as the papers lay out their figures,
    under the suptitle ``title`` (dataset, mechanism, trials); ``logy``: a log y axis;
    ``logx``: force a log x axis or a linear one (None: see :func:`set_x_scale`). A series
    that lies on an earlier one (within half a percent of the panel's range) is drawn with
    open markers and says so in the legend. Returns the matplotlib Figure; an ImportError
    naming the ``plot`` extra without matplotlib."""
    plt = pyplot()
    groups = list(table.groupby(panels, sort=False))
    # At most four panels a row, so that seven settings do not shrink to slivers.
    ncols = min(4, len(groups))
    nrows = -(-len(groups) // ncols)
    width = 4.2 if ncols > 1 else 6.4
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, 3.8 * nrows + 0.4), squeeze=False
    )
    for ax in axes.ravel()[len(groups) :]:
        ax.set_visible(False)
    for ax, (key, part) in zip(axes.ravel(), groups, strict=False):
        part = part.sort_values(x)
        shown = [c for c in columns if c in part and not part[c].isna().all()]

        def on_axis(v: Any) -> Any:  # where a value lands on the y axis, for "lies on"
            v = np.asarray(v, dtype=float)
            return np.log10(np.where(v > 0, v, np.nan)) if logy else v

        span = np.nanmax(on_axis(part[shown])) - np.nanmin(on_axis(part[shown]))
        drawn: dict[str, Any] = {}
        for i, col in enumerate(columns):
            if col not in part or part[col].isna().all():
                continue
            values = part[col].to_numpy(dtype=float)
            same = next(
                (
                    name
                    for name, v in drawn.items()
                    if np.nanmax(np.abs(on_axis(v) - on_axis(values)), initial=0.0) <= 0.005 * span
                ),
                None,
            )
            label = col if same is None else f"{col} (lies on {same})"
            drawn[col] = values
            se = part.get(f"{col}_se")
            ax.errorbar(
                part[x],
                values,
                yerr=se,
                marker=_MARKERS[i % len(_MARKERS)],
                linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                ms=4 if same is None else 7,
                mfc="none" if same is not None else None,
                capsize=2,
                label=label,
            )
        keys = key if isinstance(key, tuple) else (key,)
        ax.set_title(", ".join(f"{p}={k}" for p, k in zip(panels, keys, strict=True)), fontsize=9)
        ax.set_xlabel(x)
        set_x_scale(ax, part[x], logx)
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel(ylabel)
    if title:
        # Wrapped to the figure's width (about 12 characters an inch at this font size).
        fig.suptitle(textwrap.fill(title, int(width * ncols * 12)), fontsize=10)
    fig.tight_layout()
    return fig


def save(fig: Any, out: Path, name: str) -> Path:
    """Write ``fig`` as ``out/name`` (PNG, 120 dpi) and free it."""
    import matplotlib.pyplot as plt

    path = out / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_panels(
    out: Path,
    table: pd.DataFrame,
    panels: list[str],
    x: str,
    columns: list[str],
    ylabel: str,
    name: str,
    title: str = "",
    logy: bool = False,
    logx: bool | None = None,
) -> Path | None:
    """:func:`panels_figure` written to ``out/name``; None without matplotlib or rows."""
    if not have_matplotlib() or table.empty:
        return None
    use_agg()
    return save(panels_figure(table, panels, x, columns, ylabel, title, logy, logx), out, name)
