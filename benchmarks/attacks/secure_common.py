"""What a semi-honest requester of the secure EM (``privtd.secure``) keeps, for the attacks.

A semi-honest requester runs the protocol exactly as written and keeps everything it is given:
every secure sum it is handed, with the round, the phase and the list of participants. This is
:class:`RecordingRequester`. The attacks in ``secure_dropout.py`` and ``secure_grouping.py`` work
only from what it recorded; the workers' true answers serve only to score them.

The helpers run on the code before and after the fixes (they pass the newer keyword
arguments only where :class:`~privtd.secure.Requester` takes them), so one script measures both.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import privtd
from privtd.secure import InProcessTransport, Requester, SecureEM, Worker, split_by_worker


@dataclass
class Release:
    """One secure sum handed to the requester: its rows are the original task codes ``rows``."""

    round: int
    phase: str
    participants: tuple[int, ...]
    rows: np.ndarray
    sums: np.ndarray


class RecordingRequester(Requester):
    """A requester that follows the protocol and keeps every sum it receives."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.releases: list[Release] = []

    def _secure_sums(self, round_: int, phase: str, state: np.ndarray | None) -> np.ndarray:
        sums = super()._secure_sums(round_, phase, state)
        kept = getattr(self, "kept_tasks", None)
        rows = np.arange(len(sums)) if phase == "count" or kept is None else np.asarray(kept)
        self.releases.append(Release(round_, phase, tuple(self.active), rows, sums.copy()))
        return sums


def supported(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments this version of Requester takes (the old one lacks the new ones)."""
    accepted = inspect.signature(Requester.__init__).parameters
    return {k: v for k, v in kwargs.items() if k in accepted}


def worker_supported(kwargs: dict[str, Any]) -> dict[str, Any]:
    accepted = inspect.signature(Worker.__init__).parameters
    return {k: v for k, v in kwargs.items() if k in accepted}


def binary_crowd(
    n_workers: int,
    n_tasks: int,
    p_answer: float,
    rng: np.random.Generator,
    quality: tuple[float, float] = (0.65, 0.95),
) -> tuple[privtd.Answers, np.ndarray]:
    """Binary answers: each worker answers each task with probability ``p_answer``, with its own
    sensitivity and specificity drawn from ``quality``. Tasks nobody answered are left out.
    Worker ``j`` gets the code ``j``; returns the answers and the truth per task code."""
    truth = rng.integers(0, 2, n_tasks)
    sens = rng.uniform(*quality, n_workers)
    spec = rng.uniform(*quality, n_workers)
    answered = rng.random((n_tasks, n_workers)) < p_answer
    # Every worker answers at least a few tasks, so every code 0..J-1 exists.
    answered[rng.integers(0, n_tasks, (3, n_workers)), np.arange(n_workers)] = True
    task, worker = np.nonzero(answered)
    correct = np.where(truth[task] == 1, sens[worker], spec[worker])
    label = np.where(rng.random(task.size) < correct, truth[task], 1 - truth[task])
    frame = pd.DataFrame(
        {"task": task, "worker": [f"w{j:03d}" for j in worker], "answer": label.astype(int)}
    )
    answers = privtd.Answers.from_frame(frame)
    kept = np.unique(task)
    return answers, truth[kept]


class DroppingWorker(Worker):
    """A worker whose connection fails from EM round ``at`` on (a genuine drop-out)."""

    def __init__(self, *args: Any, at: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def handle(self, frame: bytes) -> bytes:
        from privtd.secure import messages

        request = messages.decode(frame)
        if (
            request.get("type") == "round"
            and request.get("phase") == "em"
            and int(request["round"]) >= self.at
        ):
            raise ConnectionError("the worker's connection closed")
        return super().handle(frame)


@dataclass
class Run:
    """One recorded run: the requester (with its releases), the workers, and how it ended."""

    requester: RecordingRequester
    workers: list[Worker]
    error: Exception | None = None
    releases: list[Release] = field(default_factory=list)


def run_recorded(
    answers: privtd.Answers,
    *,
    drop: int | None = None,
    drop_at: int = 3,
    leave_out: int | None = None,
    substitute: int | None = None,
    histories: dict[int, Any] | None = None,
    backend: str = "masking",
    max_iter: int = 100,
    campaign: Any = None,
    **options: Any,
) -> Run:
    """Run the protocol with a recording requester. Worker ``drop`` drops out at EM round
    ``drop_at``; worker ``leave_out`` is not in the run at all (a re-run without it); worker
    ``substitute`` is replaced by a worker of the requester's own, under the same code and name,
    that answered one task (so the sums elsewhere are those without the victim).
    ``histories`` are the workers' own records of earlier runs (their devices'), kept by the
    caller across runs; where this version's Worker takes no ``history`` they are ignored.
    ``options`` go to the Requester where this version takes them (allow_leaky_rerun,
    min_answers, test_only_short_keys, key_bits...)."""
    held = split_by_worker(answers)
    worker_options = worker_supported(options)

    def own(w: int, t: np.ndarray, v: np.ndarray) -> dict[str, Any]:
        # What the worker's device holds besides its answers: its record, and its answers' real
        # task ids and labels (the record fingerprints those, not the requester's codes).
        names = {
            "history": None if histories is None else histories.get(w),
            "task_names": [str(x) for x in answers.tasks[t]],
            "value_names": [
                str(x) for x in (answers.labels[v] if answers.labels is not None else v)
            ],
        }
        return worker_supported({k: x for k, x in names.items() if x is not None})

    workers = []
    for w, (t, v) in held.items():
        if w == leave_out:
            continue
        if w == substitute:
            # One answer (a worker must hold one): only that task's difference is off.
            workers.append(Worker(w, t[:1], np.zeros_like(v[:1]), **worker_options))
        elif w == drop:
            workers.append(DroppingWorker(w, t, v, at=drop_at, **worker_options, **own(w, t, v)))
        else:
            workers.append(Worker(w, t, v, **worker_options, **own(w, t, v)))
    spec = SecureEM().spec_for(answers)
    extra = supported(
        {
            **options,
            "campaign": campaign,
            "worker_names": {int(w): str(answers.workers[w]) for w in held},
        }
    )
    requester = RecordingRequester(
        spec, InProcessTransport(workers), backend, max_iter=max_iter, **extra
    )
    run = Run(requester, workers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        try:
            requester.run()
        except privtd.errors.PrivtdError as exc:
            run.error = exc
    run.releases = requester.releases
    return run
