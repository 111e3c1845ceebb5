"""A throw-away collection service for the service attacks: a fresh SQLite database, the API
in-process (FastAPI's TestClient) and, for the attacks that need the real client, on a loopback
port. Works on the service as it was before the security fixes and after."""

from __future__ import annotations

import contextlib
import inspect
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from fastapi.testclient import TestClient  # noqa: E402

from privtd.service import create_app  # noqa: E402

REQUESTER = "attack-requester-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {REQUESTER}"}


def app_kwargs(**wanted: Any) -> dict[str, Any]:
    """The keyword arguments of ``create_app`` this version of privtd knows (the code before
    the fix has no server-side epsilon ceiling)."""
    known = inspect.signature(create_app).parameters
    return {k: v for k, v in wanted.items() if k in known}


@contextlib.contextmanager
def service(url: str | None = None, *, live: bool = False, **kwargs: Any) -> Iterator[Any]:
    """``(api, base)``: a TestClient on a fresh database and, with ``live``, the same app's
    loopback URL (else None)."""
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            url or f"sqlite:///{tmp}/attack.db", requester_token=REQUESTER, **app_kwargs(**kwargs)
        )
        base = None
        server = thread = None
        if live:
            import uvicorn

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
            )
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            while not server.started:
                time.sleep(0.01)
            base = f"http://127.0.0.1:{port}"
        try:
            with TestClient(app) as api:
                yield api, base
        finally:
            if server is not None and thread is not None:
                server.should_exit = True
                thread.join(10)
            app.state.engine.dispose()


def enrol(api: Any, campaign_id: str, name: str, *, invited: bool = True) -> Any:
    """Enrol ``name``; ``invited``: with an enrolment code the requester issued, where the
    server has codes (after the fix), as an invited insider would. Returns the response."""
    body: dict[str, Any] = {"name": name}
    if invited:
        issued = api.post(f"/campaigns/{campaign_id}/codes", json={"count": 1}, headers=AUTH)
        if issued.status_code == 201:
            body["code"] = issued.json()["codes"][0]
    return api.post(f"/campaigns/{campaign_id}/workers", json=body)


def bearer(response: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {response.json()['token']}"}


def aggregate(api: Any, campaign_id: str, timeout: float = 120.0) -> dict[str, Any]:
    run = api.post(f"/campaigns/{campaign_id}/runs", headers=AUTH).json()
    deadline = time.monotonic() + timeout
    while run["status"] not in ("done", "failed"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"run still {run['status']} after {timeout} s")
        time.sleep(0.05)
        run = api.get(f"/campaigns/{campaign_id}/runs/{run['run_id']}", headers=AUTH).json()
    if run["status"] == "failed":
        return {"failed": run["error"]}
    return dict(api.get(f"/campaigns/{campaign_id}/results", headers=AUTH).json())
