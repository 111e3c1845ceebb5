"""Channels between the requester and the workers: in one process, or one OS process per worker.

:class:`InProcessTransport` hands frames to :class:`~privtd.secure.parties.Worker` objects in
this process (tests, simulation). :class:`SocketTransport` starts one OS process per worker;
each connects to the requester over a loopback TCP socket and serves requests until the run
ends, so the protocol runs across process boundaries with nothing shared but bytes. Frames go
with an 8-byte length prefix. Either way the transport counts the bytes in each direction.
"""

from __future__ import annotations

import multiprocessing
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ProtocolError
from . import messages
from .parties import Transport, Worker

_LENGTH = struct.Struct("<Q")


class InProcessTransport(Transport):
    """Calls each worker's ``handle`` in turn. A worker whose ``handle`` raises
    ``ConnectionError`` counts as dropped out, from then on (tests use this).

    As a simulation it times each simulated worker's ``handle`` itself (CPU time, appended to
    ``worker_seconds``, for cost reports): no worker sends its time."""

    def __init__(self, workers: list[Worker]) -> None:
        self._workers = {w.worker_id: w for w in workers}
        self.workers = sorted(self._workers)
        self._gone: set[int] = set()
        self.bytes_sent = 0
        self.bytes_received = 0
        self.worker_seconds: list[float] = []

    def call(self, requests: dict[int, bytes]) -> dict[int, bytes | None]:
        replies: dict[int, bytes | None] = {}
        for worker, frame in requests.items():
            self.bytes_sent += len(frame) + _LENGTH.size
            if worker in self._gone:
                replies[worker] = None
                continue
            started = time.process_time()
            try:
                reply = self._workers[worker].handle(bytes(frame))
            except ConnectionError:
                self._gone.add(worker)
                replies[worker] = None
                continue
            self.worker_seconds.append(time.process_time() - started)
            self.bytes_received += len(reply) + _LENGTH.size
            replies[worker] = reply
        return replies


def _send(sock: socket.socket, frame: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(frame)))
    sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        chunk = sock.recv_into(view[got:], n - got)
        if chunk == 0:
            raise ConnectionError("the peer closed the connection")
        got += chunk
    return bytes(buffer)


def _recv(sock: socket.socket) -> bytes:
    (length,) = _LENGTH.unpack(_recv_exact(sock, _LENGTH.size))
    if length > messages.MAX_FRAME:
        raise ProtocolError(
            f"A frame of {length} bytes is over the {messages.MAX_FRAME}-byte limit."
        )
    return _recv_exact(sock, length)


def serve_worker(
    address: tuple[str, int],
    worker_id: int,
    tasks: np.ndarray,
    values: np.ndarray,
    min_participants: int,
    options: dict[str, Any] | None = None,
) -> None:
    """A worker process: connect to the requester, serve its requests until ``done``.
    ``options`` are the worker's own policy (:class:`~privtd.secure.parties.Worker`)."""
    worker = Worker(worker_id, tasks, values, min_participants=min_participants, **(options or {}))
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _send(sock, messages.encode({"type": "hello", "worker": worker_id}))
        while True:
            try:
                frame = _recv(sock)
            except (ConnectionError, ProtocolError):
                return
            _send(sock, worker.handle(frame))
            if worker.result is not None:
                return


class SocketTransport(Transport):
    """One OS process per worker, each talking to the requester over loopback TCP.

    ``worker_options`` go to every worker (:class:`~privtd.secure.parties.Worker`), ``own_options``
    to one (its history file, its task ids).

    Worker processes come from a fork server that has imported privtd once, so a hundred of them
    start in seconds. A worker whose connection fails or stays silent for ``timeout`` seconds
    counts as dropped out.
    """

    def __init__(
        self,
        worker_answers: dict[int, tuple[np.ndarray, np.ndarray]],
        *,
        min_participants: int = 3,
        timeout: float = 120.0,
        target: Callable[..., None] = serve_worker,
        worker_options: dict[str, Any] | None = None,
        own_options: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.workers = sorted(worker_answers)
        self.bytes_sent = 0
        self.bytes_received = 0
        self.timeout = timeout
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=len(self.workers))
        self._listener.settimeout(timeout)
        address = self._listener.getsockname()
        context: Any = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["privtd.secure.transport"])
        self._processes = [
            context.Process(
                target=target,
                args=(
                    address,
                    w,
                    tasks,
                    values,
                    min_participants,
                    {**(worker_options or {}), **(own_options or {}).get(w, {})},
                ),
                daemon=True,
            )
            for w, (tasks, values) in worker_answers.items()
        ]
        self._socks: dict[int, socket.socket] = {}
        try:
            for process in self._processes:
                process.start()
            for _ in self._processes:
                sock, _ = self._listener.accept()
                sock.settimeout(timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                hello = messages.decode(_recv(sock))
                worker = messages.field(hello, "worker", int)
                if worker not in worker_answers or worker in self._socks:
                    sock.close()
                    raise ProtocolError(
                        f"A process connected as unknown or duplicate worker {worker}."
                    )
                self._socks[worker] = sock
        except (OSError, ProtocolError) as exc:
            self.close()
            raise ProtocolError(f"Could not start the worker processes: {exc}") from None

    @property
    def processes(self) -> list[Any]:
        return self._processes

    def call(self, requests: dict[int, bytes]) -> dict[int, bytes | None]:
        replies: dict[int, bytes | None] = {}
        # Send every request first, so that the workers compute in parallel, then collect.
        for worker, frame in requests.items():
            sock = self._socks.get(worker)
            if sock is None:
                replies[worker] = None
                continue
            try:
                _send(sock, frame)
                self.bytes_sent += len(frame) + _LENGTH.size
            except OSError:
                self._drop(worker)
                replies[worker] = None
        for worker in requests:
            if worker in replies:
                continue
            sock = self._socks[worker]
            try:
                reply = _recv(sock)
            except (OSError, ProtocolError):
                self._drop(worker)
                replies[worker] = None
                continue
            self.bytes_received += len(reply) + _LENGTH.size
            replies[worker] = reply
        return replies

    def _drop(self, worker: int) -> None:
        sock = self._socks.pop(worker, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for worker in list(self._socks):
            self._drop(worker)
        self._listener.close()
        for process in self._processes:
            if process.pid is not None:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
