"""A Dask scheduler that accepts connections and never answers: how long privtd waits on it.

    python benchmarks/attacks/attack_dask_stall.py                            # this tree
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_dask_stall.py  # another

A plain socket on 127.0.0.1 accepts every connection and stays silent (anyone who can
answer on the scheduler's address, or a scheduler that hangs, does the same). One JSON line:

- ``infer_seconds``: ``privtd infer --engine dask --scheduler`` pointed at it, until it exits
  (killed at 60 s), with its exit status and the number of stderr lines; over ``tcp://``
  and, where privtd has cluster certificates, over ``tls://`` with them.
- ``service``: ``privtd serve --dask-scheduler`` pointed at it: the run's status after up to
  30 s, whether its reports file is still on disk then, and whether another requester's
  in-memory run finished meanwhile (one runner thread served every run before the fix).

Before the fix `privtd infer` waited past 60 s (Dask bounds opening the connection but not
the handshake after it), the service run stayed "running" with its reports file on disk, and
the other requester's run never started. After, infer exits within the 3 s connect timeout
with one line, the run fails as fast and removes its file, and the other run is done.
tests/test_distributed.py holds the same attacks as tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd

TOKENS = ["stall-requester-one-token-0123456789ab", "stall-requester-two-token-0123456789ab"]


def silent_port() -> int:
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    return int(server.getsockname()[1])


def new_privtd() -> bool:
    import privtd.inference.distributed as distributed

    return hasattr(distributed, "check_scheduler")


def probe_infer(port: int, folder: Path) -> dict[str, Any]:
    import privtd

    src = str(Path(privtd.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    data = folder / "answers.parquet"
    pd.DataFrame({"task": ["a", "b"], "worker": ["x", "y"], "answer": [0, 1]}).to_parquet(data)
    # The heavy imports before the clock starts: "command_seconds" is the command's own wait,
    # "process_seconds" adds Python's start-up (long on a loaded machine).
    timed = (
        "import sys, time, distributed, pandas, privtd.cli.infer, privtd.inference.distributed\n"
        "from privtd.cli import main\n"
        "t = time.monotonic()\n"
        "try: main(sys.argv[1:])\n"
        "finally: print(f'{time.monotonic() - t:.2f}', file=sys.stderr)"
    )
    base = [sys.executable, "-c", timed, "infer", str(data), "-m", "mv"]
    base += ["-o", str(folder / "out.csv"), "--engine", "dask"]
    cases = {"tcp": ["--scheduler", f"tcp://127.0.0.1:{port}"]}
    if new_privtd():
        from privtd.inference.distributed._certs import make_cluster_certs

        made = make_cluster_certs(folder / "tls", workers=1)
        cases["tcp"].append("--allow-plain-tcp")
        cases["tls"] = ["--scheduler", f"tls://127.0.0.1:{port}", "--tls-ca-file"]
        cases["tls"] += [made["ca"][0], "--tls-cert", made["client"][0]]
        cases["tls"] += ["--tls-key", made["client"][1]]
    out: dict[str, Any] = {}
    for name, extra in cases.items():
        start = time.monotonic()
        try:
            done = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=60)
            lines = done.stderr.strip().splitlines()
            out[name] = {
                "process_seconds": round(time.monotonic() - start, 1),
                "command_seconds": float(lines[-1]),
                "exit": done.returncode,
                "stderr_lines": len(lines) - 1,
                "error": lines[-2][:120] if len(lines) > 1 else "",
            }
        except subprocess.TimeoutExpired:
            out[name] = {"process_seconds": "over 60 (killed)"}
    return out


def probe_service(port: int, folder: Path) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from privtd.service import create_app, requesters

    kwargs: dict[str, Any] = {"dask_dir": str(folder)}
    if new_privtd():
        from privtd.inference.distributed import tls_security
        from privtd.inference.distributed._certs import make_cluster_certs

        made = make_cluster_certs(folder / "service-tls", workers=1)
        kwargs["dask_scheduler"] = f"tls://127.0.0.1:{port}"
        kwargs["dask_security"] = tls_security(made["ca"][0], *made["client"])
    else:
        kwargs["dask_scheduler"] = f"tcp://127.0.0.1:{port}"
    app = create_app(f"sqlite:///{folder / 's.db'}", requester_token=TOKENS[0], **kwargs)
    requesters.ensure(app.state.engine, TOKENS[1])
    auth = [{"Authorization": f"Bearer {t}"} for t in TOKENS]
    api = TestClient(app)

    def campaign(who: int, method: str) -> str:
        body = {
            "name": "stall",
            "tasks": [{"key": f"t{i}"} for i in range(10)],
            "mechanism": "one-layer",
            "epsilon": 2.0,
            "labels": ["no", "yes"],
            "budget": 100.0,
            "method": method,
        }
        made = api.post("/campaigns", json=body, headers=auth[who]).json()
        cid = str(made["id"])
        for w in range(3):
            code = api.post(f"/campaigns/{cid}/codes", json={"count": 1}, headers=auth[who])
            token = api.post(
                f"/campaigns/{cid}/workers",
                json={"name": f"w{w}", "code": code.json()["codes"][0]},
            ).json()["token"]
            api.post(
                f"/campaigns/{cid}/submissions",
                json={
                    "mechanism": {"name": "one-layer", "params": made["mechanism"]["params"]},
                    "reports": [{"task": f"t{i}", "value": "yes"} for i in range(10)],
                },
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": f"{cid}{w}"},
            )
        return cid

    def status(who: int, cid: str, run_id: str) -> dict[str, Any]:
        return dict(api.get(f"/campaigns/{cid}/runs/{run_id}", headers=auth[who]).json())

    with api:
        stalled = campaign(0, "mv")  # a method that runs on the cluster
        other = campaign(1, "glad")  # one that runs in the server's process
        start = time.monotonic()
        first = api.post(f"/campaigns/{stalled}/runs", headers=auth[0]).json()["run_id"]
        time.sleep(0.5)
        second = api.post(f"/campaigns/{other}/runs", headers=auth[1]).json()["run_id"]
        while time.monotonic() - start < 30:
            a, b = status(0, stalled, first), status(1, other, second)
            if a["status"] in ("done", "failed") and b["status"] in ("done", "failed"):
                break
            time.sleep(0.2)
        files = sorted(p.name for p in folder.glob("privtd-run-*"))
        return {
            "stalled_run": a["status"],
            "stalled_run_error": (a.get("error") or "")[:100],
            "seconds": round(time.monotonic() - start, 1),
            "reports_file_left": bool(files),
            "other_requesters_run": b["status"],
        }


def main() -> None:
    import privtd

    port = silent_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = {
            "privtd": str(Path(privtd.__file__).resolve().parents[2]),
            "infer": probe_infer(port, Path(tmp)),
            "service": probe_service(port, Path(tmp)),
        }
        print(json.dumps(out, indent=1), flush=True)
    # A run still stuck on the silent scheduler holds a non-daemon thread: leave without it.
    os._exit(0)


if __name__ == "__main__":
    main()
