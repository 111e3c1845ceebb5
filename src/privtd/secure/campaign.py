"""The requester's record of who took part in each run of one campaign.

Any two exact secure sums over two different sets of workers reveal their difference: the
contribution of the workers in one set and not the other (which tasks they answered, and their
labels, once EM is near its fixed point). Within a run, privtd never releases such a pair unless
asked (a drop-out ends the run). Across runs, a :class:`Campaign` remembers, for every earlier
run that released at least one sum, which workers took part, and refuses a run over another set
of workers unless the caller accepts the leak (``allow_leaky_rerun``). See ``docs/secure.md``,
"Drop-outs and re-runs".

The record protects only the runs that share it: a :class:`~privtd.secure.SecureEM` keeps one per
object, ``privtd secure-em --campaign FILE`` keeps one in a JSON file. A requester that starts a
fresh record (or deletes the file) is not stopped by it: the record is a guard against mistakes by
an honest requester. What stops a dishonest one is the workers' own record of their runs
(:class:`~privtd.secure.history.WorkerHistory`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ValidationError


@dataclass
class Campaign:
    """Runs of one campaign: for each run that released a sum, the ids of its workers.

    Parameters
    ----------
    id : str
        A name for the campaign in messages (random by default).
    runs : list of frozenset of str
        The workers of each earlier run that released at least one secure sum.
    path : Path, optional
        Where :meth:`save` writes the record (JSON).
    """

    id: str = field(default_factory=lambda: secrets.token_hex(6))
    runs: list[frozenset[str]] = field(default_factory=list)
    path: Path | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Campaign:
        """The campaign recorded in ``path``, or a new one that :meth:`save` will write there."""
        where = Path(path)
        if not where.exists():
            return cls(path=where)
        try:
            raw = json.loads(where.read_text())
            return cls(
                id=str(raw["campaign"]),
                runs=[frozenset(str(w) for w in run) for run in raw["runs"]],
                path=where,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValidationError(
                f"The campaign record {str(where)!r} is not a privtd campaign file ({exc}). "
                "Give the file an earlier secure-em run wrote, or a new path."
            ) from None

    def save(self) -> None:
        """Write the record to its path, atomically (no-op without a path)."""
        if self.path is None:
            return
        body = {"campaign": self.id, "runs": [sorted(run) for run in self.runs]}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        tmp.replace(self.path)

    def check(self, workers: Iterable[str], allow_leaky_rerun: bool = False) -> None:
        """Refuse a run over another set of workers than an earlier run's, unless allowed.

        Raises
        ------
        ValidationError
            The run leaves out workers of an earlier run (its sums, against that run's, would
            reveal their answers) or adds workers (the difference reveals the new workers').
        """
        if allow_leaky_rerun:
            return
        now = frozenset(str(w) for w in workers)
        for run in self.runs:
            missing, added = sorted(run - now), sorted(now - run)
            if missing:
                raise ValidationError(
                    f"This run leaves out {_few(missing)}, who took part in an earlier run of "
                    f"campaign {self.id}: the difference between that run's secure sums and "
                    "this one's would reveal which tasks they answered and their labels "
                    "(docs/secure.md, 'Drop-outs and re-runs'). Run again with every worker of "
                    "the earlier run, or accept that leak with allow_leaky_rerun=True.",
                    param="allow_leaky_rerun",
                )
            if added:
                raise ValidationError(
                    f"This run adds {_few(added)} to the workers of an earlier run of campaign "
                    f"{self.id}: the difference between that run's secure sums and this one's "
                    "would reveal the added workers' answers (docs/secure.md, 'Drop-outs and "
                    "re-runs'). Run with the earlier run's workers only, or accept that leak "
                    "with allow_leaky_rerun=True.",
                    param="allow_leaky_rerun",
                )

    def record(self, workers: Iterable[str]) -> None:
        """Note a run that released at least one secure sum with these workers in it."""
        run = frozenset(str(w) for w in workers)
        if run and run not in self.runs:
            self.runs.append(run)


def _few(workers: list[str]) -> str:
    shown = ", ".join(repr(w) for w in workers[:5])
    more = f" and {len(workers) - 5} more" if len(workers) > 5 else ""
    return f"worker{'s' if len(workers) > 1 else ''} {shown}{more}"
