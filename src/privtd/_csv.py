"""Reading and writing privtd's CSV files.

Reading a CSV of answers: multi-threaded with pyarrow when it is installed, else pandas.

Both give the same table: the pyarrow path reads every cell as text and leaves each column's
type to pandas' own parser, run on the column's distinct values only, so dtypes, missing
values and labels are those ``pandas.read_csv`` gives. Any input pyarrow cannot read as
pandas would (ragged rows, duplicate or blank column names, bad encodings, ...) goes to
pandas, so bad input raises exactly the errors it always did.

One departure from pandas on both paths: a column of integers with blank cells stays integers
(pandas' nullable ``Int64``) instead of becoming floats, so integer labels ``1``/``0`` are not
read as the other labels ``1.0``/``0.0`` because one cell is blank.

Every CSV privtd writes goes through :func:`to_csv`, which keeps ids and labels from being
run as spreadsheet formulas (CSV injection): a text cell that starts, after any single
quotes, with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, and is not a number, is
written with one more single quote in front (OWASP's rule; ``-1`` and ``-2.5e3`` stay
numbers). :func:`read_csv` undoes it, column by column, only in a column that such a writer
could have written: one where no cell starts with those characters unescaped. So privtd reads
its own files back exactly, and a user's file that holds ``=x`` unescaped is read as it is
(docs/formats.md#spreadsheet-safe-csv).
"""

from __future__ import annotations

import csv
import io
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

__all__ = ["read_csv", "to_csv", "escape_text", "unescape_text"]


def read_csv(path: str, id_columns: Sequence[str], delimiter: str = ",") -> pd.DataFrame:
    """The table at ``path``, the ``id_columns`` read as text (``"007"`` is not 7), its cells
    separated by ``delimiter`` (one character: ``","``, ``"\\t"``, ``";"``), with
    :func:`to_csv`'s escape undone (see the module's docstring)."""
    frame = _read_pyarrow(path, id_columns, delimiter)
    frame = _read_pandas(path, id_columns, delimiter) if frame is None else frame
    return unescape_frame(frame)


#: What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A number as a spreadsheet reads one: it stays as it is.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def escape_text(value: str) -> str:
    """``value`` as privtd writes it to a CSV: with a single quote in front when, after any
    single quotes it already has, it starts a formula and is not a number."""
    if value.lstrip("'").startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def unescape_text(value: str) -> str:
    """The inverse of :func:`escape_text` on what it writes; other text is returned as is."""
    if value.startswith("'") and escape_text(value[1:]) == value:
        return value[1:]
    return value


def _candidates(values: pd.Series) -> Any:
    """A boolean mask of the text cells that start with a quote or a formula character: the
    only ones escaping can change (rare, so the exact rule runs on them alone)."""
    import numpy as np
    import pandas as pd

    starts = ("'", *_FORMULA_START)
    if pd.api.types.is_string_dtype(values.dtype) and values.dtype != object:
        return values.str.startswith(starts).fillna(False).to_numpy(dtype=bool)
    if values.dtype != object:
        return np.zeros(len(values), dtype=bool)  # numbers, booleans, dates: never formulas
    return np.fromiter(
        (isinstance(v, str) and v.startswith(starts) for v in values),
        dtype=bool,
        count=len(values),
    )


def _escape_values(values: Any) -> Any:
    """A Series or Index with its text cells escaped (:func:`escape_text`)."""
    import pandas as pd

    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=values.dtype)
    if isinstance(series.dtype, pd.CategoricalDtype):
        escaped = _escape_values(series.cat.categories)
        series = series.cat.rename_categories(escaped)
    else:
        mask = _candidates(series)
        if mask.any():
            series = series.copy()
            series[mask] = [escape_text(v) for v in series[mask]]
    if isinstance(values, pd.Series):
        return series
    return pd.Index(series, name=values.name)


def to_csv(table: pd.DataFrame | pd.Series, **kwargs: Any) -> str:
    """``table.to_csv(**kwargs)`` with every text cell, index label and column name escaped
    against spreadsheet formulas (the module's docstring); ``kwargs`` as pandas takes them."""
    import pandas as pd

    frame = table.to_frame() if isinstance(table, pd.Series) else table
    escaped = pd.DataFrame(
        {i: _escape_values(frame.iloc[:, i]) for i in range(frame.shape[1])},
        index=frame.index,
    )
    escaped.columns = _escape_names(frame.columns)
    if kwargs.get("index", True):
        escaped.index = _escape_names(frame.index)
    if _has_carriage_return(escaped, kwargs.get("index", True)):
        # pandas quotes a cell with a newline but not one with a lone carriage return, which
        # readers then take for the end of the row: quote every text cell instead.
        kwargs.setdefault("quoting", csv.QUOTE_NONNUMERIC)
    return escaped.to_csv(**kwargs)


def _has_carriage_return(frame: pd.DataFrame, index: bool) -> bool:
    import pandas as pd

    names = [frame.columns, *([frame.index] if index else [])]
    parts: list[pd.Series] = [
        pd.Series(n.to_flat_index() if isinstance(n, pd.MultiIndex) else n) for n in names
    ]
    parts += [frame.iloc[:, i] for i in range(frame.shape[1])]
    for part in parts:
        if part.dtype == object:
            part = part.astype(str)
        elif not pd.api.types.is_string_dtype(part.dtype):
            continue  # numbers, booleans, dates: no text
        if part.str.contains("\r", regex=False).any():
            return True
    return False


def _escape_names(index: pd.Index) -> pd.Index:
    import pandas as pd

    if isinstance(index, pd.MultiIndex):
        return index.set_levels([_escape_values(level) for level in index.levels])
    out = _escape_values(index)
    out.name = escape_text(index.name) if isinstance(index.name, str) else index.name
    return out


def unescape_values(values: pd.Series) -> pd.Series:
    """``values`` with :func:`to_csv`'s escape undone, when every text cell in it is one
    :func:`escape_text` could have written; else unchanged (the file is not privtd's own, or
    not escaped: an ``=x`` cell is read as it is, and so is every ``'=x`` beside it)."""
    mask = _candidates(values)
    if not mask.any():
        return values
    texts = [v for v in values[mask]]
    plain = [unescape_text(v) for v in texts]
    if any(escape_text(p) != t for p, t in zip(plain, texts, strict=True)):
        return values
    values = values.copy()
    values[mask] = plain
    return values


def unescape_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`unescape_values` on each column and on the column names."""
    import pandas as pd

    columns = {}
    changed = False
    for i in range(frame.shape[1]):
        column = frame.iloc[:, i]
        plain = unescape_values(column)
        changed = changed or plain is not column
        columns[i] = plain
    names = unescape_values(pd.Series(list(frame.columns), dtype=object))
    if not changed and names.tolist() == list(frame.columns):
        return frame
    out = pd.DataFrame(columns, index=frame.index)
    out.columns = pd.Index(names.tolist())
    return out


def _read_pandas(path: str, id_columns: Sequence[str], delimiter: str = ",") -> pd.DataFrame:
    import pandas as pd

    frame = pd.read_csv(
        path, sep=delimiter, dtype=dict.fromkeys(id_columns, str), keep_default_na=True
    )
    # Only float columns with blanks and whole values can be integers made floats by a blank:
    # read just those again as text to tell "1" from "1.0".
    suspects = [
        name for name in frame.columns if name not in id_columns and _blank_whole(frame[name])
    ]
    if suspects:
        raw = pd.read_csv(path, sep=delimiter, usecols=suspects, dtype=str, keep_default_na=True)
        for name in suspects:
            if _all_integer_text(raw[name].dropna()):
                frame[name] = frame[name].astype("Int64")
    return frame


def _blank_whole(series: Any) -> bool:
    """A float column with missing cells whose other values are all whole numbers."""
    import numpy as np
    import pandas as pd

    if not pd.api.types.is_float_dtype(series.dtype):
        return False
    values = series.to_numpy(dtype=np.float64)
    present = values[~np.isnan(values)]
    return bool(
        present.size < values.size
        and present.size > 0
        and np.all(np.abs(present) < 2.0**53)  # exact as int64 and as float64
        and np.all(present == np.floor(present))
    )


def _all_integer_text(texts: Any) -> bool:
    return bool(texts.str.fullmatch(r"\s*[+-]?\d+\s*").all())


def _read_pyarrow(
    path: str, id_columns: Sequence[str], delimiter: str = ","
) -> pd.DataFrame | None:
    """The table as :func:`_read_pandas` gives it, or None when pyarrow is missing or the file
    is anything but a plain rectangular CSV (pandas then reads it and reports what is wrong)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pacsv
    except ImportError:
        return None
    import pandas as pd
    from pandas._libs.parsers import STR_NA_VALUES

    try:
        # Every cell as text, the header as the first row (the names are not known before);
        # pyarrow's own missing-value handling is off: pandas' rules are applied below.
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(autogenerate_column_names=True),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={f"f{i}": pa.string() for i in range(_MAX_COLUMNS)}
            ),
        )
    except Exception:  # noqa: BLE001 - anything pyarrow refuses, pandas reads or reports
        return None
    if table.num_rows < 2 or table.num_columns > _MAX_COLUMNS:
        return None  # empty tables and wide ones: rare, and pandas' rules for them are its own
    names = [column[0].as_py() for column in table.columns]
    if None in names or "" in names or len(set(names)) < len(names):
        return None  # pandas renames these ("Unnamed: 0", "a.1"): let it
    table = table.slice(1)
    missing = pa.array(sorted(STR_NA_VALUES), pa.string())
    ids = set(id_columns)
    columns: dict[str, Any] = {}
    for name, column in zip(names, table.columns, strict=True):
        column = column.combine_chunks()
        if name in ids:
            na = pc.is_in(column, value_set=missing)
            if pc.any(na).as_py():
                column = pc.if_else(na, pa.scalar(None, pa.string()), column)
            columns[name] = _text_column(column, pd)
        else:
            columns[name] = _parsed_column(column, pc, pd)
    return pd.DataFrame(columns)


#: Columns the pyarrow path reads; wider files go to pandas.
_MAX_COLUMNS = 256


def _text_column(column: Any, pd: Any) -> Any:
    # What read_csv(dtype=str) gives: pandas' text dtype, missing cells NaN.
    series = pd.Series(column.to_pandas())
    if series.dtype == object:  # pandas 2 without its pyarrow-backed str: None -> NaN
        series = series.where(series.notna(), float("nan"))
    return series.astype(pd.Series([""], dtype=str).dtype)


def _parsed_column(column: Any, pc: Any, pd: Any) -> Any:
    """Parse a text column as pandas would, by running pandas' parser (missing-value tokens
    included) on its distinct values and spreading the result back by the dictionary codes."""
    import numpy as np

    encoded = pc.dictionary_encode(column)
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(["v"])
    writer.writerows([v] for v in encoded.dictionary.to_pylist())
    parsed = pd.read_csv(io.StringIO(buffer.getvalue()), keep_default_na=True)["v"]
    if _blank_whole(parsed) and _all_integer_text(
        pd.Series(encoded.dictionary.to_pylist(), dtype=object)[parsed.notna().to_numpy()]
    ):
        parsed = parsed.astype("Int64")  # integers with blank cells (see the module docstring)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False)
    return pd.Series(parsed.array.take(codes))
