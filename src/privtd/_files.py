"""Writing files so that an interrupted run leaves nothing half-written."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import ValidationError


def _umask() -> int:
    """The process's umask. Linux shows it in /proc; elsewhere it is read by setting it and
    putting it back (a moment in which another thread's new file would get 022)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str, *, private: bool = False) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    The file gets the permissions a plain ``open(path, "w")`` would give it: an existing
    file's own, else ``0o666`` less the umask (``mkstemp`` alone makes every file 0600).
    ``private`` files (a worker's token, enrolment codes) are 0600 whatever the umask.
    """
    target = Path(path)
    folder = target.resolve().parent
    if not folder.is_dir():
        raise ValidationError(f"The folder of {str(path)!r} does not exist. Create it first.")
    try:
        existing = target.stat()
    except OSError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        # /dev/null, /dev/stdout, a named pipe: write into it; renaming over it would replace
        # the device (as root) or fail.
        with open(target, "w", newline="") as handle:
            handle.write(text)
        return target
    if private:
        mode = 0o600
    elif existing is not None:
        mode = stat.S_IMODE(existing.st_mode)
    else:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


#: Spreadsheet workbooks, by name: answers come as CSV, TSV or Parquet.
_SPREADSHEET_SUFFIXES = (".xlsx", ".xlsm", ".xltx", ".xls", ".xlsb", ".ods")
#: The first bytes of an old Excel workbook (an OLE compound file).
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def refuse_spreadsheet(path: str | Path) -> None:
    """ValidationError, one line, if ``path`` is a spreadsheet workbook (Excel, OpenDocument),
    by its name or by its first bytes: read as text it gives a parse error or, worse, a table
    of garbage that looks like answers."""
    name = str(path)
    spreadsheet = name.lower().endswith(_SPREADSHEET_SUFFIXES)
    if not spreadsheet:
        try:
            with open(name, "rb") as handle:
                head = handle.read(2048)
        except OSError:
            return  # the reader says what is wrong with the path
        # A zip whose first entry is an Office Open XML or OpenDocument part list.
        spreadsheet = head.startswith(_OLE_MAGIC) or (
            head.startswith(b"PK\x03\x04")
            and (b"[Content_Types].xml" in head or b"opendocument.spreadsheet" in head)
        )
    if spreadsheet:
        raise ValidationError(
            f"{name!r} is a spreadsheet workbook: Excel files are not read; save as CSV "
            "(in Excel: File > Save As > CSV UTF-8) and pass the .csv file."
        )
