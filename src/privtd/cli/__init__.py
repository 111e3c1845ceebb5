"""The ``privtd`` command line: one module per command family, each imported only when one of
its commands runs (``_common.COMMANDS``).

Every error is one line on stderr and a non-zero exit, never a traceback; output files are
written to a temporary name and renamed, so an interrupted run leaves nothing half-written.
"""

from ._common import _fail as _fail
from ._common import _note_pooled_interval as _note_pooled_interval
from ._common import cli, main

__all__ = ["cli", "main"]
