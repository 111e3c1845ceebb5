"""Writing an experiment's outputs: table.csv, table.md, run.json and (with the ``plot`` extra)
PNG figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def plot_panels(
    out: Path,
    table: pd.DataFrame,
    panels: list[str],
    x: str,
    columns: list[str],
    ylabel: str,
    name: str,
    logx: bool = False,
) -> Path | None:
    """One panel per distinct value of the ``panels`` columns, each with ``columns`` against
    ``x`` (with ``{col}_se`` error bars where present), as the papers lay out their figures;
    None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = list(table.groupby(panels, sort=False))
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, (key, part) in zip(axes[0], groups, strict=True):
        part = part.sort_values(x)
        for col in columns:
            if col not in part or part[col].isna().all():
                continue
            se = part.get(f"{col}_se")
            ax.errorbar(part[x], part[col], yerr=se, marker="o", ms=3, capsize=2, label=col)
        keys = key if isinstance(key, tuple) else (key,)
        ax.set_title(", ".join(f"{p}={k}" for p, k in zip(panels, keys, strict=True)), fontsize=9)
        ax.set_xlabel(x)
        if logx:
            from matplotlib.ticker import NullFormatter

            ticks = sorted(part[x].unique())
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    path = out / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
