"""Short summaries of answers and fits for ``repr`` and notebooks (``_repr_html_``)."""

from __future__ import annotations

from typing import Any


def short_list(values: Any, limit: int = 8) -> str:
    """Up to ``limit`` values, then how many more: a label set can run to thousands."""
    shown = ", ".join(str(v) for v in list(values[:limit]))
    more = len(values) - limit
    return f"[{shown}, ... {more:,} more]" if more > 0 else f"[{shown}]"


def html_table(title: str, rows: list[tuple[str, str]]) -> str:
    """A small two-column HTML table (values already escaped) for ``_repr_html_``."""
    body = "".join(
        f"<tr><th style='text-align:left'>{key}</th><td style='text-align:left'>{value}</td></tr>"
        for key, value in rows
    )
    return f"<table><caption style='text-align:left'><b>{title}</b></caption>{body}</table>"
