"""The ``privtd`` command line: one module per command family.

Every error is one line on stderr and a non-zero exit, never a traceback; output files are
written to a temporary name and renamed, so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

from . import infer, privacy, reproduce, secure, service
from ._common import _fail as _fail
from ._common import _note_pooled_interval as _note_pooled_interval
from ._common import cli, main

for _command in (
    infer.infer,
    infer.evaluate_cmd,
    infer.datasets_group,
    infer.demo,
    privacy.perturb,
    privacy.audit_cmd,
    privacy.attack_cmd,
    secure.secure_em_cmd,
    reproduce.reproduce,
    privacy.epsilon_cmd,
    service.serve,
    service.requester,
    service.campaign,
    service.client,
):
    cli.add_command(_command)

__all__ = ["cli", "main"]
