"""Reading a CSV of answers: multi-threaded with pyarrow when it is installed, else pandas.

Both give the same table: the pyarrow path reads every cell as text and leaves each column's
type to pandas' own parser, run on the column's distinct values only, so dtypes, missing
values and labels are those ``pandas.read_csv`` gives. Any input pyarrow cannot read as
pandas would (ragged rows, duplicate or blank column names, bad encodings, ...) goes to
pandas, so bad input raises exactly the errors it always did.

One departure from pandas on both paths: a column of integers with blank cells stays integers
(pandas' nullable ``Int64``) instead of becoming floats, so integer labels ``1``/``0`` are not
read as the other labels ``1.0``/``0.0`` because one cell is blank.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

__all__ = ["read_csv"]


def read_csv(path: str, id_columns: Sequence[str], delimiter: str = ",") -> pd.DataFrame:
    """The table at ``path``, the ``id_columns`` read as text (``"007"`` is not 7), its cells
    separated by ``delimiter`` (one character: ``","``, ``"\\t"``, ``";"``)."""
    frame = _read_pyarrow(path, id_columns, delimiter)
    return _read_pandas(path, id_columns, delimiter) if frame is None else frame


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
