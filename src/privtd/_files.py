"""Writing files so that an interrupted run leaves nothing half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import ValidationError


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    target = Path(path)
    folder = target.resolve().parent
    if not folder.is_dir():
        raise ValidationError(f"The folder of {str(path)!r} does not exist. Create it first.")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
