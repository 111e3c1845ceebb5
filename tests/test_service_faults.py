"""Faults an attacker or an accident reaches in the collection service, each turned into a test:
input PostgreSQL cannot store (a NUL) or a double cannot hold (10**400), a streamed body over
the limit, weak and leaked requester tokens, runs a crash interrupted, a refused submission on
the client and in the page, answers the page must refuse, /docs on a closed network, and the
paths that only a fault exercises (retries, failed runs, a damaged warm-start state, another
requester's campaign, kill -9 under PostgreSQL)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
import sqlalchemy as sa  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "attacks"))

import service_token_race as token_race  # noqa: E402

import test_service  # noqa: E402
from privtd import client as client_module  # noqa: E402
from privtd.client import Requester, ServiceError, Worker  # noqa: E402
from privtd.errors import ValidationError  # noqa: E402
from privtd.service import aggregate, create_app, db, requesters  # noqa: E402
from privtd.service.routes import listing as service_listing  # noqa: E402
from privtd.service.schema import requesters as t_requesters  # noqa: E402
from privtd.service.schema import runs as t_runs  # noqa: E402
from test_cli import run as cli  # noqa: E402
from test_service import (  # noqa: E402
    AUTH,
    LABELS,
    REQUESTER,
    campaign_body,
    counts,
    enrol,
    invite,
    make_campaign,
    post,
    submission,
    wait,
)

# The service tests' fixtures: a database of each kind, the API on it, a live server, Chromium.
url, api, live = test_service.url, test_service.api, test_service.live
browser = test_service.browser


def one_line(response, status):
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail
    return detail


# ------------------------------------------------------------------ input the database refuses
def test_nul_characters_and_huge_integers_are_refused_with_a_4xx(api):
    # PostgreSQL cannot store U+0000 in text (it answered 500); an integer beyond a double
    # overflowed in the mechanism's arithmetic on both databases (500).
    body = campaign_body(name="bad\x00name")
    assert "NUL" in one_line(api.post("/campaigns", json=body, headers=AUTH), 422)
    tasks = [{"key": "t\x000"}, {"key": "t1"}]
    assert "NUL" in one_line(
        api.post("/campaigns", json=campaign_body(tasks=tasks), headers=AUTH), 422
    )
    labels = ["n\x00o", "yes"]
    assert "NUL" in one_line(
        api.post("/campaigns", json=campaign_body(labels=labels), headers=AUTH), 422
    )
    assert "NUL" in one_line(api.get("/campaigns/abc%00def"), 400)
    assert "NUL" in one_line(api.get("/campaigns/abc%00def/tasks"), 400)
    huge = 10**400
    for mechanism, params in [
        ("laplace", {"scale": 1, "low": 0, "high": huge}),
        ("krr-null", {"keep": 0.5, "low": 0, "high": huge}),
        ("exp-gaussian", {"rate": huge, "low": 0, "high": 1}),
        ("one-layer", {"f": 0.5, "n_labels": huge}),
    ]:
        body = campaign_body(mechanism=mechanism, epsilon=None, params=params, method="mean")
        if mechanism != "one-layer":
            body["labels"] = None
        assert "2**53" in one_line(api.post("/campaigns", json=body, headers=AUTH), 422)
    made = make_campaign(api)
    cid = made["id"]
    assert "NUL" in one_line(api.post(f"/campaigns/{cid}/workers", json={"name": "a\x00"}), 422)
    alice = enrol(api, cid, "alice")
    params = made["mechanism"]["params"]
    for i, bad in enumerate(
        [
            submission(["yes"], params={**params, "f": huge}),
            submission(["yes"], params={**params, "n_labels": huge}),
            submission([huge], params=params),
            submission(["yes"], tasks=["t\x000"], params=params),
            submission(["y\x00es"], params=params),
        ]
    ):
        detail = one_line(post(api, cid, bad, alice, key=f"k{i}"), 422)
        assert "2**53" in detail or "NUL" in detail, detail
    assert counts(api) == (0, 0)


def test_the_fault_probe_finds_no_server_error(url):
    # benchmarks/attacks/service_faults.py, the script that found these faults: before, it
    # counted 4 server errors on SQLite and 8 on PostgreSQL, and the one-character token passed.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "attacks"))
    from service_faults import probe

    result = probe(url)
    assert result.pop("server_errors") == 0 and result.pop("short_token") == "refused"
    assert result.pop("streamed_body_over_4MB") == 413 and result.pop("nul_in_path") == 400
    assert set(result.values()) == {422}, result


def test_a_streamed_body_over_the_limit_gets_413(api):
    # No Content-Length (chunked): the limit is found while reading, which answered 400.
    made = make_campaign(api)
    alice = enrol(api, made["id"], "alice")

    def chunks():
        for _ in range(6):
            yield b" " * (1 << 20)

    response = api.post(
        f"/campaigns/{made['id']}/submissions",
        content=chunks(),
        headers={**alice, "Idempotency-Key": "s", "Content-Type": "application/json"},
    )
    assert "Body over" in one_line(response, 413)
    assert counts(api) == (0, 0)


# ------------------------------------------------------------------ requester tokens
def test_short_requester_tokens_are_refused(tmp_path, capsys):
    db_url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(ValidationError, match="at least 32 random characters.*secrets"):
        create_app(db_url, requester_token="x")
    code, _, err = cli(["serve", "--db", db_url, "--requester-token", "abc"], capsys)
    assert code != 0 and err.count("\n") == 1 and "at least 32" in err, err
    # A short token registered before the check existed is refused when presented.
    app = create_app(db_url, requester_token=REQUESTER)
    with app.state.engine.begin() as conn:
        conn.execute(
            t_requesters.insert().values(
                id="old", token_hash=db.token_hash("x"), created_at=requesters.now()
            )
        )
    with TestClient(app) as api:
        refused = api.post(
            "/campaigns", json=campaign_body(), headers={"Authorization": "Bearer x"}
        )
        assert "at least 32" in one_line(refused, 401)
    app.state.engine.dispose()


def test_requester_tokens_can_be_revoked_and_rotated(live, tmp_path, capsys):
    base, api = live
    requester = Requester(base, REQUESTER, retries=0)
    made = requester.create_campaign(
        "c", ["t0", "t1"], "one-layer", epsilon=1.0, labels=LABELS, budget=2.0
    )
    # Over the API: a new token for the same campaigns; the old one is refused.
    new = requester.rotate_token()
    assert len(new) >= requesters.MIN_TOKEN_LENGTH and new != REQUESTER
    assert requester.start_run(made["id"])["run_id"]
    with pytest.raises(ServiceError, match="401"):
        Requester(base, REQUESTER, retries=0).start_run(made["id"])
    requester.revoke_token()
    with pytest.raises(ServiceError, match="401: This requester token was revoked"):
        requester.start_run(made["id"])
    # The operator's commands, on the database: list, rotate (un-revokes), revoke.
    engine_url = str(api.app_state.engine.url.render_as_string(hide_password=False))
    engine_url = engine_url.replace("postgresql+psycopg://", "postgresql://")
    code, out, err = cli(["requester", "list", "--db", engine_url], capsys)
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if "revoked" in x]
    requester_id = line.split()[0]
    assert line.split()[-1] == "1"  # its one campaign
    code, out, err = cli(["requester", "rotate", requester_id, "--db", engine_url], capsys)
    assert code == 0, err
    again = Requester(base, out.strip(), retries=0)
    assert again.start_run(made["id"])["status"] in ("queued", "running", "done", "failed")
    code, _, err = cli(["requester", "revoke", requester_id, "--db", engine_url], capsys)
    assert code == 0, err
    with pytest.raises(ServiceError, match="revoked"):
        again.results(made["id"])
    code, _, err = cli(["requester", "revoke", "nobody", "--db", engine_url], capsys)
    assert code != 0 and err.count("\n") == 1 and "No requester" in err
    # A revoked token cannot be registered again by privtd serve --requester-token.
    with pytest.raises(ValidationError, match="revoked"):
        requesters.ensure(api.app_state.engine, again.token)


def test_a_revocation_answered_204_leaves_a_token_thief_nothing(live):
    # A thief holding a copy of the token rotates it while its owner revokes it. Before, the
    # rotation (by requester id, clearing revoked_at) undid a revocation that committed between
    # its authentication and its update: the owner read 204 and the thief held a working token
    # (20 of 20 trials with both requests authenticated first, forced by ``hold``).
    base, api = live
    out = token_race.race(base, api.app_state.engine, trials=20, lag=0.005, hold=0.03)
    assert out["thief_kept_a_working_token"] == 0, out
    # The owner, first by a few milliseconds, still revokes in most trials (a thief who
    # rotates first wins, and the owner is told so with a 401, never a 204).
    assert out["revoke_answered_204"] >= 5, out


def test_an_export_stops_at_the_revocation(live, monkeypatch):
    # Before, an export already streaming ran to its end (every one of 30,000 reports reached
    # the thief after the owner's revocation answered 204) and ended complete.
    base, api = live
    monkeypatch.setattr(service_listing, "EXPORT_CHUNK", 1000)
    out = token_race.export(base, api.app_state.engine, 30_000)
    assert out["revoke_status"] == 204, out
    assert out["download"].startswith("cut off"), out
    # What the network already carried still arrives: a few pages, never the rest.
    assert out["reports_after_revocation"] <= 10_000, out


def test_the_client_reports_an_export_cut_short(live, tmp_path, capsys, monkeypatch):
    base, api = live
    monkeypatch.setattr(service_listing, "EXPORT_CHUNK", 1000)
    # 200 answers of one worker (epsilon 200): past the default lifetime ceiling, said so.
    made = make_campaign(
        api,
        tasks=[{"key": f"t{i}"} for i in range(200)],
        budget=1000.0,
        workers_raise_ceiling=True,
    )
    alice = enrol(api, made["id"], "alice")
    body = submission(["yes"] * 200, params=made["mechanism"]["params"])
    reply = post(api, made["id"], body, alice)
    assert reply.status_code == 201, reply.text
    real = service_listing._report_lines

    def revoked_midway(engine, campaign, digest):
        lines = real(engine, campaign, digest)
        yield next(lines)  # the header goes out; then the owner revokes
        assert requesters.revoke_presented(engine, digest)
        yield from lines

    monkeypatch.setattr(service_listing, "_report_lines", revoked_midway)
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "reports.csv"
    args = ["campaign", "export", base, made["id"], "-o", target, "--token", REQUESTER]
    code, _, err = cli(args, capsys)
    assert code != 0 and "stopped after" in err and err.count("\n") == 1, err
    assert list(folder.iterdir()) == []  # no partial file


def test_another_requesters_campaign_is_403(api):
    made = make_campaign(api)
    other = "another-requester-token-of-length-32+"
    with api.app_state.engine.begin() as conn:  # a second requester, as privtd serve adds one
        conn.execute(
            t_requesters.insert().values(
                id="other", token_hash=db.token_hash(other), created_at=aggregate.now()
            )
        )
    theirs = {"Authorization": f"Bearer {other}"}
    cid = made["id"]
    started = api.post(f"/campaigns/{cid}/runs", headers=AUTH).json()
    assert "another requester" in one_line(api.post(f"/campaigns/{cid}/runs", headers=theirs), 403)
    assert one_line(api.get(f"/campaigns/{cid}/runs/{started['run_id']}", headers=theirs), 403)
    assert one_line(api.get(f"/campaigns/{cid}/results", headers=theirs), 403)


# ------------------------------------------------------------------ runs
def test_runs_a_crash_interrupted_fail_at_start_up(url):
    app = create_app(url, requester_token=REQUESTER)
    with TestClient(app) as api:
        made = make_campaign(api)
    # What a server killed mid-run leaves behind: one run queued, one running.
    with app.state.engine.begin() as conn:
        for status in ("queued", "running"):
            conn.execute(
                t_runs.insert().values(
                    id=status,
                    campaign_id=made["id"],
                    status=status,
                    method="aware-ds",
                    n_reports=0,
                    iteration=3,
                    max_iter=100,
                    created_at=aggregate.now(),
                )
            )
    app.state.engine.dispose()
    restarted = create_app(url, requester_token=REQUESTER)
    assert restarted.state.runner.interrupted == 2
    with TestClient(restarted) as api:
        for run_id in ("queued", "running"):
            run = api.get(f"/campaigns/{made['id']}/runs/{run_id}", headers=AUTH).json()
            assert run["status"] == "failed" and run["error"] == aggregate.INTERRUPTED
    restarted.state.engine.dispose()


def test_polling_a_run_stops_at_the_timeout(live, monkeypatch, capsys):
    base, api = live
    made = make_campaign(api)
    # A runner that never picks the run up: the run stays queued.
    monkeypatch.setattr(api.app_state.runner.pool, "submit", lambda *a, **k: None)
    requester = Requester(base, REQUESTER)
    with pytest.raises(ServiceError, match=r"still queued after 0.3 s.*goes on on the server"):
        requester.aggregate(made["id"], poll=0.05, timeout=0.3)
    args = ["campaign", "aggregate", base, made["id"], "--timeout", "0.3", "--token", REQUESTER]
    code, _, err = cli(args, capsys)
    assert code != 0 and err.count("\n") == 1 and "still queued after 0.3 s" in err, err


def test_a_failed_run_says_why(live, monkeypatch):
    base, api = live
    made = make_campaign(api)
    requester = Requester(base, REQUESTER)
    with pytest.raises(
        ServiceError, match="the aggregation run failed: The campaign has no reports"
    ):
        requester.aggregate(made["id"], poll=0.05)
    alice = enrol(api, made["id"], "alice")
    assert (
        post(
            api, made["id"], submission(["yes"], params=made["mechanism"]["params"]), alice
        ).status_code
        == 201
    )

    def broken(*_args, **_kwargs):
        raise RuntimeError("a fault in the estimator")

    monkeypatch.setattr(aggregate, "make_estimator", broken)
    with pytest.raises(ServiceError, match="failed: internal error: RuntimeError"):
        requester.aggregate(made["id"], poll=0.05)


@pytest.mark.parametrize("damage", ["model", "tasks", "labels"])
def test_an_unreadable_warm_start_state_is_dropped(api, damage):
    made = make_campaign(api, epsilon=2.0)
    cid = made["id"]
    rng = np.random.default_rng(3)
    for w in range(6):
        values = [LABELS[v] for v in rng.integers(0, 2, 20)]
        body = submission(values, params=made["mechanism"]["params"])
        assert post(api, cid, body, enrol(api, cid, f"w{w}")).status_code == 201
    first = wait(api, cid, api.post(f"/campaigns/{cid}/runs", headers=AUTH).json()["run_id"])
    assert first["status"] == "done"
    truths = api.get(f"/campaigns/{cid}/results", headers=AUTH).json()["truths"]
    # A damaged row (which raised TypeError or AttributeError deep in the estimator, failing
    # every later run with "internal error").
    with api.app_state.engine.begin() as conn:
        state = conn.execute(
            sa.select(t_runs.c.state).where(t_runs.c.id == first["run_id"])
        ).scalar_one()
        state[damage] = "x"
        conn.execute(t_runs.update().where(t_runs.c.id == first["run_id"]).values(state=state))
    second = wait(api, cid, api.post(f"/campaigns/{cid}/runs", headers=AUTH).json()["run_id"])
    assert second["status"] == "done", second
    assert second["warm_start_from"] is None  # fitted afresh
    assert api.get(f"/campaigns/{cid}/results", headers=AUTH).json()["truths"] == truths


# ------------------------------------------------------------------ a refused submission
def test_a_refused_submission_counts_as_spent_and_the_worker_goes_on(live, tmp_path, capsys):
    base, api = live
    made = make_campaign(api, budget=10.0)
    state = tmp_path / "w.json"
    code = Requester(base, REQUESTER).issue_codes(made["id"])["codes"][0]
    worker = Worker.enrol(base, made["id"], "erin", state, code=code)
    assert worker.submit({"t0": "yes"})["spent_epsilon"] == pytest.approx(1.0)
    # t0 again: the server refuses it (409, already reported) after it received the release.
    with pytest.raises(ServiceError, match="already reported.*counts as spent.*never sent again"):
        worker.submit({"t0": "no"})
    saved = json.loads(state.read_text())
    assert saved["pending"] is None and saved["spent_epsilon"] == pytest.approx(2.0)
    assert saved["refused"][0]["tasks"] == ["t0"] and saved["refused"][0]["epsilon"] == 1.0
    # The next task goes through (it used to replay the refused body, refused again, forever).
    answers = tmp_path / "a.csv"
    answers.write_text("task,answer\nt1,yes\n")
    code, out, err = cli(["client", "submit", str(answers), "--state", str(state)], capsys)
    assert code == 0 and "spent epsilon 3 of 10" in out, err
    assert counts(api) == (2, 2)
    with pytest.raises(ValidationError, match="Nothing is waiting"):
        Worker(state).resend()
    # The CLI says the same in one line.
    answers.write_text("task,answer\nt1,no\n")
    code, _, err = cli(["client", "submit", str(answers), "--state", str(state)], capsys)
    # (the line before it is the client's ceiling notice, printed before anything is sent)
    errors = [line for line in err.splitlines() if line.startswith("privtd: error")]
    assert code != 0 and len(errors) == 1 and "counts as spent" in errors[0], err
    assert json.loads(state.read_text())["spent_epsilon"] == pytest.approx(4.0)


def test_the_refused_replay_attack_finds_the_worker_going_on(url):
    # benchmarks/attacks/refused_replay.py: before, 0 of 3 later tasks stored, the refused body
    # sent 4 times, epsilon 1 counted of 2 released.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "attacks"))
    from refused_replay import attack

    got = attack(url, later=3)
    assert got["later_stored"] == 3 and got["refused_body_sent"] == 1
    assert got["epsilon_counted"] == got["epsilon_released"] == 5.0


def test_a_transient_failure_keeps_the_body_and_a_final_one_drops_it(tmp_path, monkeypatch):
    import httpx

    state = tmp_path / "w.json"
    body = {
        "mechanism": {"name": "one-layer", "params": {}},
        "reports": [{"task": "t0", "value": "a"}],
    }
    pending = {"key": "k", "body": body, "epsilon": 3.0, "cost": 1.0}
    state.write_text(
        json.dumps(
            {
                "url": "http://x",
                "campaign_id": "c",
                "name": "w",
                "worker_id": "i",
                "token": "t",
                "budget": 10.0,
                "spent_epsilon": 2.0,
                "pending": pending,
            }
        )
    )
    busy = FakeResponse(409, {"detail": "concurrent"}, {"retry-after": "1"})
    for failure in (FakeResponse(503, {"detail": "down"}), httpx.ConnectError("no"), busy):
        scripted(monkeypatch, [failure] * 3)
        with pytest.raises(ServiceError) as caught:
            Worker(state, retries=2).resend()
        assert caught.value.transient
        kept = json.loads(state.read_text())
        assert kept["pending"] == pending and kept["spent_epsilon"] == 2.0  # sent again later
    calls, _ = scripted(monkeypatch, [FakeResponse(422, {"detail": "Unknown task(s)"})])
    with pytest.raises(ServiceError, match="Unknown task.*counts as spent"):
        Worker(state, retries=2).resend()
    assert len(calls) == 1
    dropped = json.loads(state.read_text())
    assert dropped["pending"] is None and dropped["spent_epsilon"] == 3.0
    assert dropped["refused"] == [
        {"key": "k", "tasks": ["t0"], "epsilon": 1.0, "detail": "Unknown task(s)"}
    ]


# ------------------------------------------------------------------ the client's retries
class FakeResponse:
    def __init__(self, status, body=None, headers=None):
        self.status_code = status
        self.headers = headers or {}
        self._body = body
        self.content = b"" if body is None else json.dumps(body).encode()
        self.text = self.content.decode()

    def json(self):
        return self._body


def scripted(monkeypatch, script):
    """Replace httpx.request by ``script`` (responses or exceptions, in order); record sleeps."""
    import httpx

    calls, sleeps = [], []

    def request(method, url, **kwargs):
        calls.append((method, url, kwargs.get("headers", {}).get("Idempotency-Key")))
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    monkeypatch.setattr(httpx, "request", request)
    monkeypatch.setattr(client_module.time, "sleep", sleeps.append)
    return calls, sleeps


def test_the_client_retries_transient_failures_with_backoff(monkeypatch):
    import httpx

    ok = FakeResponse(200, {"fine": True})
    script = [
        httpx.ConnectError("refused"),
        FakeResponse(503, {"detail": "busy"}),
        httpx.ReadTimeout("slow"),
        FakeResponse(409, {"detail": "concurrent"}, {"retry-after": "1"}),
        FakeResponse(502, {"detail": "gateway"}),
        FakeResponse(500, {"detail": "oops"}),
        ok,
    ]
    calls, sleeps = scripted(monkeypatch, script)
    out = client_module._request(
        "POST", "http://x/s", "tok", {}, {"Idempotency-Key": "k"}, retries=6
    )
    assert out == {"fine": True} and len(calls) == 7
    assert {c[2] for c in calls} == {"k"}  # every try under the same key
    assert sleeps == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0]  # doubling, capped at 5 s
    # Out of tries: a transient error, which a Worker keeps pending.
    calls, sleeps = scripted(monkeypatch, [FakeResponse(503, {"detail": "down"})] * 3)
    with pytest.raises(ServiceError, match="503: down") as caught:
        client_module._request("GET", "http://x/", None, None, retries=2)
    assert caught.value.transient and len(calls) == 3 and sleeps == [0.2, 0.4]
    calls, _ = scripted(monkeypatch, [httpx.ConnectError("no")] * 2)
    with pytest.raises(ServiceError, match="cannot reach") as caught:
        client_module._request("GET", "http://x/", None, None, retries=1)
    assert caught.value.transient
    # A 4xx is final at once: no retry.
    calls, sleeps = scripted(monkeypatch, [FakeResponse(422, {"detail": "bad"})])
    with pytest.raises(ServiceError, match="422: bad") as caught:
        client_module._request("GET", "http://x/", None, None)
    assert not caught.value.transient and len(calls) == 1 and sleeps == []


# ------------------------------------------------------------------ kill -9 on PostgreSQL
@pytest.mark.parametrize("url", ["postgresql"], indirect=True)
def test_load_script_survives_kill_9_on_postgresql(url):
    # tests/test_service.py runs it on SQLite; here the same on PostgreSQL, smaller.
    script = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "load_service.py")
    cmd = [os.sys.executable, script, "--db", url, "--workers", "10", "--answers", "10000"]
    done = subprocess.run(
        [*cmd, "--crash", "--crash-after", "0.5"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exactly_once"] and result["answers"] == result["stored_reports"] == 10000
    assert result["retries"] > 0  # the kill did land in the middle of the load


# ------------------------------------------------------------------ /docs on a closed network
def test_docs_are_served_without_any_outside_host(tmp_path):
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", requester_token=REQUESTER)
    with TestClient(app) as api:
        for page in ("/docs", "/redoc"):
            html = api.get(page)
            assert html.status_code == 200
            assert not re.search(r"https?://", html.text), html.text  # every asset is local
            assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
            assert any(a.endswith(".js") for a in assets), assets
            for asset in assets:
                got = api.get(asset)
                assert got.status_code == 200 and len(got.content) > 1000, asset
    app.state.engine.dispose()


def test_docs_render_in_a_browser_offline(live, browser):
    base, _ = live
    page = browser.new_page()
    page.set_default_timeout(15_000)
    outside = []

    def only_here(route):
        if route.request.url.startswith(base):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_here)
    page.goto(base + "/docs")
    page.locator(".opblock").first.wait_for()  # Swagger UI drew the operations
    assert page.locator(".opblock").count() >= 8
    assert outside == []


# ------------------------------------------------------------------ the browser page
def test_the_page_counts_a_refused_submission_and_goes_on(live, browser):
    base, api = live
    made = make_campaign(api, epsilon=1.0, budget=10.0, tasks=[{"key": f"t{i}"} for i in range(3)])
    page = browser.new_page()
    page.set_default_timeout(10_000)
    sent = []
    page.on("request", lambda r: sent.append(r) if r.url.endswith("/submissions") else None)
    page.goto(base + f"/collect?campaign={made['id']}&code={invite(api, made['id'])}")
    page.fill("#name", "fay")
    page.click("text=Enrol")
    page.locator("select[data-task=t0]").wait_for()
    page.select_option("select[data-task=t0]", "yes")
    page.click("text=Randomize and send")
    page.get_by_text("Sent 1 randomized answer(s)").wait_for()
    # Reopened, the page offers t0 again; the server refuses it (already reported).
    page.reload()
    page.locator("select[data-task=t0]").wait_for()
    page.select_option("select[data-task=t0]", "no")
    page.click("text=Randomize and send")
    page.get_by_text("Refused by the server").wait_for()
    assert "epsilon 2.000 of 10" in page.locator("#status").text_content()
    # The worker goes on: t1 is sent (the refused body is not replayed before it, nor after).
    page.select_option("select[data-task=t0]", "")
    page.select_option("select[data-task=t1]", "yes")
    page.click("text=Randomize and send")
    page.get_by_text("Sent 1 randomized answer(s)").wait_for()
    assert "epsilon 3.000 of 10" in page.locator("#status").text_content()
    page.reload()
    page.locator("select[data-task=t0]").wait_for()
    keys = [r.headers["idempotency-key"] for r in sent]
    assert len(keys) == 3 and len(set(keys)) == 3  # the refused one went out once
    assert counts(api) == (2, 2)
    state = page.evaluate(f"JSON.parse(localStorage.getItem('privtd:{made['id']}'))")
    assert state["pending"] is None and state["spent"] == pytest.approx(3.0)
    assert len(state["refused"]) == 1


def test_the_page_refuses_answers_outside_the_domain(live, browser):
    base, api = live
    made = make_campaign(
        api,
        mechanism="krr-null",
        epsilon=2.0,
        labels=None,
        params={"low": 1, "high": 5},
        budget=20.0,
        tasks=[{"key": "constructor"}, {"key": "__proto__"}, {"key": "t2"}],
    )
    page = browser.new_page()
    page.set_default_timeout(10_000)
    page.goto(base + f"/collect?campaign={made['id']}&code={invite(api, made['id'])}")
    page.fill("#name", "gus")
    page.click("text=Enrol")
    page.locator("input[data-task=t2]").wait_for()
    page.fill("input[data-task=t2]", "9")
    page.click("text=Randomize and send")
    page.get_by_text('Not sent: answer 9 to task "t2" is not an integer from 1 to 5').wait_for()
    assert counts(api) == (0, 0)


# ------------------------------------------------------------------ perturb.js under Node
NODE = __import__("shutil").which("node")
SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "src", "privtd", "service", "static", "perturb.js"
)


def node(program):
    if NODE is None:
        if os.environ.get("PRIVTD_TEST_NODE") == "require":
            pytest.fail("Node.js is required here.")
        pytest.skip("needs Node.js")
    uri = "file://" + os.path.abspath(SCRIPT)
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", f"import * as m from {json.dumps(uri)};\n{program}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refusals(mechanism, cases, tasks):
    """perturbWorker on each answers object: the error message, or the release."""
    return node(
        f"""
        const out = [];
        for (const answers of {json.dumps(cases)}) {{
          try {{
            out.push(m.perturbWorker({json.dumps(mechanism)}, answers, null, {json.dumps(tasks)}));
          }} catch (e) {{ out.push(e.message); }}
        }}
        process.stdout.write(JSON.stringify(out));
        """
    )


def test_perturb_js_refuses_answers_outside_the_domain():
    krr = {"name": "krr-null", "params": {"keep": 0.9, "low": 1, "high": 4}}
    got = refusals(krr, [{"t": 5}, {"t": 0}, {"t": 2.5}, {"t": "x"}, {"u": 2}], ["t"])
    # Before: 5 (high + 1) became a silent NULL, 0 an out-of-range report.
    assert got[:4] == [
        'answer 5 to task "t" is not an integer from 1 to 4',
        'answer 0 to task "t" is not an integer from 1 to 4',
        'answer 2.5 to task "t" is not an integer from 1 to 4',
        'answer "x" to task "t" is not an integer from 1 to 4',
    ]
    assert got[4] == 'task "u" is not one of the campaign\'s tasks'
    lap = {"name": "laplace", "params": {"scale": 1.0, "low": 0, "high": 4, "fill": None}}
    got = refusals(lap, [{"t": 99}, {"t": -1}, {"t": None}], ["t"])
    assert got == [
        'answer 99 to task "t" is not an integer from 0 to 4',
        'answer -1 to task "t" is not an integer from 0 to 4',
        'answer null to task "t" is not an integer from 0 to 4',
    ]


def test_perturb_js_takes_tasks_named_like_object_properties():
    # A task "constructor" read Object.prototype.constructor (NaN released); a "__proto__"
    # answer set in a plain object vanished (a NULL released instead).
    lap = {"name": "laplace", "params": {"scale": 1.0, "low": 0, "high": 4, "fill": 2.0}}
    n = 20_000
    out = node(
        f"""
        const mech = {json.dumps(lap)};
        const tasks = ["constructor", "__proto__", "toString"];
        const rows = [];
        for (let i = 0; i < {n}; i++) {{
          // An answered "constructor" and "__proto__", and "toString" left to the fill; then
          // the same three tasks with no answer at all.
          const form = [["constructor", "4"], ["__proto__", "0"], ["toString", ""]];
          const answers = m.collectAnswers(form, null);
          rows.push([...m.perturbWorker(mech, answers, null, tasks).map((p) => p[1]),
                     ...m.perturbWorker(mech, {{}}, null, tasks).map((p) => p[1])]);
        }}
        process.stdout.write(JSON.stringify(rows));
        """
    )
    values = np.array(out, dtype=float)
    assert np.isfinite(values).all()
    # Means 4, 0 and the fill 2; Laplace(1) has sd sqrt(2): 6 standard errors.
    tolerance = 6 * np.sqrt(2 / n)
    np.testing.assert_allclose(values.mean(axis=0), [4, 0, 2, 2, 2, 2], atol=tolerance)
