"""privtd's run-time settings, per thread (as scikit-learn's ``sklearn._config``).

``backend`` picks the kernels the estimators run (``privtd.inference._kernels``):

- ``"auto"`` (the default): each fit picks by its size, answers x planned passes
  (``_kernels.NUMBA_MIN_WORK``);
- ``"numba"``: numba's compiled kernels for every fit (needs numba);
- ``"numpy"``: numpy's kernels for every fit; numba is then never imported.

``PRIVTD_BACKEND`` sets the default of every thread; :func:`set_config` changes the calling
thread's setting and :func:`config_context` changes it for a ``with`` block. Light on purpose:
``privtd --help`` and ``import privtd`` read nothing heavy through it.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import ValidationError

BACKENDS = ("auto", "numpy", "numba")

#: Whether numba is installed (found, not imported: importing it takes a good part of a second).
NUMBA_INSTALLED = importlib.util.find_spec("numba") is not None


def check_backend(name: str, source: str = "The backend") -> str:
    """``name`` if it is a backend this install can run, else a ValidationError naming
    ``source`` (where the name came from)."""
    if name not in BACKENDS:
        raise ValidationError(f"{source} must be 'auto', 'numpy' or 'numba'. Got {name!r}.")
    if name == "numba" and not NUMBA_INSTALLED:
        raise ValidationError("The numba backend needs numba: pip install numba. Or use 'numpy'.")
    return name


_global_config: dict[str, Any] = {
    "backend": check_backend(
        os.environ.get("PRIVTD_BACKEND", "").strip().lower() or "auto", "PRIVTD_BACKEND"
    )
}
_threadlocal = threading.local()


def _local_config() -> dict[str, Any]:
    # Each thread starts from the process's defaults, then keeps its own changes.
    if not hasattr(_threadlocal, "config"):
        _threadlocal.config = dict(_global_config)
    config: dict[str, Any] = _threadlocal.config
    return config


def get_config() -> dict[str, Any]:
    """The calling thread's settings (a copy)."""
    return dict(_local_config())


def set_config(*, backend: str | None = None) -> None:
    """Change the calling thread's settings; None leaves a setting as it is."""
    if backend is not None:
        _local_config()["backend"] = check_backend(backend)


@contextmanager
def config_context(*, backend: str | None = None) -> Iterator[None]:
    """The settings given, in the calling thread, for the ``with`` block; restored after."""
    before = get_config()
    set_config(backend=backend)
    try:
        yield
    finally:
        set_config(**before)
