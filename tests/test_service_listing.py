"""The service's access log (no secret, no body in it) and the requester's listing endpoints and
commands (campaign list, status, export), each scoped to the requester's own campaigns."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("fastapi")
import sqlalchemy as sa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "attacks"))

import service_access_log as access_log_attack  # noqa: E402

import test_service  # noqa: E402
from privtd.service import db, requesters  # noqa: E402
from privtd.service.access_log import LOGGER, REDACTED, redact_path  # noqa: E402
from test_cli import run as cli  # noqa: E402
from test_service import (  # noqa: E402
    AUTH,
    REQUESTER,
    campaign_body,
    enrol,
    invite,
    make_campaign,
    post,
    submission,
    wait,
)

# The service tests' fixtures: a database of each kind, the API on it, a live server.
url, api, live = test_service.url, test_service.api, test_service.live

OTHER = "another-requester-token-of-length-32+"
# A log line: time, client, method, path, status, duration.
LINE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ [A-Z]+ /\S* \d{3} \d+\.\dms"


def test_redact_path_keeps_only_what_the_service_issued(tmp_path):
    from privtd.service import create_app
    from privtd.service.access_log import Routes

    app = create_app(f"sqlite:///{tmp_path / 'log.db'}", requester_token=REQUESTER)
    routes = Routes.of(app)
    app.state.engine.dispose()
    cid, run = str(uuid.uuid4()), str(uuid.uuid4())
    secret = "Zx9_-secretTOKENvalue-0123456789abcdefghijk"
    short = "kSecretOfTwentyFourChars"  # a bare query key the old pattern let through

    def log(path, query=""):
        return redact_path(path, query, routes)

    assert log(f"/campaigns/{cid}/runs/{run}") == f"/campaigns/{cid}/runs/{run}"
    assert log(f"/campaigns/{secret}/tasks") == f"/campaigns/{REDACTED}/tasks"
    assert log("/campaigns") == "/campaigns" and log("/docs") == "/docs"
    # Static files: only those the server ships, whatever a name looks like.
    assert log("/static/perturb.js") == "/static/perturb.js"
    assert log(f"/static/{secret}.js") == f"/static/{REDACTED}"
    assert log(f"/static-offline-docs/{secret}.css") == f"/static-offline-docs/{REDACTED}"
    assert log(f"/static/perturb.js/{secret}") == f"/static/{REDACTED}"
    # A path no route matches: nothing of it.
    assert log(f"/{secret}.js") == f"/{REDACTED}"
    assert log(f"/campaigns/{cid}/{secret}") == f"/{REDACTED}"
    # Query: the keys the pages read, and a campaign id; nothing else.
    got = log("/collect", f"campaign={cid}&code={secret}&{secret}&{short}&{short}=1&token=x")
    assert got == (
        f"/collect?campaign={cid}&code={REDACTED}&{REDACTED}={REDACTED}"
        f"&{REDACTED}={REDACTED}&{REDACTED}={REDACTED}&{REDACTED}={REDACTED}"
    )
    assert log("/collect", f"campaign={secret}&code={cid}") == (
        f"/collect?campaign={REDACTED}&code={REDACTED}"
    )


def test_the_access_log_attack_finds_no_secret():
    # Before: 4 of 8 secrets were logged (a file name under /static or /static-offline-docs,
    # a query key of up to 24 characters, bare or with a value).
    out = access_log_attack.probe()
    assert out["lines"] == out["secrets"] == 8 and out["logged"] == 0, out


def test_access_log_has_no_token_code_or_body(api, caplog):
    made = make_campaign(api)
    cid = made["id"]
    code = invite(api, cid)
    alice = enrol(api, cid, "alice-the-worker")
    token = alice["Authorization"].split()[1]
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    # Another test may have left the logger at INFO: only the requests below count.
    caplog.clear()
    api.get(f"/collect?campaign={cid}&code={code}")
    api.get(f"/campaigns/{token}/tasks", headers=alice)  # a token pasted into a path: 404
    api.get(f"/campaigns/{cid}/tasks?token={token}", headers=alice)
    reply = post(api, cid, submission(["yes", "no"], params=made["mechanism"]["params"]), alice)
    assert reply.status_code == 201, reply.text
    api.get("/campaigns", headers=AUTH)
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER.name]
    assert len(lines) == 5
    text = "\n".join(lines)
    for secret in (code, token, REQUESTER, "alice-the-worker", "yes"):
        assert secret not in text
    assert all(pd.Series(lines).str.fullmatch(LINE)), lines
    assert f"GET /collect?campaign={cid}&code={REDACTED} 200" in lines[0]
    assert f"GET /campaigns/{REDACTED}/tasks 404" in lines[1]
    assert f"GET /campaigns/{cid}/tasks?{REDACTED}={REDACTED} 200" in lines[2]
    assert f"POST /campaigns/{cid}/submissions 201" in lines[3]


def test_serve_writes_its_access_log_to_a_file(tmp_path):
    pytest.importorskip("uvicorn")
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "access.log"
    exe = os.path.join(os.path.dirname(os.sys.executable), "privtd")
    env = {**os.environ, "PRIVTD_REQUESTER_TOKEN": REQUESTER}
    args = ["serve", "--db", f"sqlite:///{tmp_path / 's.db'}", "--port", str(port)]
    proc = subprocess.Popen(
        [exe, *args, "--access-log", str(log)], stderr=subprocess.PIPE, text=True, env=env
    )
    base = f"http://127.0.0.1:{port}"
    secret = "not-a-real-code-but-secret-all-the-same-123"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                made = httpx.post(f"{base}/campaigns", json=campaign_body(), headers=AUTH)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        cid = made.json()["id"]
        assert httpx.get(f"{base}/collect?campaign={cid}&code={secret}").status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and "POST /campaigns 201" in lines[0], lines
    assert f"/collect?campaign={cid}&code={REDACTED} 200" in lines[1]
    assert " 127.0.0.1 " in lines[1]
    assert secret not in log.read_text() + err and REQUESTER not in log.read_text() + err


def _second_requester(api):
    with api.app_state.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO requesters (id, token_hash, created_at) VALUES (:i, :h, :c)"
            ).bindparams(i="other", h=db.token_hash(OTHER), c=requesters.now())
        )
    return {"Authorization": f"Bearer {OTHER}"}


def test_listing_and_export_are_scoped_to_the_requester(api):
    made = make_campaign(api, name="mine")
    cid = made["id"]
    params = made["mechanism"]["params"]
    theirs = _second_requester(api)
    alice, bob = enrol(api, cid, "alice"), enrol(api, cid, "bob")
    assert post(api, cid, submission(["yes", "no"], params=params), alice).status_code == 201
    assert post(api, cid, submission(["no"], ["t5"], params=params), bob).status_code == 201
    listed = api.get("/campaigns", headers=AUTH).json()
    assert [(c["id"], c["workers"], c["reports"], c["state"]) for c in listed] == [
        (cid, 2, 3, "collecting")
    ]
    assert listed[0]["epsilon"] == pytest.approx(1.0) and listed[0]["mechanism"] == "one-layer"
    run = api.post(f"/campaigns/{cid}/runs", headers=AUTH).json()
    wait(api, cid, run["run_id"])
    assert api.get("/campaigns", headers=AUTH).json()[0]["state"] == "aggregated"
    runs = api.get(f"/campaigns/{cid}/runs", headers=AUTH).json()
    assert [r["run_id"] for r in runs] == [run["run_id"]]
    assert runs[0]["status"] == "done" and runs[0]["error"] is None
    assert runs[0]["started_at"] <= runs[0]["finished_at"]
    csv = api.get(f"/campaigns/{cid}/reports", headers=AUTH)
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    frame = pd.read_csv(io.StringIO(csv.text), dtype=str)
    assert list(frame.columns) == ["task", "worker", "answer"]
    assert sorted(zip(frame.task, frame.worker, strict=True)) == [
        ("t0", "alice"),
        ("t1", "alice"),
        ("t5", "bob"),
    ]
    assert set(frame.answer) <= {"no", "yes"}  # decoded labels, as the worker's device sent
    # Requester B sees none of it: an empty list, and 403 on A's campaign.
    assert api.get("/campaigns", headers=theirs).json() == []
    for path in ("runs", "reports"):
        refused = api.get(f"/campaigns/{cid}/{path}", headers=theirs)
        assert refused.status_code == 403 and "another requester" in refused.json()["detail"]
    assert api.get("/campaigns").status_code == 401
    assert api.get(f"/campaigns/{cid}/reports").status_code == 401


def test_export_of_null_reports_and_numbers(api):
    # KRR with NULL (integers 1..5 or NULL, whole row): NULL exported as an empty cell.
    made = make_campaign(
        api,
        tasks=[{"key": "a"}, {"key": "b"}],
        mechanism="krr-null",
        epsilon=1.0,
        labels=None,
        params={"low": 1, "high": 5},
        budget=10.0,
    )
    cid = made["id"]
    alice = enrol(api, cid, "alice")
    body = {
        "mechanism": {"name": made["mechanism"]["name"], "params": made["mechanism"]["params"]},
        "reports": [{"task": "a", "value": 3}, {"task": "b", "value": None}],
    }
    assert post(api, cid, body, alice).status_code == 201
    text = api.get(f"/campaigns/{cid}/reports", headers=AUTH).text
    assert text == "task,worker,answer\na,alice,3\nb,alice,\n"


def test_campaign_list_status_and_export_commands(live, tmp_path, capsys):
    base, api = live
    made = make_campaign(api, name="smiles")
    cid = made["id"]
    alice = enrol(api, cid, "alice")
    post(api, cid, submission(["yes", "no", "yes"], params=made["mechanism"]["params"]), alice)
    token = ["--token", REQUESTER]
    code, out, err = cli(["campaign", "list", base, *token], capsys)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == [
        "id", "name", "mechanism", "epsilon", "all-tasks", "workers", "reports", "state"
    ]  # fmt: skip
    # Per answer given the others, and all 20 together, for a worker answering all 20 at once.
    assert row.split() == [cid, "smiles", "one-layer", "1/answer", "20/20", "1", "3", "collecting"]
    assert "per answer (or cell...), given the worker's other answers" in err
    code, out, err = cli(["campaign", "list", base, "--json", *token], capsys)
    assert code == 0 and json.loads(out)[0]["reports"] == 3, err
    code, out, err = cli(["campaign", "status", base, cid, *token], capsys)
    assert code == 0 and out.split() == ["run", "state", "started", "finished", "reports", "error"]
    assert "no aggregation run yet" in err
    run = api.post(f"/campaigns/{cid}/runs", headers=AUTH).json()
    wait(api, cid, run["run_id"])
    code, out, err = cli(["campaign", "status", base, cid, "--json", *token], capsys)
    assert code == 0 and [r["status"] for r in json.loads(out)] == ["done"], err
    exported = tmp_path / "reports.csv"
    code, _, err = cli(["campaign", "export", base, cid, "-o", str(exported), *token], capsys)
    assert code == 0, err
    frame = pd.read_csv(exported)
    assert list(frame.columns) == ["task", "worker", "answer"] and len(frame) == 3
    assert (frame.worker == "alice").all()
    code, out, err = cli(["campaign", "export", base, cid, "-o", "-", *token], capsys)
    assert code == 0 and out == exported.read_text(), err
    # The export is the long table truth inference reads, the campaign's channel named.
    truths = tmp_path / "truths.csv"
    infer = ["infer", str(exported), "-M", "one-layer", "-e", "1", "-o", str(truths)]
    code, _, err = cli(infer, capsys)
    assert code == 0 and len(pd.read_csv(truths)) == 3, err
    assert not (tmp_path / "-").exists()
    # Someone else's token: one line, non-zero, no file.
    missing = tmp_path / "none.csv"
    code, _, err = cli(
        ["campaign", "export", base, cid, "-o", str(missing), "--token", "x" * 40], capsys
    )
    assert code != 0 and err.count("\n") == 1 and "401" in err and not missing.exists()
    assert list(tmp_path.glob(".none.csv.*")) == []


def test_serve_refuses_an_unwritable_access_log_and_leaves_no_handler(tmp_path, capsys):
    db_url = f"sqlite:///{tmp_path / 's.db'}"
    before = list(LOGGER.handlers)  # pytest's own capture handlers may sit there already
    bad = str(tmp_path / "no-such-folder" / "access.log")
    code, _, err = cli(["serve", "--db", db_url, "--access-log", bad], capsys)
    assert code != 0 and err.count("\n") == 1 and "--access-log" in err, err
    assert not (tmp_path / "s.db").exists()  # refused before the database was made
    # A serve that fails later (a weak token) removes its handler from the global logger.
    code, _, err = cli(["serve", "--db", db_url, "--requester-token", "abc"], capsys)
    assert code != 0 and "32" in err, err
    assert LOGGER.handlers == before
