"""A campaign's cost to one worker against the workers' default ceiling, checked when it is made;
and a worker who lost its token recovering with the code shown at enrolment, on SQLite and on
PostgreSQL: the same worker and the same spent epsilon (never a fresh budget), a code that
works once and in its own campaign only, wrong codes answered alike and rate-limited."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
import sqlalchemy as sa  # noqa: E402

import test_service as svc  # noqa: E402
from cli_runner import run_cli as cli  # noqa: E402
from privtd.client import Ceiling, ServiceError, Worker  # noqa: E402
from privtd.errors import ValidationError  # noqa: E402
from privtd.service import recovery  # noqa: E402
from test_service import AUTH, REQUESTER, campaign_body, invite, make_campaign  # noqa: E402

# The service tests' fixtures: each database (SQLite, PostgreSQL), the API in-process or live.
url, api, live = svc.url, svc.api, svc.live

LABELS = ["no", "yes"]


def tasks(n):
    return [{"key": f"t{i}"} for i in range(n)]


def submission(values, params, keys=None):
    keys = keys or [f"t{i}" for i in range(len(values))]
    return {
        "mechanism": {"name": "one-layer", "params": params},
        "reports": [{"task": k, "value": v} for k, v in zip(keys, values, strict=True)],
    }


def post(api, campaign_id, body, headers):
    key = {"Idempotency-Key": secrets.token_hex(8)}
    return api.post(f"/campaigns/{campaign_id}/submissions", json=body, headers=headers | key)


def enrolled(api, campaign_id, name):
    body = {"name": name, "code": invite(api, campaign_id)}
    r = api.post(f"/campaigns/{campaign_id}/workers", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def recover_body(code):
    return {
        "code": code,
        "token": secrets.token_urlsafe(32),
        "next_code": secrets.token_urlsafe(32),
    }


# --------------------------------------------------------------------- the campaign's cost
def test_a_campaign_past_the_default_lifetime_ceiling_is_refused_with_the_remedies(api):
    # 108 tasks at epsilon 1, budget 108: before, it was made, then every worker who answered
    # them all was refused at submit ("past your ceiling of 100").
    r = api.post("/campaigns", json=campaign_body(tasks=tasks(108), budget=108.0), headers=AUTH)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "\n" not in detail
    assert "answers all 108 tasks of this campaign spends epsilon 108" in detail
    assert "default ceiling of 100" in detail
    assert "set the budget to at most 100 (a worker then answers at most 100 tasks)" in detail
    assert "cap each worker at 100 answers (max_answers_per_worker" in detail
    assert "workers_raise_ceiling" in detail
    # A budget of 200 over 300 tasks: the budget stops each worker, at 200.
    r = api.post("/campaigns", json=campaign_body(tasks=tasks(300), budget=200.0), headers=AUTH)
    assert r.status_code == 422 and "spend its whole budget of 200" in r.json()["detail"]
    # Each remedy is taken.
    assert make_campaign(api, tasks=tasks(108), budget=100.0)["warning"] is None
    capped = make_campaign(api, tasks=tasks(108), budget=108.0, max_answers_per_worker=100)
    assert capped["max_answers_per_worker"] == 100 and capped["warning"] is None
    assert capped["mechanism"]["answers_per_draw"] == 100
    raised = make_campaign(api, tasks=tasks(108), budget=108.0, workers_raise_ceiling=True)
    assert "tell them to raise it" in raised["warning"]
    # A budget far past the tasks' cost is no refusal: 20 answers cost 20 whatever it says.
    assert make_campaign(api, tasks=tasks(20), budget=1000.0)["warning"] is None


def test_a_cap_per_worker_is_kept_at_submit_and_bounds_a_shared_draw(api):
    made = make_campaign(api, tasks=tasks(10), budget=10.0, max_answers_per_worker=3)
    params = made["mechanism"]["params"]
    who = bearer(enrolled(api, made["id"], "alice")["token"])
    assert post(api, made["id"], submission(["no"] * 2, params), who).status_code == 201
    r = post(api, made["id"], submission(["no"] * 2, params, ["t5", "t6"]), who)
    assert r.status_code == 409
    assert "at most 3 answers per worker; this worker sent 2, so send at most 1" in r.text
    assert post(api, made["id"], submission(["no"], params, ["t5"]), who).status_code == 201
    # Two-layer with a = 0 over 100 tasks keeps ln 100 = 4.6 per answer for a worker who
    # answers all at once: refused; capped at 20 answers per worker, ln 20 = 3.0: made.
    two = {"mechanism": "two-layer", "epsilon": 1.0, "tasks": tasks(100), "budget": 100.0}
    r = api.post("/campaigns", json=campaign_body(**two), headers=AUTH)
    assert r.status_code == 422 and "cap each worker at 20 answers" in r.text
    made = make_campaign(api, **two, max_answers_per_worker=20)
    assert made["mechanism"]["answers_per_draw"] == 20
    assert made["mechanism"]["answer_epsilon"] == pytest.approx(3.0, abs=0.01)
    # A mechanism that releases the whole row cannot take part of it.
    row = {"mechanism": "krr-null", "params": {"low": 1, "high": 5}, "labels": None}
    r = api.post("/campaigns", json=campaign_body(**row, max_answers_per_worker=5), headers=AUTH)
    assert r.status_code == 422 and "releases a worker's whole row" in r.text


def test_campaign_create_on_the_command_line_refuses_and_takes_the_remedies(live, tmp_path, capsys):
    base, _ = live
    path = tmp_path / "tasks.csv"
    path.write_text("task\n" + "".join(f"t{i}\n" for i in range(108)))
    create = [
        "campaign", "create", base, "--tasks", str(path), "--mechanism", "one-layer",
        "--epsilon", "1", "--labels", "no,yes", "--budget", "108", "--token", REQUESTER,
    ]  # fmt: skip
    code, _, err = cli(create, capsys)
    assert code != 0 and "Traceback" not in err
    assert "spends epsilon 108" in err and "max_answers_per_worker=100" in err
    # The server's refusal names the parameters; the CLI names its own options for them.
    assert err.strip().endswith("(CLI: --max-answers, --workers-raise-ceiling).")
    code, out, _ = cli([*create, "--max-answers", "100"], capsys)
    assert code == 0, out
    code, _, err = cli([*create, "--workers-raise-ceiling"], capsys)
    assert code == 0 and "tell them to raise it" in err


# --------------------------------------------------------------------- recovery
def test_recovery_keeps_the_worker_and_its_spent_epsilon(api):
    made = make_campaign(api, budget=3.0)
    params = made["mechanism"]["params"]
    alice = enrolled(api, made["id"], "alice")
    assert len(alice["recovery_code"]) >= 43
    old = bearer(alice["token"])
    assert post(api, made["id"], submission(["no", "yes"], params), old).status_code == 201
    body = recover_body(alice["recovery_code"])
    r = api.post(f"/campaigns/{made['id']}/recovery", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["worker_id"] == alice["worker_id"] and got["name"] == "alice"
    # The ledger carries over: 2 of 3 spent, as before.
    assert got["spent_epsilon"] == pytest.approx(2.0) and not got["replayed"]
    # The old token no longer works; the new one is the same worker with the same budget.
    assert post(api, made["id"], submission(["no"], params, ["t5"]), old).status_code == 401
    new = bearer(body["token"])
    r = post(api, made["id"], submission(["no", "no"], params, ["t5", "t6"]), new)
    assert r.status_code == 409 and "budget" in r.text  # 2 + 2 > 3: no fresh budget
    r = post(api, made["id"], submission(["yes"], params, ["t0"]), new)
    assert r.status_code == 409 and "already reported" in r.text  # its reports are its own
    assert post(api, made["id"], submission(["no"], params, ["t5"]), new).status_code == 201
    with api.app_state.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT name, spent_epsilon FROM workers")).all()
    assert [(n, pytest.approx(s)) for n, s in rows] == [("alice", 3.0)]
    # A retry of the same request (its answer lost) reads the same outcome.
    r = api.post(f"/campaigns/{made['id']}/recovery", json=body)
    assert r.status_code == 200 and r.json()["replayed"]
    assert r.json()["spent_epsilon"] == pytest.approx(3.0)
    # The next code works, once.
    again = recover_body(body["next_code"])
    assert api.post(f"/campaigns/{made['id']}/recovery", json=again).status_code == 200


def test_a_used_foreign_or_made_up_code_is_refused_alike_and_spends_nothing(api):
    made = make_campaign(api)
    other = make_campaign(api, name="other")
    alice = enrolled(api, made["id"], "alice")
    bob = enrolled(api, other["id"], "bob")
    first = recover_body(alice["recovery_code"])
    assert api.post(f"/campaigns/{made['id']}/recovery", json=first).status_code == 200
    answers = []
    for campaign_id, code in (
        (made["id"], alice["recovery_code"]),  # used
        (made["id"], bob["recovery_code"]),  # another campaign's
        (made["id"], secrets.token_urlsafe(32)),  # made up
        (made["id"], alice["token"]),  # a token is no recovery code
    ):
        r = api.post(f"/campaigns/{campaign_id}/recovery", json=recover_body(code))
        answers.append((r.status_code, r.json()["detail"]))
    # The same answer each time: a prober learns nothing about which codes or workers exist.
    assert set(answers) == {(403, "Unknown or used recovery code for this campaign.")}
    # The requester's token does not help either: recovery needs the worker's code.
    r = api.post(f"/campaigns/{made['id']}/recovery", json=recover_body("guess"), headers=AUTH)
    assert r.status_code == 403
    # Bob's code was not spent by the attempt in the wrong campaign.
    r = api.post(f"/campaigns/{other['id']}/recovery", json=recover_body(bob["recovery_code"]))
    assert r.status_code == 200 and r.json()["name"] == "bob"
    # A request cannot reuse the code as its new token or next code.
    same = {"code": "x" * 40, "token": "x" * 40, "next_code": "y" * 40}
    assert api.post(f"/campaigns/{made['id']}/recovery", json=same).status_code == 422


def test_wrong_codes_are_rate_limited_even_the_right_one_after(api):
    made = make_campaign(api)
    alice = enrolled(api, made["id"], "alice")
    where = f"/campaigns/{made['id']}/recovery"
    for _ in range(recovery.MAX_FAILURES):
        assert api.post(where, json=recover_body(secrets.token_urlsafe(32))).status_code == 403
    r = api.post(where, json=recover_body(alice["recovery_code"]))
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "\n" not in r.json()["detail"]
    # The code itself is intact: once the window has passed it works.
    api.app_state.recovery_limit = recovery.FailureLimit()
    assert api.post(where, json=recover_body(alice["recovery_code"])).status_code == 200


def test_the_failure_limit_forgets_old_failures_and_bounds_its_memory(monkeypatch):
    clock = [0.0]
    limit = recovery.FailureLimit(max_failures=3, window_s=10.0, clock=lambda: clock[0])
    for _ in range(3):
        limit.fail("a")
    assert limit.retry_after("a") == pytest.approx(10.0) and limit.retry_after("b") == 0
    clock[0] = 10.5
    assert limit.retry_after("a") == 0
    monkeypatch.setattr(recovery, "MAX_CLIENTS", 5)
    for i in range(20):
        limit.fail(f"c{i}")
    assert len(limit._failures) <= 5


def test_a_worker_gets_a_new_recovery_code_with_its_token(api):
    made = make_campaign(api)
    alice = enrolled(api, made["id"], "alice")
    r = api.post(f"/campaigns/{made['id']}/recovery-code", headers=bearer(alice["token"]))
    assert r.status_code == 201
    fresh = r.json()["recovery_code"]
    where = f"/campaigns/{made['id']}/recovery"
    assert api.post(where, json=recover_body(alice["recovery_code"])).status_code == 403
    assert api.post(where, json=recover_body(fresh)).status_code == 200
    # Without a worker token of this campaign, none.
    assert api.post(f"/campaigns/{made['id']}/recovery-code", headers=AUTH).status_code == 401


def test_the_client_and_the_cli_recover_a_lost_state_file(live, tmp_path, capsys):
    base, api = live
    made = make_campaign(api, budget=4.0)
    ledger = tmp_path / "ledger.json"
    worker = Worker.enrol(
        base, made["id"], "alice", tmp_path / "a.json", code=invite(api, made["id"]), ledger=ledger
    )
    code = worker.recovery_code
    assert code and code not in (tmp_path / "a.json").read_text()  # never kept beside the token
    worker.submit({"t0": "yes", "t1": "no"})
    (tmp_path / "a.json").unlink()  # lost, and the ledger with it
    ledger.unlink()
    back = Worker.recover(base, made["id"], code, tmp_path / "b.json", ledger=ledger)
    assert back.state["worker_id"] == worker.state["worker_id"]
    assert back.state["spent_epsilon"] == pytest.approx(2.0)
    assert Ceiling(ledger).total == pytest.approx(2.0)  # the lifetime total counts it again
    back.submit({"t2": "yes", "t3": "no"})
    with pytest.raises(Exception, match="budget"):  # 4 of 4 spent: recovery gave no more
        back.submit({"t4": "yes"})
    with pytest.raises(ServiceError, match="Unknown or used recovery code"):
        Worker.recover(base, made["id"], code, tmp_path / "c.json")
    # The command line, with the code the client printed.
    status, out, err = cli(
        ["client", "recover", base, made["id"], "--code", back.recovery_code,
         "--state", str(tmp_path / "d.json"), "--ledger", str(ledger)],
        capsys,
    )  # fmt: skip
    assert status == 0, err
    assert "recovered alice" in out and "spent epsilon 4 of 4" in out
    fresh = err.split("recovery code: ")[1].split()[0]
    state = json.loads((tmp_path / "d.json").read_text())
    assert fresh not in json.dumps(state)
    r = api.post(f"/campaigns/{made['id']}/recovery", json=recover_body(fresh))
    assert r.status_code == 200
    # A worker holding its token (this one, enrolled with the client) gets a new code.
    worker = Worker.enrol(
        base, made["id"], "bea", tmp_path / "e.json", code=invite(api, made["id"]), ledger=ledger
    )
    status, _, err = cli(["client", "recovery-code", "--state", str(tmp_path / "e.json")], capsys)
    assert status == 0, err
    newer = err.split("recovery code: ")[1].split()[0]
    where = f"/campaigns/{made['id']}/recovery"
    assert api.post(where, json=recover_body(worker.recovery_code)).status_code == 403
    assert api.post(where, json=recover_body(newer)).json()["name"] == "bea"


def test_the_client_keeps_the_cap_before_perturbing_and_after_recovery(live, tmp_path):
    base, api = live
    made = make_campaign(api, tasks=tasks(10), budget=10.0, max_answers_per_worker=3)
    worker = Worker.enrol(
        base, made["id"], "alice", tmp_path / "a.json", code=invite(api, made["id"])
    )
    worker.submit({"t0": "yes", "t1": "no"})
    with pytest.raises(ValidationError, match="at most 3 answers per worker and this worker"):
        worker.submit({"t2": "yes", "t3": "no"})
    assert worker.state["spent_epsilon"] == pytest.approx(2.0)  # nothing released
    back = Worker.recover(base, made["id"], worker.recovery_code, tmp_path / "b.json")
    assert back.state["answered"] == 2
    with pytest.raises(ValidationError, match="send at most 1 more, not 2"):
        back.submit({"t2": "yes", "t3": "no"})
    back.submit({"t2": "yes"})
    with api.app_state.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one() == 3


# --------------------------------------------------------------------- the page
NODE = shutil.which("node")
STATIC = Path(__file__).parents[1] / "src" / "privtd" / "service" / "static"

# The page's module under Node against the live server: a minimal DOM (the elements the page
# reads and writes), localStorage as a plain object, the page's relative fetches resolved
# against the server. Each load evaluates the page afresh on the storage it is given.
HARNESS = """
const base = process.argv[1], query = process.argv[2], steps = JSON.parse(process.argv[3]);
const make = (tag) => ({
  tag, textContent: "", hidden: true, value: "", dataset: {}, children: [],
  append(...c) { this.children.push(...c); }, replaceChildren() { this.children = []; },
  querySelectorAll() {
    const out = [], walk = (e) => { for (const c of e.children || []) {
      if (c.dataset && c.dataset.task !== undefined) out.push(c); walk(c); } };
    walk(this); return out;
  },
});
let store = {}, elements = new Map(), loads = 0, shown = null;
globalThis.localStorage = {
  getItem: (k) => (k in store ? store[k] : null), setItem: (k, v) => { store[k] = String(v); },
  removeItem: (k) => { delete store[k]; },
};
globalThis.document = {
  getElementById: (id) => {
    if (!elements.has(id)) elements.set(id, make(id));
    return elements.get(id);
  },
  createElement: make,
};
globalThis.Option = class { constructor(text, value) { this.text = text; this.value = value; } };
globalThis.location = { search: query, origin: base, reload() {} };
const realFetch = fetch;
globalThis.fetch = (u, o) => realFetch(new URL(u, base + "/"), o);
const text = (id) => document.getElementById(id).textContent;
const event = { preventDefault() {} };
const out = [];
for (const step of steps) {
  if (step.load) {
    if (step.load === "fresh") store = {};
    elements = new Map();
    await import(`${PAGE}?load=${++loads}`);
  }
  if (step.enrol) {
    document.getElementById("name").value = step.enrol;
    await document.getElementById("enrol").onsubmit(event);
  }
  if (step.answer) {
    for (const input of document.getElementById("tasks").querySelectorAll())
      input.value = step.answer.includes(input.dataset.task) ? "yes" : "";
    await document.getElementById("answers").onsubmit(event);
  }
  if (step.recover) {
    // "shown": the code the page showed last, which the worker wrote down.
    const code = step.recover === "shown" ? shown : step.recover;
    document.getElementById("recovery-code").value = code;
    await document.getElementById("recover").onsubmit(event);
  }
  if (text("recovery")) shown = text("recovery").split("Your recovery code: ")[1].split(" ")[0];
  out.push({
    plan: text("plan"), status: text("status"), recovery: text("recovery"),
    enrol: !document.getElementById("enrol").hidden,
    recoverForm: !document.getElementById("recover").hidden,
    state: JSON.parse(store[`privtd:${new URLSearchParams(query).get("campaign")}`] || "null"),
  });
}
process.stdout.write(JSON.stringify(out));
"""


def run_page(base, query, steps, tmp_path):
    source = (STATIC / "collect.html").read_text()
    script = source.split('<script type="module">')[1].split("</script>")[0]
    script = script.replace('"./static/', f'"{STATIC.as_uri()}/')
    # Evaluated to its end: the import that loads the page waits for main().
    script = script.replace("main().catch(", "await main().catch(")
    page = tmp_path / "page.mjs"
    page.write_text(script)
    harness = HARNESS.replace("${PAGE}", page.as_uri())
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", harness, base, query, json.dumps(steps)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(
    NODE is None and os.environ.get("PRIVTD_TEST_NODE") != "require",
    reason="needs Node.js to run the page's module",
)
def test_the_page_shows_the_cost_first_and_recovers_a_worker_who_lost_its_storage(live, tmp_path):
    base, api = live
    made = make_campaign(api, tasks=tasks(108), budget=108.0, workers_raise_ceiling=True)
    query = f"?campaign={made['id']}&code={invite(api, made['id'])}"
    first, enrolled_, sent, lost, back, reopened = run_page(
        base,
        query,
        [
            {"load": "fresh"},
            {"enrol": "dana"},
            {"answer": ["t0", "t1", "t2"]},
            {"load": "fresh"},  # the browser's storage is lost
            {"recover": "shown"},
            {"load": "same"},
        ],
        tmp_path,
    )
    # Before the first answer (before enrolling, even): the cost and what fits.
    assert "Answering all 108 tasks in one submission costs epsilon 108.000" in first["plan"]
    assert "you can answer 100 of the 108 tasks" in first["plan"]
    assert first["enrol"] and first["recoverForm"]
    # Enrolled: the recovery code is shown, and not stored.
    code = enrolled_["recovery"].split("Your recovery code: ")[1].split(" ")[0]
    assert len(code) >= 43 and code not in json.dumps(enrolled_["state"])
    assert sent["state"]["spent"] == pytest.approx(3.0)
    assert lost["state"] is None and lost["enrol"] and lost["recoverForm"]
    # Recovered: the same worker, its 3 spent carried over, a new code shown.
    assert "Recovered: you are dana again" in back["status"]
    assert back["state"]["spent"] == pytest.approx(3.0)
    assert not back["enrol"] and code not in back["recovery"]
    # Reopened: the plan counts what was spent.
    assert "You can still spend 97.000 here" in reopened["plan"]
    assert "you can answer 97 of the 108" in reopened["plan"]
    with api.app_state.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT name, spent_epsilon FROM workers")).all()
    assert [(n, pytest.approx(s)) for n, s in rows] == [("dana", 3.0)]
    # The code shown at enrolment was spent by the recovery.
    r = api.post(f"/campaigns/{made['id']}/recovery", json=recover_body(code))
    assert r.status_code == 403
