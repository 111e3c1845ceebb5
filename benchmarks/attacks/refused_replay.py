"""A submission the server refuses (409): does the client count it and go on?

    python benchmarks/attacks/refused_replay.py [--db URL] [--later 3]

Starts the service on loopback (a fresh SQLite file by default), enrols one worker through
``privtd.client.Worker``, submits task t0, then t0 again (the server refuses it: already
reported, after receiving the perturbed value), then ``--later`` new tasks one by one. Prints
one JSON line: how many of the later tasks were stored, how many times the refused body went
out, and the epsilon the worker's state counts against the epsilon its device released. On
privtd before the fix the refused body was replayed before every later task and refused
again, so none was stored, and the refused release was not counted; now every later task is
stored, the refused body went out once, and the state counts every release.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TOKEN = "refused-replay-requester-token-32+"


def attack(url: str, later: int = 3) -> dict[str, Any]:
    import httpx
    import uvicorn

    from privtd.client import Requester, Worker
    from privtd.errors import PrivtdError
    from privtd.service import create_app

    app = create_app(url, requester_token=TOKEN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    sent: list[str] = []
    original = httpx.request

    def counting(method: str, target: str, **kwargs: Any) -> Any:
        if target.endswith("/submissions"):
            sent.append(kwargs["headers"]["Idempotency-Key"])
        return original(method, target, **kwargs)

    httpx.request = counting  # type: ignore[assignment]
    try:
        tasks = [f"t{i}" for i in range(later + 1)]
        made = Requester(base, TOKEN).create_campaign(
            "replay", tasks, "one-layer", epsilon=1.0, labels=["no", "yes"], budget=100.0
        )
        state = Path(tempfile.mkdtemp(prefix="privtd-replay-")) / "w.json"
        code = Requester(base, TOKEN).issue_codes(made["id"])["codes"][0]
        worker = Worker.enrol(base, made["id"], "w", state, code=code, retries=0)
        worker.submit({"t0": "yes"})
        releases = 1.0
        refused_key = None
        try:
            releases += 1.0
            worker.submit({"t0": "no"})
        except PrivtdError:
            refused_key = sent[-1]
        stored = 0
        for task in tasks[1:]:
            try:
                worker = Worker(state, retries=0)
                worker.submit({task: "yes"})
                releases += 1.0
                stored += 1
            except PrivtdError:
                pass
        counted = float(json.loads(state.read_text())["spent_epsilon"])
    finally:
        httpx.request = original  # type: ignore[assignment]
        server.should_exit = True
        thread.join(10)
        app.state.engine.dispose()
    return {
        "later_tasks": later,
        "later_stored": stored,
        "refused_body_sent": sent.count(refused_key) if refused_key else 0,
        "epsilon_released": releases,
        "epsilon_counted": counted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--later", type=int, default=3)
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='privtd-replay-')}/replay.db"
    print(json.dumps(attack(url, args.later)))


if __name__ == "__main__":
    main()
