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
