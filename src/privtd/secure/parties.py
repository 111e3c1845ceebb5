"""The two kinds of party of P2's protocol: a :class:`Worker` and the :class:`Requester`.

They share no object and no memory: everything passes as encoded frames
(:mod:`privtd.secure.messages`) through a transport, on requester-worker channels only.

One EM iteration (SPEC B2.1):

1. the requester broadcasts the posteriors (the truths, for the real model);
2. each worker runs its own M-step on its own answers and forms its contribution to every task's
   sums, encodes it in fixed point and protects it (masks, or encrypts);
3. the requester combines the protected contributions into the sums, and only the sums;
4. the requester computes the new posteriors and the class prior, and tests for convergence.

The start is a secure sum too (votes per task, or answers and counts), so that the requester
never sees a single answer, even at the start.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from ..errors import ProtocolError, ValidationError
from . import fixed_point, messages
from .masking import MaskingAggregator, MaskingWorker
from .models import (
    AGGREGATE_MODELS,
    DEFAULT_TOL,
    LOCAL_MODELS,
    AggregateModel,
    LocalModel,
    ModelSpec,
)
from .paillier import KEY_BITS, PaillierAggregator, PaillierWorker, value_bits

BACKENDS = ("masking", "paillier")


class Worker:
    """One worker: its own answers, its half of the model and its half of the secure sum.

    ``handle`` takes one request frame and returns one reply frame; a request that breaks the
    protocol gets an ``error`` reply naming what was wrong, and changes nothing.
    """

    def __init__(
        self,
        worker_id: int,
        tasks: np.ndarray,
        values: np.ndarray,
        *,
        min_participants: int = 3,
    ) -> None:
        self.worker_id = int(worker_id)
        self.min_participants = min_participants
        self._tasks = np.asarray(tasks, dtype=np.int64)
        self._values = np.asarray(values)
        self.model: LocalModel | None = None
        self._sum: MaskingWorker | PaillierWorker | None = None
        self._fraction_bits = fixed_point.FRACTION_BITS
        self._n_parties = 0
        self.result: np.ndarray | None = None

    def handle(self, frame: bytes) -> bytes:
        # CPU time, not wall time: with one process per worker on few cores, wall time would
        # count the waits for a core as work.
        started = time.process_time()
        try:
            reply = self._dispatch(messages.decode(frame))
        except (ProtocolError, ValidationError) as exc:
            reply = {"type": "error", "reason": str(exc)}
        reply["seconds"] = time.process_time() - started
        return messages.encode(reply)

    def _dispatch(self, message: messages.Message) -> messages.Message:
        kind = messages.field(message, "type", str)
        if kind == "setup":
            return self._setup(message)
        if self.model is None or self._sum is None:
            raise ProtocolError(f"Message {kind!r} came before setup.")
        if kind == "keys":
            self._sum.set_keys(message)
            return {"type": "ok"}
        if kind == "round":
            return self._round(message, self.model, self._sum)
        if kind == "decrypt" and isinstance(self._sum, PaillierWorker):
            return {"type": "plaintexts", **self._sum.decrypt(message)}
        if kind == "done":
            # A last local M-step: the worker ends knowing its quality under the final posteriors.
            self.result = np.array(messages.field(message, "state", np.ndarray))
            self.model.update(self.result)
            return {"type": "ok"}
        raise ProtocolError(f"Unknown message type {kind!r}.")

    def _setup(self, message: messages.Message) -> messages.Message:
        spec = ModelSpec.from_message(messages.field(message, "spec", dict))
        backend = messages.field(message, "backend", str)
        self._fraction_bits = messages.field(message, "fraction_bits", int)
        self._n_parties = messages.field(message, "n_parties", int)
        if spec.max_abs > fixed_point.value_bound(self._fraction_bits, self._n_parties):
            raise ProtocolError(
                f"{self._fraction_bits} fraction bits leave too little range for "
                f"{self._n_parties} workers' sums; lower fraction_bits."
            )
        self.model = LOCAL_MODELS[spec.model](spec, self._tasks, self._values)
        if backend == "masking":
            self._sum = MaskingWorker(self.worker_id, self.min_participants)
        elif backend == "paillier":
            self._sum = PaillierWorker(self.worker_id, self.min_participants)
        else:
            raise ProtocolError(f"Unknown secure-sum backend {backend!r}.")
        return {"type": "setup_ok", **self._sum.setup(message)}

    def _round(
        self, message: messages.Message, model: LocalModel, secure: MaskingWorker | PaillierWorker
    ) -> messages.Message:
        round_ = messages.field(message, "round", int)
        attempt = messages.field(message, "attempt", int)
        participants = [int(p) for p in messages.field(message, "participants", list)]
        if self.worker_id not in participants:
            raise ProtocolError(f"Worker {self.worker_id} is not among this round's participants.")
        if messages.field(message, "phase", str) == "start":
            values = model.start()
        else:
            spec = model.spec
            shape = (spec.n_tasks, spec.n_labels) if spec.model == "multiclass" else (spec.n_tasks,)
            state = messages.array(message, "state", "float64", shape)
            if not (np.isfinite(state).all() and state.min() >= 0.0 and state.max() <= 1.0):
                raise ProtocolError("The broadcast state must be finite and in [0, 1].")
            model.update(state)
            values = model.contribution()
        codes = fixed_point.encode(values, self._fraction_bits, model.spec.max_abs * (1 + 1e-12))
        protected = secure.protect(codes, round_, attempt, participants)
        return {"type": "contribution", "round": round_, "attempt": attempt, **protected}


@dataclass
class RoundStats:
    """Cost of one round: wall time, each kind of party's compute (CPU) time, bytes each way."""

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
    fraction_bits : fixed-point fraction bits (SPEC B2.2).
    key_bits : Paillier modulus length.
    max_attempts : how often a round is retried after drop-outs before the run fails.
    min_participants : the fewest workers a round may have.
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
        self.spec = spec
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
        self.dropped: list[int] = []
        self.rounds: list[RoundStats] = []
        self._worker_seconds: list[float] = []

    def run(self) -> SecureRun:
        model = AGGREGATE_MODELS[self.spec.model](self.spec, self.tol)
        try:
            self._setup()
            start = self._secure_sums(0, "start", None)
            self._timed(lambda: model.start(start, len(self.active)))
            converged = False
            n_iter = 0
            for n_iter in range(1, self.max_iter + 1):  # noqa: B007
                sums = self._secure_sums(n_iter, "em", model.state)
                converged = bool(self._timed(partial(model.step, sums, len(self.active))))
                if converged:
                    break
            self._broadcast({"type": "done", "state": model.state})
        finally:
            self.transport.close()
        return SecureRun(
            model.state, n_iter, converged, model.objective, self.rounds, self.dropped, model
        )

    # ------------------------------------------------------------------ steps
    def _timed(self, step: Callable[[], Any]) -> Any:
        """Run the requester's own step after a round, add its time to the round, report it."""
        started = time.perf_counter()
        out = step()
        elapsed = time.perf_counter() - started
        self.rounds[-1].requester_seconds += elapsed
        self.rounds[-1].seconds += elapsed
        if self.on_round is not None:
            self.on_round(self.rounds[-1])
        return out

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
                    **self.aggregator.setup_fields(worker),
                }
            )
        replies = self._call(requests, "setup_ok")
        self._broadcast({"type": "keys", **self.aggregator.keys_message(replies)})

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
        seconds = reply.get("seconds", 0.0)
        self._worker_seconds.append(float(seconds) if isinstance(seconds, int | float) else 0.0)
        return reply

    def _secure_sums(self, round_: int, phase: str, state: np.ndarray | None) -> np.ndarray:
        n_values = self.spec.n_tasks * self.spec.n_sums
        started = time.perf_counter()
        sent, received = self.transport.bytes_sent, self.transport.bytes_received
        self._worker_seconds = []
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
            if state is not None:
                message["state"] = state
            frame = messages.encode(message)
            raw = self.transport.call({w: frame for w in self.active})
            gone = sorted(w for w, reply in raw.items() if reply is None)
            if gone:
                # Void the attempt: its masked vectors do not cancel without the missing ones.
                self.active = [w for w in self.active if w not in gone]
                self.dropped.extend(gone)
                continue
            replies = {
                w: self._reply(w, f, "contribution") for w, f in raw.items() if f is not None
            }
            for worker, reply in replies.items():
                if reply.get("round") != round_ or reply.get("attempt") != attempt:
                    raise ProtocolError(f"Worker {worker} answered for another round or attempt.")
            combine_started = time.perf_counter()
            codes = self.aggregator.combine(replies, n_values, self._decrypt)
            sums = fixed_point.decode(codes, self.fraction_bits).reshape(self.spec.n_tasks, -1)
            self.rounds.append(
                RoundStats(
                    round=round_,
                    phase=phase,
                    attempts=attempt + 1,
                    participants=len(self.active),
                    seconds=time.perf_counter() - started,
                    requester_seconds=time.perf_counter() - combine_started,
                    worker_seconds_max=max(self._worker_seconds, default=0.0),
                    worker_seconds_total=float(sum(self._worker_seconds)),
                    requester_bytes_sent=self.transport.bytes_sent - sent,
                    worker_bytes_sent=self.transport.bytes_received - received,
                )
            )
            return sums
        raise ProtocolError(
            f"Round {round_} failed {self.max_attempts} times because workers dropped out; "
            "the run stops."
        )

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
