"""The two kinds of party of P2's protocol: a :class:`Worker` and the :class:`Requester`.

They share no object and no memory: everything passes as encoded frames
(:mod:`privtd.secure.messages`) through a transport, on requester-worker channels only.

One EM iteration (docs/algorithms.md#secure-protocol):

1. with masking, the requester forwards every worker's masked contribution of the last round,
   each with its sender's tags, to every worker, which checks the tags, adds them and computes
   the posteriors (the truths, for the real model) itself; with Paillier, which workers cannot
   verify, the requester broadcasts the posteriors it computed;
2. each worker runs its own M-step on its own answers and forms its contribution to every task's
   sums, encodes it in fixed point and protects it (masks and tags, or encrypts);
3. the requester combines the protected contributions into the sums, and only the sums;
4. the requester computes the new posteriors and the class prior, and tests for convergence.

The requester's loop is privtd's one EM loop, :func:`~privtd.inference._em.run_em`, on the
requester's half of the model (:mod:`privtd.secure.models`) with :class:`SecureSum` as its
executor: each call is one round, steps 1 to 3; step 4 is the model's M-step and stopping rule.

Before EM, a first secure sum counts the answers per task; tasks with fewer than
``min_answers`` answers are left out of every later sum (their sums would be one or two workers'
own terms); each worker refuses a ``min_answers`` under its own floor and, with masking, draws
the list of kept tasks itself from the counts it verified. The start is a secure sum too (votes
per task, or answers and counts), so that the requester never sees a single answer, even at the
start.

A worker that drops out ends the run: a sum over fewer workers, set against the earlier sums,
would reveal the missing worker's contribution (:class:`DropoutError`). Retrying without it
needs ``allow_leaky_rerun``. Across runs, each worker's own record
(:class:`~privtd.secure.history.WorkerHistory`) refuses a run that shares its tasks with an
earlier one but not its workers or its answers.
"""

from __future__ import annotations

import hashlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ..errors import DropoutError, ProtocolError, ValidationError
from ..inference._em import Step, run_em
from . import fixed_point, messages
from .campaign import Campaign
from .history import KEY_BYTES, RunRecord, WorkerHistory, fingerprints
from .masking import MaskingAggregator, MaskingWorker
from .models import (
    AGGREGATE_MODELS,
    DEFAULT_TOL,
    LOCAL_MODELS,
    AggregateModel,
    LocalModel,
    ModelSpec,
    local_start,
    local_step,
)
from .paillier import KEY_BITS, PaillierAggregator, PaillierWorker, value_bits

BACKENDS = ("masking", "paillier")
#: The round phase that runs each of a model's per-part steps on the workers: the wire carries
#: the phase's name, and each worker runs the step it names on its own answers.
PHASES: dict[str, Step] = {"start": local_start, "em": local_step}
#: Tasks with fewer answers than this are left out of every secure sum by default.
MIN_ANSWERS = 3


def check_min_answers(min_answers: object) -> int:
    """``min_answers`` as an int >= 2, or a ValidationError saying why."""
    if isinstance(min_answers, bool) or not isinstance(min_answers, int | np.integer):
        raise ValidationError(f"min_answers must be an integer >= 2. Got {min_answers!r}.")
    if min_answers < 2:
        raise ValidationError(
            f"min_answers must be at least 2. Got {min_answers}: a task answered by one worker "
            "has that worker's own terms as its secure sums, which would expose the worker. "
            "Use 2 or more.",
            param="min_answers",
        )
    return int(min_answers)


class Worker:
    """One worker: its own answers, its half of the model and its half of the secure sum.

    ``handle`` takes one request frame and returns one reply frame; a request that breaks the
    protocol gets an ``error`` reply naming what was wrong, and changes nothing.

    The worker's own policy: it refuses rounds with fewer than ``min_participants`` workers,
    rounds over another set of workers than at setup (unless ``allow_leaky_rerun``: a sum over
    fewer workers reveals the missing ones' answers), a run whose ``min_answers`` is under its
    own ``min_answers`` (default 3, at least 2), and Paillier keys under 2048 bits (unless
    ``test_only_short_keys``, for tests: such keys can be factored).

    With masking it never computes on a state it cannot check: it verifies every round's sums
    (one masked vector from every participant, each bearing its sender's tag, added by
    itself), computes the kept
    tasks, the start and every posterior from them itself, and refuses a request that carries a
    state of the requester's. With Paillier it cannot verify the sums and takes the kept tasks'
    counts and the posteriors the requester broadcasts: that backend is for a semi-honest
    requester only (docs/secure.md, "Known limits"). No timing or other side value leaves it.

    Across runs it keeps ``history``, its own record of the runs it contributed to
    (:class:`~privtd.secure.history.WorkerHistory`: an object, kept by the caller across runs,
    or a path to a JSON file; a new in-memory one by default, which protects only runs that reuse
    this object). It refuses a run that shares a task with an earlier run but not its workers
    (by their long-term keys) or not its own answers, before it sends anything that depends on
    its answers, unless ``allow_leaky_rerun``. ``task_names`` and ``value_names`` are its
    answers' task ids and labels as its device holds them (the record fingerprints those; the
    codes by default, which the requester assigns).
    """

    def __init__(
        self,
        worker_id: int,
        tasks: np.ndarray,
        values: np.ndarray,
        *,
        min_participants: int = 3,
        min_answers: int = MIN_ANSWERS,
        allow_leaky_rerun: bool = False,
        test_only_short_keys: bool = False,
        history: WorkerHistory | str | os.PathLike[str] | None = None,
        task_names: Sequence[str] | None = None,
        value_names: Sequence[str] | None = None,
    ) -> None:
        self.worker_id = int(worker_id)
        if history is None:
            history = WorkerHistory()
        elif not isinstance(history, WorkerHistory):
            history = WorkerHistory.open(history)
        self.history = history
        names = [str(t) for t in (task_names if task_names is not None else tasks)]
        labels = [str(v) for v in (value_names if value_names is not None else values)]
        if len(names) != len(tasks) or len(labels) != len(values):
            raise ValidationError(
                f"task_names and value_names must name each of the worker's {len(tasks)} "
                f"answers; got {len(names)} and {len(labels)}."
            )
        self._fingerprints = fingerprints(names, labels)
        self._pending: RunRecord | None = None
        self._recorded = False
        self.min_participants = min_participants
        self.min_answers = check_min_answers(min_answers)
        self.allow_leaky_rerun = allow_leaky_rerun
        self.test_only_short_keys = test_only_short_keys
        self._setup_participants: list[int] = []
        self._spec: ModelSpec | None = None
        self._kept = False
        self._tasks = np.asarray(tasks, dtype=np.int64)
        self._values = np.asarray(values)
        self.model: LocalModel | None = None
        self._sum: MaskingWorker | PaillierWorker | None = None
        self._fraction_bits = fixed_point.FRACTION_BITS
        self._n_parties = 0
        self.result: np.ndarray | None = None
        self._request_digest = b""
        self._run_digest = b""
        self._keep_digest = b""
        self._run_min_answers = self.min_answers
        #: The tasks kept in this run (drawn by the worker itself from the counts).
        self.kept_tasks: np.ndarray | None = None
        # With masking: the worker's own half of the requester's model, fed verified sums only.
        self._aggregate: AggregateModel | None = None
        self._last_round: tuple[str, int] | None = None  # the last round it contributed to
        self._last_participants: list[int] = []
        self._state_round: tuple[str, int] | None = None  # the round ``_state`` is for
        self._state: np.ndarray | None = None

    def handle(self, frame: bytes) -> bytes:
        try:
            message = messages.decode(frame)
            # A round's masks are bound to the request as received (MaskingWorker.protect). The
            # forwarded contributions are left out of the digest, not to hash them twice: they
            # are bound by their own tags, which admit one set per round.
            self._request_digest = hashlib.sha256(
                messages.encode({k: v for k, v in message.items() if not k.startswith("forward_")})
            ).digest()
            reply = self._dispatch(message)
        except (ProtocolError, ValidationError) as exc:
            reply = {"type": "error", "reason": str(exc)}
        return messages.encode(reply)

    @property
    def verifies(self) -> bool:
        """Whether this worker checks its sums and computes its posteriors itself (masking)."""
        return isinstance(self._sum, MaskingWorker)

    def _dispatch(self, message: messages.Message) -> messages.Message:
        kind = messages.field(message, "type", str)
        if kind == "setup":
            return self._setup(message)
        if self.model is None or self._sum is None:
            raise ProtocolError(f"Message {kind!r} came before setup.")
        if kind == "keys":
            self._pending = None
            self._sum.set_keys(message)
            self._pending = self._check_history(message)
            # The relayed keys are bound into every later mask: a worker relayed other keys than
            # the rest gets sums that do not cancel.
            self._run_digest = hashlib.sha256(self._run_digest + self._request_digest).digest()
            return {"type": "ok"}
        if kind == "keep":
            return self._keep(message)
        if kind == "round":
            return self._round(message, self.model, self._sum)
        if kind == "decrypt" and isinstance(self._sum, PaillierWorker):
            return {"type": "plaintexts", **self._sum.decrypt(message)}
        if kind == "done":
            # A last local M-step: the worker ends knowing its quality under the final posteriors.
            if self.verifies:
                self._refuse_state(message)
                self.result = self._verified_state("done", message)
            else:
                self.result = np.array(self._broadcast_state(message))
            self.model.update(self.result)
            return {"type": "ok"}
        raise ProtocolError(f"Unknown message type {kind!r}.")

    def _setup(self, message: messages.Message) -> messages.Message:
        spec = ModelSpec.from_message(messages.field(message, "spec", dict))
        backend = messages.field(message, "backend", str)
        self._fraction_bits = messages.field(message, "fraction_bits", int)
        self._n_parties = messages.field(message, "n_parties", int)
        announced = messages.field(message, "min_answers", int)
        if announced < self.min_answers:
            raise ProtocolError(
                f"Worker {self.worker_id} refuses a run with min_answers={announced}: its own "
                f"floor is {self.min_answers}, and the sums of a task with fewer answers are "
                "those few workers' own terms."
            )
        self._run_min_answers = announced
        if spec.max_abs > fixed_point.value_bound(self._fraction_bits, self._n_parties):
            raise ProtocolError(
                f"{self._fraction_bits} fraction bits leave too little range for "
                f"{self._n_parties} workers' sums; lower fraction_bits."
            )
        self._setup_participants = sorted(
            int(p) for p in messages.field(message, "participants", list)
        )
        self._spec = spec
        self.model = LOCAL_MODELS[spec.model](spec, self._tasks, self._values)
        self._kept = False
        self._pending = None
        self._recorded = False
        self._keep_digest = b""
        self._aggregate = None
        self._last_round = self._state_round = None
        self._state = None
        # The whole public description, as this worker received it, is bound into every mask.
        self._run_digest = self._request_digest
        if backend == "masking":
            self._sum = MaskingWorker(
                self.worker_id, self.min_participants, private_key=self.history.key
            )
        elif backend == "paillier":
            self._sum = PaillierWorker(
                self.worker_id,
                self.min_participants,
                test_only_short_keys=self.test_only_short_keys,
            )
        else:
            raise ProtocolError(f"Unknown secure-sum backend {backend!r}.")
        return {"type": "setup_ok", "identity": self.history.public_key, **self._sum.setup(message)}

    def _check_history(self, message: messages.Message) -> RunRecord:
        """This run's record, once its participants' long-term keys are known; a refusal if an
        earlier run of this worker's history forbids it."""
        owners = [int(o) for o in messages.field(message, "identity_owners", list)]
        keys = messages.field(message, "identities", np.ndarray)
        if keys.dtype != np.uint8 or keys.shape != (len(owners), KEY_BYTES):
            raise ProtocolError(f"Expected {len(owners)} identity keys of {KEY_BYTES} bytes each.")
        if sorted(owners) != self._setup_participants:
            raise ProtocolError("The identity keys relayed are not those of the setup's workers.")
        raw = [k.tobytes() for k in keys]
        if len(set(raw)) != len(raw):
            raise ProtocolError("Two workers were relayed with the same identity key.")
        if raw[owners.index(self.worker_id)] != self.history.public_key:
            raise ProtocolError("The identity key relayed for this worker is not its own.")
        if isinstance(self._sum, MaskingWorker):
            # The masks are derived from these very keys: the list recorded is the list masked
            # with, so a listed worker that is not there leaves the sum uncancelled noise.
            masking = messages.field(message, "public_keys", np.ndarray)
            order = [int(o) for o in messages.field(message, "key_owners", list)]
            if order != owners or not np.array_equal(masking, keys):
                raise ProtocolError("The masking keys relayed differ from the identity keys.")
        tasks, answers = self._fingerprints
        return self.history.check(raw, tasks, answers, self.allow_leaky_rerun)

    def _keep(self, message: messages.Message) -> messages.Message:
        """Keep only the tasks with enough answers: the model is rebuilt on them alone."""
        spec = self._spec
        assert spec is not None
        if self._kept:
            raise ProtocolError(
                "The kept tasks were already set; a second list would let the requester "
                "difference this worker's contributions over two sets of tasks."
            )
        if self._last_round != ("count", 0):
            raise ProtocolError("The kept tasks came before this worker's count contribution.")
        if self.verifies:
            self._refuse_state(message)
            counts = self._verified_sums(message, spec.n_tasks, 1)[:, 0]
        else:
            counts = messages.array(message, "counts", "int64", (spec.n_tasks,)).astype(float)
        AggregateModel._check(counts, 0.0, float(self._n_parties), "count")  # noqa: SLF001
        if not np.allclose(counts, np.rint(counts)):
            raise ProtocolError("The answer counts summed to non-integers; the run stops.")
        # The worker draws the list itself, from the counts and the min_answers it accepted.
        keep = np.flatnonzero(np.rint(counts) >= self._run_min_answers).astype(np.int64)
        if keep.size == 0:
            raise ProtocolError(
                f"No task has at least min_answers={self._run_min_answers} answers."
            )
        position = np.full(spec.n_tasks, -1, dtype=np.int64)
        position[keep] = np.arange(keep.size)
        mine = position[self._tasks] >= 0
        self.model = LOCAL_MODELS[spec.model](
            replace(spec, n_tasks=int(keep.size)),
            position[self._tasks[mine]],
            self._values[mine],
            allow_empty=True,
        )
        self._kept = True
        self.kept_tasks = keep
        self._aggregate = AGGREGATE_MODELS[spec.model](self.model.spec, DEFAULT_TOL[spec.model])
        # Bound into every later round's masks with the round's request: workers told other
        # counts than the rest get masks that do not cancel.
        self._keep_digest = self._request_digest
        return {"type": "ok"}

    def _refuse_state(self, message: messages.Message) -> None:
        for name in ("state", "counts", "tasks"):
            if name in message:
                raise ProtocolError(
                    f"Worker {self.worker_id} refuses a {name!r} sent by the requester: it "
                    "computes the kept tasks and the posteriors itself, from sums it verified, "
                    "and computes on no state it cannot check."
                )

    def _verified_sums(self, message: messages.Message, n_rows: int, n_cols: int) -> np.ndarray:
        """The sums of the round this worker last contributed to, verified (masking)."""
        assert isinstance(self._sum, MaskingWorker)
        codes = self._sum.verified_sum(message)
        if codes.size != n_rows * n_cols:
            raise ProtocolError(
                f"The forwarded contributions hold {codes.size} values, not {n_rows * n_cols}."
            )
        return fixed_point.decode(codes, self._fraction_bits).reshape(n_rows, n_cols)

    def _verified_state(self, phase: str, message: messages.Message) -> np.ndarray:
        """The posteriors this worker computes itself from the last round's verified sums: the
        start state after the start round, the next EM state after an EM round."""
        aggregate, last = self._aggregate, self._last_round
        if aggregate is None or last is None or last[0] not in ("start", "em"):
            raise ProtocolError(f"A {phase!r} request came before the start round.")
        sums = self._verified_sums(message, aggregate.spec.n_tasks, aggregate.spec.n_sums)
        aggregate.check(last[0], sums, len(self._last_participants))
        if last[0] == "start":
            return np.array(aggregate.init(sums))
        return np.array(aggregate.m_step(sums))

    def _broadcast_state(self, message: messages.Message) -> np.ndarray:
        """The posteriors as the requester sent them (Paillier: the worker cannot check them)."""
        assert self.model is not None
        spec = self.model.spec
        shape = (spec.n_tasks, spec.n_labels) if spec.per_class else (spec.n_tasks,)
        state = messages.array(message, "state", "float64", shape)
        if not (np.isfinite(state).all() and state.min() >= 0.0 and state.max() <= 1.0):
            raise ProtocolError("The broadcast state must be finite and in [0, 1].")
        return state

    def _round(
        self, message: messages.Message, model: LocalModel, secure: MaskingWorker | PaillierWorker
    ) -> messages.Message:
        round_ = messages.field(message, "round", int)
        attempt = messages.field(message, "attempt", int)
        participants = [int(p) for p in messages.field(message, "participants", list)]
        if self.worker_id not in participants:
            raise ProtocolError(f"Worker {self.worker_id} is not among this round's participants.")
        if sorted(participants) != self._setup_participants and not self.allow_leaky_rerun:
            raise ProtocolError(
                f"Worker {self.worker_id} refuses round {round_}: its workers differ from those "
                "at setup, and a sum over another set of workers, set against the earlier sums, "
                "would reveal the missing workers' answers. This worker did not allow leaky "
                "re-runs."
            )
        if self._pending is None:
            raise ProtocolError("A round came before the workers' keys were relayed.")
        if self.verifies:
            self._refuse_state(message)
        if not self._recorded:
            # Recorded (and saved) before the first contribution leaves: a worker that sent
            # something for a run always has that run on record.
            self.history.record(self._pending)
            self._recorded = True
        phase = messages.field(message, "phase", str)
        if phase == "count":
            values = model.answered()
        elif not self._kept:
            raise ProtocolError(f"A {phase!r} round came before the kept tasks were set.")
        elif phase == "start":
            if self._last_round != ("count", 0) and self._last_round != ("start", 0):
                raise ProtocolError("The start round comes once, right after the count round.")
            values = PHASES[phase](model, None, None)[1]
        elif phase == "em":
            if not self.verifies:
                state = self._broadcast_state(message)
            elif self._state_round == ("em", round_):
                # A retry of this round (allow_leaky_rerun): the same state, already checked.
                assert self._state is not None
                state = self._state
            elif self._last_round in (("start", 0), ("em", round_ - 1)):
                state = self._verified_state(phase, message)
            else:
                raise ProtocolError(
                    f"EM round {round_} does not follow the last round this worker took part "
                    f"in, {self._last_round}."
                )
            self._state_round, self._state = ("em", round_), state
            values = PHASES[phase](model, None, state)[1]
        else:
            raise ProtocolError(f"Unknown round phase {phase!r}.")
        codes = fixed_point.encode(values, self._fraction_bits, model.spec.max_abs * (1 + 1e-12))
        protected = secure.protect(
            codes,
            round_,
            attempt,
            participants,
            phase=1 if phase == "count" else 0,
            context=hashlib.sha256(
                self._run_digest + self._keep_digest + self._request_digest
            ).digest(),
        )
        self._last_round = (phase, round_)
        self._last_participants = participants
        return {"type": "contribution", "round": round_, "attempt": attempt, **protected}


@dataclass
class RoundStats:
    """Cost of one round: wall time, each kind of party's compute (CPU) time, bytes each way.

    No worker reports its time: ``worker_seconds_*`` are measured by an in-process simulation
    around each simulated worker (:class:`~privtd.secure.transport.InProcessTransport`), and
    NaN where the workers run elsewhere."""

    round: int
    phase: str
    attempts: int
    participants: int
    seconds: float
    requester_seconds: float
    worker_seconds_max: float
    worker_seconds_total: float
    requester_bytes_sent: int
    worker_bytes_sent: int


class Transport(ABC):
    """Requester-side channels to the workers; each call sends one frame per worker and
    returns each worker's reply frame, or None for a worker that dropped out."""

    workers: list[int]
    bytes_sent: int
    bytes_received: int

    @abstractmethod
    def call(self, requests: dict[int, bytes]) -> dict[int, bytes | None]:
        """One frame to each worker; each reply frame, or None for a worker that dropped out."""

    def close(self) -> None:  # noqa: B027 - optional: in-process channels hold nothing
        """Release the channels."""


@dataclass
class SecureRun:
    """What the requester ends with (and all it ever held, apart from the sums)."""

    state: np.ndarray
    n_iter: int
    converged: bool
    objective: list[float]
    rounds: list[RoundStats]
    dropped: list[int]
    model: AggregateModel
    counts: np.ndarray
    kept_tasks: np.ndarray

    def rounds_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rounds])


class Requester:
    """Drives the protocol over a transport; sees public parameters, sums and nothing else.

    Parameters
    ----------
    spec : ModelSpec
    transport : Transport
    backend : {"masking", "paillier"}
    tol, max_iter : the plain estimator's stopping rule (see :mod:`privtd.secure.models`).
    fraction_bits : fixed-point fraction bits (docs/algorithms.md#fixed-point-encoding).
    key_bits : Paillier modulus length; under 2048 bits only with ``test_only_short_keys``.
    max_attempts : how often a round is retried after drop-outs (with ``allow_leaky_rerun``).
    min_participants : the fewest workers a round may have.
    min_answers : tasks with fewer answers (counted by a first secure sum) are left out of every
        later sum, so that no released sum is one worker's own terms; at least 2. Sent to every
        worker at setup: a worker refuses a run under its own floor.
    allow_leaky_rerun : retry a round without a worker that dropped out, and run over another set
        of workers than an earlier run of ``campaign``. Either releases sums over two sets of
        workers, whose difference reveals the missing workers' answers. Off by default: a
        drop-out raises :class:`DropoutError`.
    campaign : the record of earlier runs (see :class:`~privtd.secure.campaign.Campaign`).
    worker_names : each worker code's id, for messages and the campaign record.
    test_only_short_keys : accept Paillier keys under 2048 bits (tests only: they can be
        factored, which reveals every worker's contribution).
    on_round : called with each round's :class:`RoundStats` (progress reports).
    """

    def __init__(
        self,
        spec: ModelSpec,
        transport: Transport,
        backend: str = "masking",
        *,
        tol: float | None = None,
        max_iter: int = 500,
        fraction_bits: int = fixed_point.FRACTION_BITS,
        key_bits: int = KEY_BITS,
        max_attempts: int = 3,
        min_participants: int = 3,
        min_answers: int = MIN_ANSWERS,
        allow_leaky_rerun: bool = False,
        campaign: Campaign | None = None,
        worker_names: Mapping[int, str] | None = None,
        test_only_short_keys: bool = False,
        on_round: Callable[[RoundStats], None] | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValidationError(
                f"Unknown backend {backend!r}. Choose one of {', '.join(BACKENDS)}."
            )
        if len(transport.workers) < min_participants:
            raise ValidationError(
                f"The secure protocol needs at least {min_participants} workers; got "
                f"{len(transport.workers)}. With fewer, the sums would reveal each worker's "
                "answers."
            )
        if not 8 <= fraction_bits <= 56 or spec.max_abs > fixed_point.value_bound(
            fraction_bits, len(transport.workers)
        ):
            raise ValidationError(
                f"fraction_bits={fraction_bits} does not fit: it must be in [8, 56] and leave room "
                f"for sums of {len(transport.workers)} contributions up to {spec.max_abs:.3g}."
            )
        if backend == "paillier" and key_bits < KEY_BITS and not test_only_short_keys:
            raise ValidationError(
                f"A {key_bits}-bit Paillier key can be factored, which would reveal every "
                f"worker's contribution; privtd refuses keys under {KEY_BITS} bits (NIST SP "
                f"800-57). Use key_bits >= {KEY_BITS}; shorter keys are for tests only "
                "(test_only_short_keys=True).",
                param="key_bits",
            )
        self.min_answers = check_min_answers(min_answers)
        self.allow_leaky_rerun = allow_leaky_rerun
        self.campaign = campaign
        self.worker_names = dict(worker_names or {})
        self.spec = spec
        self.kept_spec = spec
        self.kept_tasks = np.arange(spec.n_tasks)
        self.counts = np.zeros(spec.n_tasks, dtype=np.int64)
        self.transport = transport
        self.backend = backend
        self.tol = DEFAULT_TOL[spec.model] if tol is None else tol
        self.max_iter = max_iter
        self.fraction_bits = fraction_bits
        self.max_attempts = max_attempts
        self.min_participants = min_participants
        self.on_round = on_round
        self.aggregator: MaskingAggregator | PaillierAggregator = (
            MaskingAggregator()
            if backend == "masking"
            else PaillierAggregator(key_bits, value_bits(fraction_bits, spec.max_abs))
        )
        self.active = sorted(transport.workers)
        #: Every worker that had a part in a sum handed to the requester.
        self.released_with: set[int] = set()
        self.dropped: list[int] = []
        self.rounds: list[RoundStats] = []

    def _name(self, worker: int) -> str:
        return self.worker_names.get(worker, str(worker))

    def run(self) -> SecureRun:
        if self.campaign is not None:
            self.campaign.check(map(self._name, self.active), self.allow_leaky_rerun)
        try:
            self._setup()
            model = self._count()
            rounds = SecureSum(self, model)
            fit = run_em(model, rounds, self.max_iter)
            rounds.settle()
            self._broadcast({"type": "done", **self._shared(state=model.state)})
        finally:
            self.transport.close()
            if self.campaign is not None and self.released_with:
                self.campaign.record(map(self._name, sorted(self.released_with)))
        return SecureRun(
            model.state,
            fit.n_iter,
            fit.converged,
            fit.objective if model.records_objective else [],
            self.rounds,
            self.dropped,
            model,
            self.counts,
            self.kept_tasks,
        )

    # ------------------------------------------------------------------ steps
    def _count(self) -> AggregateModel:
        """The first secure sum, of answered-indicators: keep the tasks with enough answers."""
        sums = self._secure_sums(0, "count", None)[:, 0]
        AggregateModel._check(sums, 0.0, float(len(self.active)), "count")  # noqa: SLF001
        counts = np.rint(sums)
        if not np.allclose(sums, counts):
            raise ProtocolError(
                "The answer counts summed to non-integers; a count contribution was altered."
            )
        self.counts = counts.astype(np.int64)
        self.kept_tasks = np.flatnonzero(self.counts >= self.min_answers).astype(np.int64)
        if self.kept_tasks.size == 0:
            raise ValidationError(
                f"No task has at least min_answers={self.min_answers} answers (the most is "
                f"{int(self.counts.max())}): every secure sum would expose one or two workers' "
                "own terms, so nothing is inferred. Collect more answers per task, or lower "
                "min_answers (at least 2)."
            )
        self.kept_spec = replace(self.spec, n_tasks=int(self.kept_tasks.size))
        # Each worker draws the same list from the counts: with masking, from the count round's
        # tagged contributions, which it verifies and adds itself.
        self._broadcast({"type": "keep", **self._shared(counts=self.counts)})
        return AGGREGATE_MODELS[self.spec.model](self.kept_spec, self.tol)

    def _setup(self) -> None:
        requests = {}
        for worker in self.active:
            requests[worker] = messages.encode(
                {
                    "type": "setup",
                    "spec": self.spec.to_message(),
                    "backend": self.backend,
                    "fraction_bits": self.fraction_bits,
                    "n_parties": len(self.active),
                    "participants": self.active,
                    "min_answers": self.min_answers,
                    **self.aggregator.setup_fields(worker),
                }
            )
        replies = self._call(requests, "setup_ok")
        owners = sorted(replies)
        identities = np.zeros((len(owners), KEY_BYTES), dtype=np.uint8)
        for row, owner in enumerate(owners):
            raw = messages.field(replies[owner], "identity", bytes)
            if len(raw) != KEY_BYTES:
                raise ProtocolError(
                    f"Worker {owner} sent an identity key of {len(raw)} bytes, not {KEY_BYTES}."
                )
            identities[row] = np.frombuffer(raw, dtype=np.uint8)
        # Every worker's long-term key goes to every worker: each checks the list against the
        # runs it took part in before (privtd.secure.history).
        self._broadcast(
            {
                "type": "keys",
                "identity_owners": owners,
                "identities": identities,
                **self.aggregator.keys_message(replies),
            }
        )

    def _shared(self, **computed: np.ndarray) -> messages.Message:
        """What the workers compute the next step from: with masking, the last round's tagged
        masked vectors (each worker verifies and adds them, and computes the counts or the
        posteriors itself); with Paillier, which they cannot verify, what the requester
        computed (``computed``)."""
        if isinstance(self.aggregator, MaskingAggregator):
            return self.aggregator.forward()
        return computed

    def _broadcast(self, message: messages.Message) -> dict[int, messages.Message]:
        frame = messages.encode(message)
        return self._call({w: frame for w in self.active}, "ok")

    def _call(self, requests: dict[int, bytes], expect: str) -> dict[int, messages.Message]:
        raw = self.transport.call(requests)
        gone = [w for w, frame in raw.items() if frame is None]
        if gone:
            raise ProtocolError(f"Worker(s) {gone} dropped out during {expect!r}; the run stops.")
        return {w: self._reply(w, frame, expect) for w, frame in raw.items() if frame is not None}

    def _reply(self, worker: int, frame: bytes, expect: str) -> messages.Message:
        try:
            reply = messages.decode(frame)
            kind = messages.field(reply, "type", str)
        except ProtocolError as exc:
            raise ProtocolError(f"Worker {worker} sent a malformed reply: {exc}") from None
        if kind == "error":
            raise ProtocolError(f"Worker {worker} refused: {reply.get('reason', '?')}")
        if kind != expect:
            raise ProtocolError(f"Worker {worker} replied {kind!r} where {expect!r} was expected.")
        return reply

    def _secure_sums(self, round_: int, phase: str, state: np.ndarray | None) -> np.ndarray:
        """One round: the workers' contributions of ``phase`` combined into their sums, and only
        the sums (with masking, ``state`` is not sent: each worker computes it from the last
        round's verified sums)."""
        if phase == "count":
            n_rows, n_cols = self.spec.n_tasks, 1
        else:
            n_rows, n_cols = self.kept_spec.n_tasks, self.kept_spec.n_sums
        n_values = n_rows * n_cols
        started = time.perf_counter()
        sent, received = self.transport.bytes_sent, self.transport.bytes_received
        timed = getattr(self.transport, "worker_seconds", None)
        if timed is not None:
            timed.clear()
        for attempt in range(self.max_attempts):
            if len(self.active) < self.min_participants:
                raise ProtocolError(
                    f"Only {len(self.active)} worker(s) remain after drop-outs; the protocol "
                    f"needs at least {self.min_participants}. The run stops."
                )
            message: messages.Message = {
                "type": "round",
                "round": round_,
                "attempt": attempt,
                "phase": phase,
                "participants": self.active,
            }
            if phase == "em":
                assert state is not None
                message.update(self._shared(state=state))
            frame = messages.encode(message)
            raw = self.transport.call({w: frame for w in self.active})
            gone = sorted(w for w, reply in raw.items() if reply is None)
            if gone:
                # Void the attempt: its masked vectors do not cancel without the missing ones.
                self.active = [w for w in self.active if w not in gone]
                self.dropped.extend(gone)
                if not self.allow_leaky_rerun:
                    raise DropoutError(
                        self._dropout_message(gone, round_, phase),
                        param="allow_leaky_rerun" if self.released_with else None,
                    )
                continue
            replies = {
                w: self._reply(w, f, "contribution") for w, f in raw.items() if f is not None
            }
            for worker, reply in replies.items():
                if reply.get("round") != round_ or reply.get("attempt") != attempt:
                    raise ProtocolError(f"Worker {worker} answered for another round or attempt.")
            combine_started = time.perf_counter()
            codes = self.aggregator.combine(replies, n_values, self._decrypt)
            sums = fixed_point.decode(codes, self.fraction_bits).reshape(n_rows, n_cols)
            self.released_with.update(self.active)
            self.rounds.append(
                RoundStats(
                    round=round_,
                    phase=phase,
                    attempts=attempt + 1,
                    participants=len(self.active),
                    seconds=time.perf_counter() - started,
                    requester_seconds=time.perf_counter() - combine_started,
                    worker_seconds_max=max(timed, default=np.nan) if timed else np.nan,
                    worker_seconds_total=float(sum(timed)) if timed else np.nan,
                    requester_bytes_sent=self.transport.bytes_sent - sent,
                    worker_bytes_sent=self.transport.bytes_received - received,
                )
            )
            return sums
        raise ProtocolError(
            f"Round {round_} failed {self.max_attempts} times because workers dropped out; "
            "the run stops."
        )

    def _dropout_message(self, gone: list[int], round_: int, phase: str) -> str:
        names = ", ".join(repr(self._name(w)) for w in gone[:5]) + (
            f" and {len(gone) - 5} more" if len(gone) > 5 else ""
        )
        if not self.released_with:
            after = (
                "No sum had been released in this run, so a re-run without them reveals "
                "nothing of theirs here; but the other workers had already sent their count "
                "contributions, and their own records (which cannot tell that no sum was made) "
                "will refuse a re-run without them. Re-run with them back."
            )
        else:
            after = (
                "A sum over the workers that remain, set against the sums already released, "
                "would reveal which tasks the missing worker(s) answered and their labels "
                "(docs/secure.md, 'Drop-outs and re-runs'), so none was released. Re-run with "
                "every worker back; a re-run without them reveals the same and needs "
                "allow_leaky_rerun=True."
            )
        return f"Worker(s) {names} dropped out in {phase} round {round_}; the run stops. {after}"

    def _decrypt(self, message: messages.Message) -> messages.Message:
        holder = getattr(self.aggregator, "key_holder", None)
        if holder is None or holder not in self.active:
            raise ProtocolError(
                "The Paillier key holder has dropped out; the sums cannot be decrypted."
            )
        raw = self.transport.call({holder: messages.encode(message)})
        frame = raw.get(holder)
        if frame is None:
            raise ProtocolError("The Paillier key holder dropped out during decryption.")
        return self._reply(holder, frame, "plaintexts")


class SecureSum:
    """The executor of :func:`~privtd.inference._em.run_em` over the protocol: ``run`` is one
    secure-sum round.

    The parts are the workers and the step is named by its phase (:data:`PHASES`): the round
    asks every worker to run it on its own answers, with the parameters (the posteriors) sent
    only with Paillier (with masking each worker computes them itself from the last round's
    verified sums); the requester combines the protected contributions into the per-task sums,
    checks they are in the model's range, and returns them, which is all it learns. Each
    round's cost record also counts the requester's own step that follows it (the model's
    M-step and stopping test, run between two calls), reported to ``on_round`` once done.
    """

    #: The per-task state stays with the workers: nothing here to set back (the secure
    #: models run no SQUAREM), and no gold truths among the parts.
    outs: Any = None
    has_gold = False

    def __init__(self, requester: Requester, model: AggregateModel) -> None:
        self.requester = requester
        self.model = model
        self.n_em = 0
        self._since: float | None = None  # when the last round's sums came back

    def run(self, fn: Step, params: Any = None) -> np.ndarray:
        phase = next((name for name, step in PHASES.items() if step is fn), None)
        if phase is None:
            raise ValidationError(
                f"The secure sum runs only the protocol's phases ({', '.join(PHASES)}); "
                f"{getattr(fn, '__name__', fn)!r} is not one of them."
            )
        self.settle()
        if phase == "em":
            self.n_em += 1
        round_ = self.n_em if phase == "em" else 0
        requester = self.requester
        sums = requester._secure_sums(  # noqa: SLF001
            round_, phase, params if phase == "em" else None
        )
        self._since = time.perf_counter()
        self.model.check(phase, sums, len(requester.active))
        return sums

    def settle(self) -> None:
        """Add the requester's step since the last round to that round's cost; report it."""
        if self._since is None:
            return
        elapsed = time.perf_counter() - self._since
        self._since = None
        last = self.requester.rounds[-1]
        last.requester_seconds += elapsed
        last.seconds += elapsed
        if self.requester.on_round is not None:
            self.requester.on_round(last)
