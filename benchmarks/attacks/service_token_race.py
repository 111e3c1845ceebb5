"""A thief holding a copy of a requester's token, against the owner revoking it.

    python benchmarks/attacks/service_token_race.py                 # a fresh SQLite file
    python benchmarks/attacks/service_token_race.py --db postgresql://postgres@127.0.0.1:5432/x

Runs the service on a loopback port and plays two attacks:

- **race**: in each trial the owner revokes the token (``DELETE /requester/token``) while the
  thief rotates it (``POST /requester/token``), the thief's request sent a moment later (the
  owner's revocation commits between the thief's authentication and its update, the order the
  owner meets when it reacts first). A trial is lost when the owner's revocation answered 204
  and a token the thief holds (the copy, or what its rotation returned) still lists the
  campaigns. Prints how many trials of ``--trials`` were lost.
- **export**: the thief streams a campaign's export of ``--reports`` reports, reads its first
  lines, and the owner revokes the token. Prints how many reports reached the thief after the
  revocation answered, and whether the download ended complete or cut off.

Before the fix, the race was lost in 10 of 40 trials on SQLite (8 on PostgreSQL) and
85,000 reports arrived after the revocation; now the owner's 204 always leaves the thief
without a working token, and the export stops at the revocation, cut off.
tests/test_service_faults.py runs both on each database.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

TOKEN = "race-requester-token-of-32-characters-at-least"


@contextmanager
def serve(url: str) -> Iterator[tuple[str, Any]]:
    """``(base, app)``: the service on ``url``, live on a loopback port (tests use their own
    server)."""
    import uvicorn

    from privtd.service import create_app

    app = create_app(url, requester_token=TOKEN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(10)
        app.state.engine.dispose()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _trial(owner: Any, thief: Any, token: str, lag: float) -> tuple[bool, bool]:
    """One race: ``(revoke answered 204, the thief then holds a working token)``."""
    got: dict[str, Any] = {}
    go = threading.Event()

    def revoke() -> None:
        go.wait()
        got["revoke"] = owner.delete("/requester/token", headers=_auth(token))

    def steal() -> None:
        go.wait()
        time.sleep(lag)
        got["rotate"] = thief.post("/requester/token", headers=_auth(token))

    threads = [threading.Thread(target=revoke), threading.Thread(target=steal)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    held = [token]
    if got["rotate"].status_code == 201:
        held.append(got["rotate"].json()["token"])
    if got["revoke"].status_code != 204:
        return False, False
    return True, any(thief.get("/campaigns", headers=_auth(t)).status_code == 200 for t in held)


def race(
    base: str, engine: Any, trials: int = 40, lag: float = 0.002, hold: float = 0.0
) -> dict[str, Any]:
    """The revoke-rotate race, ``trials`` times; ``lag``: seconds between the owner's request
    and the thief's; ``hold``: seconds each database connection waits when a request hands it
    back (between one transaction and the next), as on a loaded server: it widens the window
    between a request's authentication and its update, so that both requests have
    authenticated before either updates, every time (the tests use it)."""
    import httpx
    import sqlalchemy as sa

    from privtd.service import requesters

    def pause(*_: Any) -> None:
        time.sleep(hold)

    (requester_id,) = [r["id"] for r in requesters.listing(engine)]
    revoked = lost = 0
    if hold:
        sa.event.listen(engine.pool, "checkin", pause)
    try:
        with (
            httpx.Client(base_url=base, timeout=30) as owner,
            httpx.Client(base_url=base, timeout=30) as thief,
        ):
            for _ in range(trials):
                token = requesters.rotate(engine, requester_id)  # the operator: a fresh token
                answered, kept = _trial(owner, thief, token, lag)
                revoked += answered
                lost += kept
    finally:
        if hold:
            sa.event.remove(engine.pool, "checkin", pause)
    return {"trials": trials, "revoke_answered_204": revoked, "thief_kept_a_working_token": lost}


def _fill(engine: Any, base: str, token: str, n_reports: int) -> str:
    """A campaign of ``n_reports`` one-layer reports (1,000 tasks), written to the database
    directly (what honest workers would have sent)."""
    import httpx

    from privtd.service.schema import reports, submissions, workers

    n_tasks = 1000
    body = {
        "name": "export",
        "tasks": [{"key": f"t{i}"} for i in range(n_tasks)],
        "mechanism": "one-layer",
        "epsilon": 1.0,
        "labels": ["no", "yes"],
        "budget": 1e5,
        # Its workers' reports are written directly, not sent by devices with a ceiling.
        "workers_raise_ceiling": True,
    }
    made = httpx.post(f"{base}/campaigns", json=body, headers=_auth(token), timeout=60)
    made.raise_for_status()
    cid = str(made.json()["id"])
    n_workers = -(-n_reports // n_tasks)
    when = datetime.now(UTC)
    ids = [str(uuid.uuid4()) for _ in range(n_workers)]
    with engine.begin() as conn:
        conn.execute(
            workers.insert(),
            [
                {
                    "id": w,
                    "campaign_id": cid,
                    "name": f"worker-{i}",
                    "token_hash": uuid.uuid4().hex,
                    "spent_epsilon": 0.0,
                    "enrolled_at": when,
                }
                for i, w in enumerate(ids)
            ],
        )
        conn.execute(
            submissions.insert(),
            [
                {
                    "id": w,
                    "campaign_id": cid,
                    "worker_id": w,
                    "idempotency_key": "k",
                    "body_hash": "0" * 64,
                    "n_reports": n_tasks,
                    "epsilon": float(n_tasks),
                    "received_at": when,
                }
                for w in ids
            ],
        )
        rows = [
            {
                "campaign_id": cid,
                "task_position": i % n_tasks,
                "worker_id": ids[i // n_tasks],
                "submission_id": ids[i // n_tasks],
                "value": float(i % 2),
            }
            for i in range(n_reports)
        ]
        for lo in range(0, n_reports, 20_000):
            conn.execute(reports.insert(), rows[lo : lo + 20_000])
    return cid


def export(base: str, engine: Any, n_reports: int = 100_000) -> dict[str, Any]:
    """The thief streams the export; the owner revokes after the thief's first lines."""
    import httpx

    from privtd.service import requesters

    (requester_id,) = [r["id"] for r in requesters.listing(engine)]
    token = requesters.rotate(engine, requester_id)
    cid = _fill(engine, base, token, n_reports)
    before = after = 0
    answered: dict[str, Any] = {}
    revoked = threading.Event()

    def revoke() -> None:
        answered["status"] = httpx.delete(
            f"{base}/requester/token", headers=_auth(token), timeout=60
        ).status_code
        revoked.set()

    ending = "complete"
    reader: threading.Thread | None = None
    try:
        with httpx.stream(
            "GET", f"{base}/campaigns/{cid}/reports", headers=_auth(token), timeout=60
        ) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if line == "task,worker,answer":
                    continue
                if reader is None:  # the first report: the owner revokes now
                    before += 1
                    reader = threading.Thread(target=revoke)
                    reader.start()
                    revoked.wait(60)  # read nothing more until the owner's answer came
                elif revoked.is_set() and answered.get("status") == 204:
                    after += 1
                else:
                    before += 1
    except httpx.HTTPError as exc:
        ending = f"cut off ({type(exc).__name__})"
    if reader is not None:
        reader.join()
    return {
        "reports": n_reports,
        "revoke_status": answered.get("status"),
        "reports_before_revocation": before,
        "reports_after_revocation": after,
        "download": ending,
    }


@contextmanager
def database(db: str | None) -> Iterator[str]:
    """A fresh database: a SQLite file, or a new PostgreSQL database on ``db``'s server
    (dropped afterwards)."""
    if db is None:
        with tempfile.TemporaryDirectory(prefix="privtd-race-") as tmp:
            yield f"sqlite:///{tmp}/race.db"
        return
    import sqlalchemy as sa

    server = db.rsplit("/", 1)[0]
    name = f"privtd_race_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(
        server.replace("postgresql://", "postgresql+psycopg://") + "/postgres",
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield f"{server}/{name}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a PostgreSQL URL (default: fresh SQLite files)")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="seconds a connection waits when handed back (widens the race; the tests: 0.03, "
        "with --lag 0.005)",
    )
    parser.add_argument(
        "--lag", type=float, default=0.002, help="seconds the thief's request follows the owner's"
    )
    parser.add_argument("--only", choices=["race", "export"], help="play one attack only")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.only in (None, "race"):
        with database(args.db) as url, serve(url) as (base, app):
            out["race"] = race(base, app.state.engine, args.trials, args.lag, args.hold)
    if args.only in (None, "export"):
        with database(args.db) as url, serve(url) as (base, app):
            out["export"] = export(base, app.state.engine, args.reports)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
