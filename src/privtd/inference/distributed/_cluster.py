"""Reaching a Dask cluster: a scheduler's address, or a LocalCluster on this machine."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager
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


def default_workers() -> int:
    """One single-threaded worker process per core (at least 1): processes rather than
    threads, so that the numpy kernels, which hold the GIL, still use every core."""
    return max(1, os.cpu_count() or 1)


@contextmanager
def connect(
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    memory_limit: str | int | None = None,
) -> Iterator[Any]:
    """A ``distributed.Client`` for the duration of a ``with`` block.

    Parameters
    ----------
    scheduler : str, optional
        A running scheduler's address (``tcp://HOST:PORT``, from ``dask scheduler``).
    workers : int, optional
        Without a scheduler: the number of worker processes of a LocalCluster started here
        (one thread each), listening on 127.0.0.1 only and without a dashboard. Default: one
        per core.
    client : distributed.Client, optional
        Use this client as is (it is not closed on exit).
    memory_limit : str or int, optional
        For a LocalCluster: each worker's memory limit (bytes, or ``"7GB"``); past Dask's
        thresholds of it (``distributed.worker.memory.*``: 60% by default) a worker spills
        what it holds to its local disk rather than grow, pauses, and at 95% is restarted.
        Default: Dask's (the machine's memory shared among the workers).
    """
    if client is not None:
        if scheduler is not None or workers is not None or memory_limit is not None:
            raise ValidationError("Pass a client, or a scheduler / worker count, not both.")
        yield client
        return
    dist = require_distributed()
    if scheduler is not None:
        if workers is not None or memory_limit is not None:
            raise ValidationError(
                "--workers starts a cluster on this machine; a scheduler's cluster has its own "
                "workers. Pass one of --scheduler and --workers."
            )
        try:
            remote = dist.Client(scheduler, timeout="3s", set_as_default=False)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValidationError(
                f"Cannot reach the Dask scheduler at {scheduler!r} ({reason}). Check the address "
                "and that `dask scheduler` runs there, or leave out --scheduler to start a "
                "cluster on this machine."
            ) from None
        try:
            yield remote
        finally:
            remote.close()
        return
    n = default_workers() if workers is None else workers
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationError(f"The number of workers must be an int >= 1. Got {workers!r}.")
    cluster = dist.LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # No dashboard; the scheduler's small HTTP server (health, metrics) still runs, on a
        # free loopback port rather than 8787, which another cluster may hold.
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.ERROR,
        memory_limit="auto" if memory_limit is None else memory_limit,
    )
    local = dist.Client(cluster, set_as_default=False)
    try:
        yield local
    finally:
        local.close()
        cluster.close()


def gather(client: Any, futures: list[Any]) -> list[Any]:
    """``client.gather``, with a lost worker that Dask could not make up for reported in one
    line. Dask recomputes a lost shard and the passes it held from their lineage (files, then
    passes, all kept as task definitions); when that fails too (every worker lost, or a task
    that killed its worker again and again), the fit stops rather than hang or return a
    partial result."""
    try:
        return list(client.gather(futures))
    except PrivtdError:
        raise
    except Exception as exc:
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
