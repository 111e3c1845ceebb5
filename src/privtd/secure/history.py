"""A worker's own record of the secure runs it took part in, kept on the worker's device.

Two exact secure sums over two different sets of workers reveal their difference: the
contribution of the workers in one set and not the other. The requester's
:class:`~privtd.secure.Campaign` record stops an honest requester's mistake, but a dishonest one
simply starts a fresh run without a worker and differences the two runs' sums. Only the other
workers can stop that, and only if they remember: a :class:`WorkerHistory` is that memory.

For each run in which the worker sent a contribution, it records:

- the **participants**: the long-term public keys (X25519) of every worker of the run, its own
  included. With the masking backend these are the very keys the pairwise masks are derived from,
  so a listed worker that does not take part leaves its masks uncancelled and the sum is noise: the
  requester cannot drop a worker, or put its own worker in its place, and keep the same list;
- the **tasks** it answered (SHA-256 fingerprints of the task ids as the worker's device holds
  them, not the requester's codes), to link runs over the same tasks;
- a digest of its **answers** (task ids and labels).

A worker refuses a run, when the requester relays the participants' keys and before it sends
anything that depends on its answers, if it answered a task of an earlier run and either the
participants differ (the difference would reveal the added or missing workers' answers) or its
own answers differ (the difference would reveal its change), unless its own policy allows leaky
re-runs. What this does not stop: ``docs/secure.md``, "Drop-outs and re-runs".

The record is in memory by default (it protects runs that reuse the object: a
:class:`~privtd.secure.SecureEM` keeps one per worker across fits), or in a JSON file
(:meth:`WorkerHistory.open`), which a worker on its own device or process keeps across runs. The
file holds the worker's private identity key: it is written readable by its owner only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ProtocolError, ValidationError

KEY_BYTES = 32


@dataclass(frozen=True)
class RunRecord:
    """One run the worker contributed to: participants' keys, its task fingerprints, answers."""

    participants: frozenset[str]
    tasks: frozenset[str]
    answers: str


def fingerprints(
    task_names: Sequence[str], value_names: Sequence[str]
) -> tuple[frozenset[str], str]:
    """(task fingerprints, answers digest) of one worker's answers, by task id and label."""
    tasks = frozenset(
        hashlib.sha256(b"privtd task\0" + str(t).encode()).hexdigest()[:32] for t in task_names
    )
    digest = hashlib.sha256(b"privtd answers\0")
    for task, value in sorted(zip(map(str, task_names), map(str, value_names), strict=True)):
        digest.update(task.encode() + b"\0" + value.encode() + b"\n")
    return tasks, digest.hexdigest()


def _x25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import x25519
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "The secure protocol needs cryptography: pip install 'privtd[secure]'."
        ) from None
    return x25519


@dataclass
class WorkerHistory:
    """A worker's long-term identity key and its record of the runs it contributed to.

    Parameters
    ----------
    private_key : bytes, optional
        The worker's X25519 private key, 32 raw bytes (new and random by default). Its public
        half identifies the worker to the others in every run, and masks its contributions.
    runs : list of RunRecord
        The runs it sent a contribution to.
    path : Path, optional
        Where :meth:`save` writes the record (JSON); None keeps it in memory only.
    """

    private_key: bytes = field(default_factory=lambda: os.urandom(KEY_BYTES), repr=False)
    runs: list[RunRecord] = field(default_factory=list)
    path: Path | None = None

    def __post_init__(self) -> None:
        x25519 = _x25519()
        self._key = x25519.X25519PrivateKey.from_private_bytes(self.private_key)

    @property
    def key(self) -> Any:
        """The X25519 private key object (for the masking backend)."""
        return self._key

    @property
    def public_key(self) -> bytes:
        """The worker's long-term public key, 32 raw bytes: its identity in every run."""
        from cryptography.hazmat.primitives import serialization

        raw: bytes = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return raw

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> WorkerHistory:
        """The record kept in ``path``, or a new one (new identity) that :meth:`save` writes."""
        where = Path(path)
        if not where.exists():
            return cls(path=where)
        try:
            raw = json.loads(where.read_text())
            history = cls(
                private_key=bytes.fromhex(raw["private_key"]),
                runs=[
                    RunRecord(
                        frozenset(map(str, run["participants"])),
                        frozenset(map(str, run["tasks"])),
                        str(run["answers"]),
                    )
                    for run in raw["runs"]
                ],
                path=where,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValidationError(
                f"The worker history {str(where)!r} is not a privtd worker history ({exc}). "
                "Give the file an earlier secure run of this worker wrote; a new path starts an "
                "empty history, which no longer protects the runs the old one recorded."
            ) from None
        return history

    def save(self) -> None:
        """Write the record to its path atomically, readable by its owner only (no-op in memory)."""
        if self.path is None:
            return
        body = {
            "format": "privtd worker history 1",
            "private_key": self.private_key.hex(),
            "runs": [
                {
                    "participants": sorted(run.participants),
                    "tasks": sorted(run.tasks),
                    "answers": run.answers,
                }
                for run in self.runs
            ],
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(body) + "\n")
        tmp.replace(self.path)

    def check(
        self,
        participants: Iterable[bytes],
        tasks: frozenset[str],
        answers: str,
        allow_leaky_rerun: bool = False,
    ) -> RunRecord:
        """The record of a new run, or a ProtocolError if it is linked to an earlier run (a task
        in common) over other participants, or with other answers of this worker.

        Raises
        ------
        ProtocolError
            The refusal, saying which earlier run and what the difference would reveal.
        """
        record = RunRecord(frozenset(bytes(p).hex() for p in participants), tasks, answers)
        if allow_leaky_rerun:
            return record
        for number, run in enumerate(self.runs, start=1):
            shared = len(run.tasks & tasks)
            if not shared:
                continue
            missing = len(run.participants - record.participants)
            added = len(record.participants - run.participants)
            if missing or added:
                raise ProtocolError(
                    f"this run shares {shared} of its tasks with an earlier run (number {number} "
                    "of its history) whose workers differ from this one's "
                    f"({missing} missing, {added} added, by their long-term keys). The difference "
                    "between the two runs' sums would reveal which tasks the missing or added "
                    "workers answered and their labels (docs/secure.md, 'Drop-outs and "
                    "re-runs'). Run with exactly the earlier run's workers; a worker that accepts "
                    "that leak sets allow_leaky_rerun."
                )
            if run.answers != record.answers:
                raise ProtocolError(
                    f"this run shares {shared} of its tasks with an earlier run (number {number} "
                    "of its history) over the same workers, and its answers have changed since; "
                    "the difference between the two runs' sums would reveal the change. "
                    "Give the same answers, or set allow_leaky_rerun to accept that leak."
                )
        return record

    def record(self, run: RunRecord) -> None:
        """Note a run this worker is about to contribute to, and save the record (before it
        sends: a record lost after sending would leave that run unprotected)."""
        if run not in self.runs:
            self.runs.append(run)
        try:
            self.save()
        except OSError as exc:
            self.runs.remove(run)
            raise ProtocolError(
                f"this worker cannot save its history ({exc}) and refuses to contribute to a run "
                "it could not remember. Make its history file writable."
            ) from None
