"""Probe the collection service with the inputs that broke it: what status each one gets.

    python benchmarks/attacks/service_faults.py                     # a fresh SQLite file
    python benchmarks/attacks/service_faults.py --db postgresql://postgres@127.0.0.1:5432/DB

Runs the API in-process (FastAPI's test client) on the given database and sends: a NUL
character in a campaign name, a task key, a label, a worker name and the URL path; an integer
of 401 digits (10**400) in four mechanisms' parameters, in a submission's mechanism parameters
and as a report value; a 6 MB body streamed in chunks (no Content-Length); and a one-character
requester token. Prints one JSON line, {probe: status}, plus "server_errors" (how many probes
got a 5xx) and "short_token" ("accepted" or "refused"). On privtd before the fix the NUL
probes answered 500 on PostgreSQL, the 10**400 probes 500 on both databases, the streamed body
400, and the short token was accepted; now every probe gets a 4xx and the token is refused.
tests/test_service_faults.py runs :func:`probe` on both databases.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

TOKEN = "probe-requester-token-of-32-characters"
HUGE = 10**400


def probe(url: str) -> dict[str, Any]:
    """The status of each probe against a fresh app on ``url``."""
    from fastapi.testclient import TestClient

    from privtd.errors import ValidationError
    from privtd.service import create_app

    out: dict[str, Any] = {}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(url, requester_token=TOKEN)

    def campaign(**changes: Any) -> dict[str, Any]:
        body = {
            "name": "probe",
            "tasks": [{"key": "t0"}, {"key": "t1"}],
            "mechanism": "one-layer",
            "epsilon": 1.0,
            "labels": ["no", "yes"],
            "budget": 10.0,
        }
        body.update(changes)
        return body

    with TestClient(app, raise_server_exceptions=False) as api:

        def create(what: str, **changes: Any) -> None:
            out[what] = api.post("/campaigns", json=campaign(**changes), headers=auth).status_code

        create("nul_in_name", name="a\x00b")
        create("nul_in_task_key", tasks=[{"key": "t\x000"}])
        create("nul_in_label", labels=["n\x00o", "yes"])
        out["nul_in_path"] = api.get("/campaigns/abc%00def").status_code
        for mechanism, params in [
            ("laplace", {"scale": 1, "low": 0, "high": HUGE}),
            ("krr-null", {"keep": 0.5, "low": 0, "high": HUGE}),
            ("exp-gaussian", {"rate": HUGE, "low": 0, "high": 1}),
        ]:
            create(
                f"huge_int_in_{mechanism}_params",
                mechanism=mechanism,
                epsilon=None,
                labels=None,
                params=params,
                method="mean",
            )
        create("huge_int_in_one-layer_params", epsilon=None, params={"f": 0.5, "n_labels": HUGE})
        made = api.post("/campaigns", json=campaign(), headers=auth).json()
        cid = made["id"]

        def code() -> str:
            made = api.post(f"/campaigns/{cid}/codes", json={"count": 1}, headers=auth)
            return str(made.json()["codes"][0])

        out["nul_in_worker_name"] = api.post(
            f"/campaigns/{cid}/workers", json={"name": "w\x00", "code": code()}
        ).status_code
        token = api.post(f"/campaigns/{cid}/workers", json={"name": "w", "code": code()}).json()[
            "token"
        ]
        worker = {"Authorization": f"Bearer {token}"}
        params = made["mechanism"]["params"]

        def submit(what: str, params: dict[str, Any], value: Any, key: str) -> None:
            body = {
                "mechanism": {"name": "one-layer", "params": params},
                "reports": [{"task": "t0", "value": value}],
            }
            out[what] = api.post(
                f"/campaigns/{cid}/submissions",
                json=body,
                headers={**worker, "Idempotency-Key": key},
            ).status_code

        submit("huge_int_in_submission_params", {**params, "f": HUGE}, "yes", "k1")
        submit("huge_int_as_report_value", params, HUGE, "k2")

        def chunks() -> Any:
            for _ in range(6):
                yield b" " * (1 << 20)

        out["streamed_body_over_4MB"] = api.post(
            f"/campaigns/{cid}/submissions",
            content=chunks(),
            headers={**worker, "Idempotency-Key": "k3", "Content-Type": "application/json"},
        ).status_code
    app.state.engine.dispose()
    try:
        create_app(url, requester_token="x").state.engine.dispose()
        short = "accepted"
    except ValidationError:
        short = "refused"
    statuses = [v for v in out.values() if isinstance(v, int)]
    out["server_errors"] = sum(s >= 500 for s in statuses)
    out["short_token"] = short
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='privtd-probe-')}/probe.db"
    print(json.dumps(probe(url)))


if __name__ == "__main__":
    main()
