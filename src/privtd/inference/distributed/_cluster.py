"""Reaching a Dask cluster: a scheduler's address, or a LocalCluster on this machine."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager, suppress
from typing import Any

from ...errors import PrivtdError, ValidationError

INSTALL = "The Dask engine needs dask.distributed: pip install 'privtd[dask]'."


def require_distributed() -> Any:
    """The ``distributed`` module, or an ImportError that names the install line."""
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL) from exc
    return distributed


#: Seconds to reach a scheduler and finish Dask's handshake with it.
CONNECT_TIMEOUT = 3.0

#: Seconds for the client to reach the LocalCluster it started.
LOCAL_CONNECT_TIMEOUT = 30.0

#: Seconds a round trip of a fit (a pass over every shard, a step of ingest, the results) may
#: go without any of its parts finishing. A stalled scheduler or worker then ends the fit with
#: an error instead of holding the process (a service run, a command) forever, while a long
#: step that keeps finishing parts (building 200 shards at 1e9 answers) goes on. The slowest
#: single part measured, one shard of 5e6 answers on 2 loaded cores, takes seconds.
PASS_TIMEOUT = 600.0

#: Memory a worker process of a local cluster takes before holding any answers (Python,
#: numpy, pandas, Dask): what caps --workers by the machine's memory.
WORKER_BASE_BYTES = 250_000_000

#: Worker processes per core a local cluster may start: more only share the cores.
WORKERS_PER_CORE = 2

_PLAIN_TCP_RISK = (
    "no authentication and no encryption: anyone who can reach this address runs code on its "
    "workers and, through the results they return, in this process"
)


def default_workers() -> int:
    """One single-threaded worker process per core (at least 1): processes rather than
    threads, so that the numpy kernels, which hold the GIL, still use every core."""
    return max(1, os.cpu_count() or 1)


def max_workers() -> int:
    """The most worker processes a local cluster may start here: two per core, and no more
    than the machine's memory holds at :data:`WORKER_BASE_BYTES` each."""
    import psutil  # a dependency of distributed

    by_memory = int(psutil.virtual_memory().total // WORKER_BASE_BYTES)
    return max(1, min(WORKERS_PER_CORE * default_workers(), by_memory))


#: The parameters of :func:`tls_security`, named together in its errors.
TLS_FILES = ("ca_file", "cert", "key")


def tls_security(ca_file: str | None, cert: str | None, key: str | None) -> Any:
    """A ``distributed.security.Security`` for a client of a ``tls://`` cluster: the
    cluster's CA certificate, and this party's certificate and private key (PEM files, as
    ``privtd cluster-certs`` writes them); None when none of the three is given. Every
    connection is then encrypted, and both ends must hold a certificate the CA signed."""
    given = {"CA certificate": ca_file, "certificate": cert, "key": key}
    if all(v is None for v in given.values()):
        return None
    if any(v is None for v in given.values()):
        raise ValidationError(
            "A tls:// cluster takes three files: its CA certificate, this client's certificate "
            "and its key (ca_file, cert, key). Pass all three.",
            param=TLS_FILES,
        )
    dist = require_distributed()
    for name, path in given.items():
        assert path is not None
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ValidationError(
                f"Cannot read the cluster's {name} {path!r}. Check the path (privtd "
                "cluster-certs makes these files)."
            )
    return dist.security.Security(
        tls_ca_file=ca_file,
        tls_client_cert=cert,
        tls_client_key=key,
        require_encryption=True,
    )


def check_scheduler(address: str, security: Any = None, allow_plain_tcp: bool = False) -> None:
    """Refuse a scheduler address privtd would reach without authentication: ``tls://`` needs
    ``security``; plain ``tcp://`` (Dask's default for an address without a scheme) needs
    ``allow_plain_tcp``, and any other scheme is refused."""
    scheme = address.split("://", 1)[0].lower() if "://" in address else "tcp"
    if scheme == "tls":
        if security is None:
            raise ValidationError(
                f"The scheduler {address!r} is tls:// and no certificates were given. Pass the "
                "cluster's CA certificate, this client's certificate and key (security="
                "tls_security(ca_file, cert, key); privtd cluster-certs makes them).",
                param=TLS_FILES,
            )
        return
    if scheme != "tcp":
        raise ValidationError(
            f"The scheduler {address!r} uses {scheme}://; privtd connects over tls:// (or, "
            "allowed explicitly, tcp://). Give a tls://HOST:PORT address."
        )
    if not allow_plain_tcp:
        raise ValidationError(
            f"The scheduler {address!r} is plain TCP, with {_PLAIN_TCP_RISK}. Run the cluster "
            "over tls:// with certificates (privtd cluster-certs; docs/scale.md), or, on a "
            "network no one else reaches, allow it (allow_plain_tcp=True).",
            param="allow_plain_tcp",
        )
    if security is not None:
        raise ValidationError(
            f"Certificates were given for the plain-TCP scheduler {address!r}, which would not "
            "use them. Give its tls:// address."
        )


def _client_class(dist: Any, pass_timeout: float) -> Any:
    """``distributed.Client`` with a deadline on its start, carrying the fit's pass timeout."""

    class Client(dist.Client):
        def start(self, **kwargs: Any) -> None:
            # Dask bounds opening the connection but not the handshake read after it: a
            # server that accepts and never answers held the client for good. Its start
            # passes keyword arguments on to ``sync``, whose callback_timeout cancels the
            # whole start at the deadline.
            try:
                super().start(callback_timeout=self._timeout, **kwargs)
            except BaseException:
                # Closed here, at once: left to the garbage collector, a client that never
                # started waits out its close and prints a traceback from ``__del__``.
                _close(self)
                raise

    Client.pass_timeout = pass_timeout
    return Client


@contextmanager
def connect(
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    memory_limit: str | int | None = None,
    *,
    security: Any = None,
    allow_plain_tcp: bool = False,
    connect_timeout: float = CONNECT_TIMEOUT,
    pass_timeout: float = PASS_TIMEOUT,
) -> Iterator[Any]:
    """A ``distributed.Client`` for the duration of a ``with`` block.

    Whoever can connect to a Dask cluster runs code on its workers and, through the results
    they return (pickles), in every client; so privtd reaches a cluster over TLS with
    certificates only, unless told otherwise in so many words (docs/scale.md, "Who may
    reach the cluster").

    Parameters
    ----------
    scheduler : str, optional
        A running scheduler's address: ``tls://HOST:PORT`` with ``security``, or
        ``tcp://HOST:PORT`` with ``allow_plain_tcp``.
    workers : int, optional
        Without a scheduler: the number of worker processes of a LocalCluster started here
        (one thread each; at most :func:`max_workers`), listening on 127.0.0.1 only, over TLS
        with a temporary certificate only this process and its workers hold, without a
        dashboard. Default: one per core.
    client : distributed.Client, optional
        Use this client as is (it is not closed on exit).
    memory_limit : str or int, optional
        For a LocalCluster: each worker's memory limit (bytes, or ``"7GB"``); past Dask's
        thresholds of it (``distributed.worker.memory.*``: 60% by default) a worker spills
        what it holds to its local disk rather than grow, pauses, and at 95% is restarted.
        Default: Dask's (the machine's memory shared among the workers).
    security : distributed.security.Security, optional
        The credentials for a ``tls://`` scheduler (:func:`tls_security`).
    allow_plain_tcp : bool
        Accept a ``tcp://`` scheduler: no authentication, no encryption; anyone who can
        reach its address runs code on the workers and in this process.
    connect_timeout : float
        Seconds to reach the scheduler and finish Dask's handshake with it.
    pass_timeout : float
        Seconds one pass of a fit (or a step of ingest) may take before the fit stops with
        an error.
    """
    if client is not None:
        if scheduler is not None or workers is not None or memory_limit is not None:
            raise ValidationError("Pass a client, or a scheduler / worker count, not both.")
        yield client
        return
    for name, value in (("connect_timeout", connect_timeout), ("pass_timeout", pass_timeout)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValidationError(f"{name} must be a number of seconds > 0. Got {value!r}.")
    dist = require_distributed()
    client_class = _client_class(dist, float(pass_timeout))
    if scheduler is not None:
        if workers is not None or memory_limit is not None:
            raise ValidationError(
                "A worker count starts a cluster on this machine; a scheduler's cluster has its "
                "own workers. Pass one of scheduler and workers.",
                param=("scheduler", "workers"),
            )
        check_scheduler(scheduler, security, allow_plain_tcp)
        try:
            remote = client_class(
                scheduler, timeout=connect_timeout, security=security, set_as_default=False
            )
        except (OSError, TimeoutError, ValueError, TypeError, dist.TimeoutError) as exc:
            if isinstance(exc, TimeoutError | dist.TimeoutError):
                reason = f"no connection and handshake within {connect_timeout:g} s"
            else:
                text = str(exc).strip()
                reason = text.splitlines()[0] if text else type(exc).__name__
            raise ValidationError(
                f"Cannot reach the Dask scheduler at {scheduler!r} ({reason}). Check the "
                "address, the certificates and that `dask scheduler` runs there, or leave out "
                "the scheduler to start a cluster on this machine.",
                param="scheduler",
            ) from None
        try:
            yield remote
        finally:
            _close(remote)
        return
    n = default_workers() if workers is None else workers
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationError(f"The number of workers must be an int >= 1. Got {workers!r}.")
    cap = max_workers()
    if n > cap:
        raise ValidationError(
            f"{n} workers is more than this machine runs: it has {default_workers()} core(s), "
            f"each worker is a process of about {WORKER_BASE_BYTES // 10**6} MB before any "
            f"answers, and more than {WORKERS_PER_CORE} per core only share the cores. Pass "
            f"workers={cap} or fewer, or a scheduler whose cluster has more machines.",
            param=("workers", "scheduler"),
        )
    cluster = dist.LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        # TLS with a certificate made for this cluster, held by this process and its workers
        # only: another local process that reaches the loopback ports is refused.
        security=True,
        dashboard_address=None,
        # No dashboard; the scheduler's small HTTP server (health, metrics) still runs, on a
        # free loopback port rather than 8787, which another cluster may hold.
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        # A task's error comes back to the client as one line; the workers' own log of it
        # (with its traceback) would only repeat it on this terminal.
        silence_logs=logging.CRITICAL,
        memory_limit="auto" if memory_limit is None else memory_limit,
    )
    try:
        # Its own scheduler, already started: only a loaded machine makes this slow.
        local = client_class(
            cluster,
            timeout=max(connect_timeout, LOCAL_CONNECT_TIMEOUT),
            security=cluster.security,
            set_as_default=False,
        )
    except BaseException:
        cluster.close()
        raise
    try:
        yield local
    finally:
        _close(local)
        cluster.close()


def _close(client: Any) -> None:
    """Close a client without waiting long on a scheduler that stopped answering."""
    with suppress(Exception):  # the fit's own outcome is what the caller reports
        client.close(timeout=CONNECT_TIMEOUT)


def gather(client: Any, futures: list[Any]) -> list[Any]:
    """``client.gather``, failing when no future finishes within the client's pass timeout,
    with a lost worker that Dask could not make up for reported in one line. Dask recomputes a
    lost shard and the passes it held from their lineage (files, then passes, all kept as task
    definitions); when that fails too (every worker lost, or a task that killed its worker
    again and again), the fit stops rather than hang or return a partial result. So does a
    step none of whose parts finishes within the timeout (a scheduler or worker that stopped
    answering); a step that keeps finishing parts goes on, however long it takes in all."""
    from distributed import wait

    timeout = float(getattr(client, "pass_timeout", PASS_TIMEOUT))
    try:
        waiting = list(futures)
        with client.as_current():  # wait's client (ours is not the process's default)
            while waiting:
                wait(waiting, timeout=timeout, return_when="FIRST_COMPLETED")
                waiting = [f for f in waiting if not f.done()]
        # Client.gather takes no timeout: this is its call, with sync's deadline.
        return list(client.sync(client._gather, futures, callback_timeout=timeout))
    except PrivtdError:
        raise
    except Exception as exc:
        if isinstance(exc, TimeoutError):
            raise PrivtdError(
                f"The Dask cluster finished no part of a step of the fit within {timeout:g} s: "
                "its scheduler or a worker stopped answering, or a part needs longer. Check "
                "the cluster, or allow more time (pass_timeout).",
                param="pass_timeout",
            ) from None
        if not (
            isinstance(exc, CancelledError | OSError)
            or type(exc).__name__ in ("KilledWorker", "CommClosedError")
        ):
            raise
        raise PrivtdError(
            f"A Dask worker died or was cut off during the fit ({type(exc).__name__}) and Dask "
            "could not recompute what it held. Check the workers' logs and memory, then run "
            "the fit again."
        ) from None
