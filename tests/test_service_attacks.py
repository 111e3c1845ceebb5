"""Attacks on the collection service: a campaign whose parameters mean
an absurd epsilon (benchmarks/attacks/service_absurd_epsilon.py), self-enrolled identities
and one fake worker sending extreme values (benchmarks/attacks/service_poison.py). Each fails on
the service as it was before the fix (no ceilings, open enrolment, any finite value accepted)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("fastapi")
from scipy import special  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "attacks"))

import service_absurd_epsilon as absurd  # noqa: E402
import service_enrol_names as enrol_names  # noqa: E402
import service_off_grid as off_grid  # noqa: E402
import service_poison as poison  # noqa: E402
import service_two_layer_ceiling as shared  # noqa: E402

import privtd.client as pc  # noqa: E402  (read at run time: each test fails on its own before)
import test_service as svc  # noqa: E402
from privtd.answers import Answers  # noqa: E402
from privtd.inference import make_estimator  # noqa: E402
from privtd.mechanisms import MECHANISMS, make_mechanism  # noqa: E402
from privtd.service import campaigns  # noqa: E402
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
)

# The service tests' fixtures: each database (SQLite, PostgreSQL), the API in-process or live.
url, api, live, browser = svc.url, svc.api, svc.live, svc.browser


# ------------------------------------------------------------------ point 5: the ceilings
def test_the_server_refuses_an_absurd_epsilon_however_it_is_given(api):
    # The attack: natural parameters (f = 1e-300: epsilon 690), epsilon itself, f = 0.
    for label, out in absurd.server_side().items():
        assert out["status"] == 422, (label, out)
    # Infinite, NaN, natural parameters of another mechanism, and a lowered ceiling.
    for body in (
        campaign_body(epsilon=math.inf),
        campaign_body(epsilon=math.nan),
        campaign_body(
            mechanism="exp-gaussian", labels=None, params={"rate": 1e300, "low": 0, "high": 1}
        ),
        campaign_body(
            mechanism="laplace", labels=None, params={"scale": 1e-9, "low": 1, "high": 5}
        ),
        campaign_body(epsilon=10.5),
    ):
        # json.dumps writes Infinity and NaN, as a hand-written client may.
        raw = {**AUTH, "Content-Type": "application/json"}
        response = api.post("/campaigns", content=json.dumps(body), headers=raw)
        assert response.status_code == 422, (body, response.text)
    detail = api.post("/campaigns", json=campaign_body(epsilon=10.5), headers=AUTH).json()
    assert "above this server's ceiling of 10" in detail["detail"]
    assert make_campaign(api, epsilon=10.0)["mechanism"]["epsilon"] == pytest.approx(10.0)


def test_a_campaign_made_under_a_laxer_ceiling_takes_no_reports(url):
    from privtd.service import create_app

    lax = create_app(url, requester_token=REQUESTER, max_epsilon=100.0)
    from fastapi.testclient import TestClient

    with TestClient(lax) as client:
        made = client.post("/campaigns", json=campaign_body(epsilon=20.0), headers=AUTH).json()
        code = client.post(f"/campaigns/{made['id']}/codes", json={}, headers=AUTH).json()
        who = client.post(
            f"/campaigns/{made['id']}/workers", json={"name": "w", "code": code["codes"][0]}
        ).json()
    lax.state.engine.dispose()
    strict = create_app(url, requester_token=REQUESTER)  # the default ceiling, 10
    with TestClient(strict) as client:
        body = submission(["yes"], params=made["mechanism"]["params"])
        response = post(client, made["id"], body, {"Authorization": f"Bearer {who['token']}"})
        assert response.status_code == 422 and "ceiling" in response.json()["detail"]
    strict.state.engine.dispose()
    with pytest.raises(Exception, match="max_epsilon"):
        create_app(url, max_epsilon=math.inf)


def test_the_client_refuses_a_campaign_above_its_ceiling_before_sending_anything():
    out = absurd.client_side()
    # Before the fix: 200 of 200 answers left the device unchanged.
    assert out["sent"] == 0 and out["raw"] == 0 and out["enrolled"] == 0, out
    assert "above your ceiling of 3" in out["refused"] and out["pending"] is None


def test_the_client_recomputes_epsilon_from_the_parameters_it_perturbs_with(tmp_path):
    ceiling = pc.Ceiling(tmp_path / "ledger.json")
    mech = MECHANISMS["one-layer"](f=1e-300, n_labels=2)
    lying = {
        "name": "x",
        "mechanism": {"name": "one-layer", "params": mech.params(), "epsilon": 1.0},
    }
    with pytest.raises(pc.CeilingExceededError, match="epsilon 690.8"):
        ceiling.check_campaign(lying)
    nan = {"name": "x", "mechanism": {"name": "one-layer", "params": {}, "epsilon": math.nan}}
    with pytest.raises(pc.CeilingExceededError):
        ceiling.check_campaign(nan)
    assert not (tmp_path / "ledger.json").exists()  # only checking writes nothing


def test_the_worker_ceiling_per_answer_and_lifetime(live, tmp_path):
    base, api = live
    ledger = tmp_path / "alice-ledger.json"
    pc.Ceiling(ledger).set(lifetime=30.0)
    made = [make_campaign(api, epsilon=1.0, budget=20.0) for _ in range(2)]
    first = pc.Worker.enrol(
        base,
        made[0]["id"],
        "alice",
        tmp_path / "a.json",
        code=invite(api, made[0]["id"]),
        ledger=ledger,
    )
    second = pc.Worker.enrol(
        base,
        made[1]["id"],
        "alice",
        tmp_path / "b.json",
        code=invite(api, made[1]["id"]),
        ledger=ledger,
    )
    # Both loaded the ledger before either spent: each reads it again before spending.
    assert first.epsilon == pytest.approx(1.0)
    first.submit({f"t{i}": "yes" for i in range(20)})
    assert pc.Ceiling(ledger).total == pytest.approx(20.0)
    second.submit({f"t{i}": "no" for i in range(10)})  # 30 of 30
    before = api.get(f"/campaigns/{made[1]['id']}").json()
    with pytest.raises(pc.CeilingExceededError, match="lifetime total .* epsilon 31"):
        second.submit({"t10": "no"})  # the campaign's own budget (20) would allow it
    assert json.loads((tmp_path / "b.json").read_text())["pending"] is None
    # Lowering the per-answer ceiling refuses the next submission, before perturbing.
    pc.Ceiling(ledger).set(per_answer=0.5, lifetime=100.0)
    again = pc.Worker(tmp_path / "b.json")
    with pytest.raises(pc.CeilingExceededError, match="above your ceiling of 0.5"):
        again.submit({"t11": "no"})
    assert api.get(f"/campaigns/{made[1]['id']}").json() == before
    assert pc.Ceiling(ledger).total == pytest.approx(30.0)


def test_the_ceiling_commands(live, tmp_path, capsys):
    base, api = live
    made = make_campaign(api, epsilon=5.0, budget=50.0)
    state = str(tmp_path / "w.json")
    enrol = ["client", "enrol", base, made["id"], "--name", "w", "--state", state]
    code, _, err = cli([*enrol, "--code", invite(api, made["id"])], capsys)
    assert code != 0 and err.count("\n") == 1, err  # one line: the epsilon, the refusal
    assert "epsilon 5 per answer" in err and "above your ceiling of 3" in err
    assert not Path(state).exists()
    ledger = str(tmp_path / "privtd-ledger.json")
    code, out, _ = cli(["client", "ceiling", "--ledger", ledger, "--per-answer", "5"], capsys)
    assert code == 0 and "at most epsilon 5 per answer" in out
    code, _, err = cli([*enrol, "--code", invite(api, made["id"])], capsys)
    assert code == 0, err
    code, _, err = cli(["client", "ceiling", "--per-answer", "-1", "--ledger", ledger], capsys)
    assert code != 0
    Path(ledger).write_text('{"spent": {"x": "lots"}}')  # a damaged ledger: one line, no reset
    code, _, err = cli(["client", "ceiling", "--ledger", ledger], capsys)
    assert code != 0 and err.count("\n") == 1 and "Cannot read" in err, err


def test_the_page_shows_the_epsilon_and_refuses_above_the_ceiling(live, browser):
    base, api = live
    lax = make_campaign(api, epsilon=5.0, budget=50.0)
    page = browser.new_page()
    page.set_default_timeout(10_000)
    sent = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    link = f"{base}/collect?campaign={lax['id']}&code={invite(api, lax['id'])}"
    page.goto(link)
    page.get_by_text("This campaign: epsilon 5.000 per answer").wait_for()
    page.get_by_text("Refused here: this campaign perturbs with epsilon 5.000").wait_for()
    assert page.locator("#enrol").is_hidden() and sent == []
    # The page recomputes epsilon from the parameters it perturbs with: a server that states
    # epsilon 1 next to f = 1e-300 is refused all the same.
    lie = page.evaluate(
        """async () => {
          const m = await import("/static/ceiling.js");
          const c = m.loadCeiling(localStorage);
          return m.refuseCampaign(c, {labels: ["no", "yes"], mechanism: {
            name: "one-layer", epsilon: 1, unit: "answer", params: {f: 1e-300, n_labels: 2}}});
        }"""
    )
    assert "epsilon 690.8" in lie
    # The worker raises its ceiling (its choice): the page then lets it enrol and answer.
    page.click("text=Your privacy ceiling")
    page.fill("#per-answer", "5")
    page.click("text=Save")
    page.get_by_text("Your ceiling: 5 per answer").wait_for()
    page.fill("#name", "erin")
    page.click("text=Enrol")
    page.locator("select[data-task=t0]").wait_for()
    # A lifetime ceiling of 12 allows two answers at epsilon 5, not three.
    page.click("text=Your privacy ceiling")
    page.fill("#lifetime", "12")
    page.click("text=Save")
    page.locator("select[data-task=t0]").wait_for()
    for i in range(3):
        page.select_option(f"select[data-task=t{i}]", "yes")
    page.click("text=Randomize and send")
    page.get_by_text("past your lifetime ceiling of 12").wait_for()
    assert not [u for u in sent if u.endswith("/submissions")]
    page.select_option("select[data-task=t2]", "")
    page.click("text=Randomize and send")
    page.get_by_text("Sent 2 randomized answer(s)").wait_for()


# ------------------------------------------------- two-layer: answers that share one draw
def test_a_two_layer_campaign_past_the_ceilings_through_its_shared_draw_is_refused():
    # The attack: two-layer over 100 tasks with a = 0, b = 1 states epsilon 0 per answer (and
    # at stated 1, a = 0, epsilon 1), but a worker answering all 100 in one submission keeps
    # 4.61 per answer given its other 99 (the mechanism's exact figure). Before the fix the
    # server made both campaigns and a default worker (ceiling 3) sent all 100, billed 0 (or
    # 100 against a true 67.2).
    for case in shared.CASES.values():
        truth = shared.true_figures(case)
        assert truth["per_answer_given_others"] == pytest.approx(math.log(100), abs=1e-3)
        made = shared.creation(case)
        assert made["status"] == 422, made
        assert "epsilon 4.605 per answer, given the worker's other 99" in made["detail"]
        assert "default ceiling of 3" in made["detail"] and "at most 20 tasks" in made["detail"]
        # A server that accepts it anyway: the worker refuses the 100-answer submission before
        # perturbing, and sent 20 at a time (each a fresh draw: 3.00 per answer given the
        # others) every draw is billed its whole release, by the server and in its state.
        out = shared.worker_side(case)
        assert "epsilon 4.605 per answer, given your other 99" in out["refused"]
        assert "Send at most 20 per submission" in out["refused"]
        assert out["largest_batch"] == 20 and out["per_answer_given_others"] <= 3.0
        assert [b["n"] for b in out["batches"]] == [20] * 5
        twenty = shared.true_figures(case, 20)["all_together"]
        for b in out["batches"]:
            assert b["billed"] == pytest.approx(twenty, rel=1e-9)
        assert out["server_spent"] == pytest.approx(5 * twenty, rel=1e-9)
        assert out["worker_spent"] == pytest.approx(5 * twenty, rel=1e-9)


def _floored_two_layer(api):
    """A two-layer campaign of 100 tasks at stated 1 with the flip probability floored at 0.05,
    and its mechanism."""
    made = make_campaign(
        api,
        mechanism="two-layer",
        epsilon=1.0,
        params={"a": 0.05},
        budget=1000.0,
        tasks=[{"key": f"t{i}"} for i in range(100)],
    )
    return made, MECHANISMS["two-layer"](**made["mechanism"]["params"])


def test_a_two_layer_campaign_with_a_floor_is_accepted_and_billed_per_draw(api):
    # What the refusal says to do: a flip probability in [0.0474, 0.953] keeps one answer
    # within 3 whatever the task count. Stated 1, a = 0.05: 2.76 per answer given 99 others,
    # under the floor's bound ln(0.95 / 0.05) = 2.94.
    made, mech = _floored_two_layer(api)
    described = made["mechanism"]
    assert described["answers_per_draw"] == 100
    assert described["answer_epsilon"] == pytest.approx(mech.answer_epsilon(100), rel=1e-12)
    assert described["release_epsilon"] == pytest.approx(mech.release_epsilon(100), rel=1e-12)
    assert described["epsilon"] == pytest.approx(1.0)
    assert 1.0 < described["answer_epsilon"] <= math.log(0.95 / 0.05)
    alice = enrol(api, made["id"], "alice")
    body = submission(["yes"] * 30, params=made["mechanism"]["params"])
    body["mechanism"]["name"] = "two-layer"
    first = post(api, made["id"], body, alice).json()
    # One submission is one draw: billed its whole release, not 30 times one answer's.
    assert first["epsilon"] == pytest.approx(mech.release_epsilon(30), rel=1e-12)
    assert first["epsilon"] != pytest.approx(30 * mech.epsilon)
    rest = submission(
        ["no"] * 70, tasks=[f"t{i}" for i in range(30, 100)], params=body["mechanism"]["params"]
    )
    rest["mechanism"]["name"] = "two-layer"
    second = post(api, made["id"], rest, alice, key="k2").json()
    # Separate submissions are separate draws: their costs add up.
    total = mech.release_epsilon(30) + mech.release_epsilon(70)
    assert second["spent_epsilon"] == pytest.approx(total, rel=1e-12)
    listed = api.get("/campaigns", headers=AUTH).json()[0]
    assert listed["answer_epsilon"] == pytest.approx(described["answer_epsilon"])


def test_a_whole_row_campaign_no_submission_can_carry_is_refused(api):
    # P3's mechanisms release the whole row in one submission (at most 20,000 reports): a
    # campaign of more tasks could take no report, and its figures would be those of a release
    # no submission carries.
    body = campaign_body(
        mechanism="krr-null",
        epsilon=1.0,
        labels=None,
        params={"low": 1, "high": 5},
        tasks=[{"key": f"t{i}"} for i in range(20_001)],
    )
    refused = api.post("/campaigns", json=body, headers=AUTH)
    assert refused.status_code == 422, refused.text
    assert "at most 20000 reports; this campaign has 20001 tasks" in refused.json()["detail"]


def test_the_server_caps_one_submission_per_answer_given_the_others(url):
    # A campaign of 100 two-layer tasks with a = 0, b = 1 made under the old rules (the
    # creation check lifted, as before the fix): a server whose ceiling is 4 takes at most 54
    # reports per submission (ln 54 = 3.99 per answer given the others), and bills what it
    # takes by each draw's whole release.
    from unittest import mock

    from fastapi.testclient import TestClient

    from privtd.service import create_app

    app = create_app(url, requester_token=REQUESTER, max_epsilon=4.0)
    lifted = mock.patch.object(
        campaigns, "check_campaign_epsilon", lambda *a, **k: (0.0, 0.0), create=True
    )
    with TestClient(app) as client, lifted:
        client.app_state = app.state
        made = make_campaign(
            client,
            mechanism="two-layer",
            epsilon=None,
            params={"a": 0.0, "b": 1.0},
            budget=1000.0,
            tasks=[{"key": f"t{i}"} for i in range(100)],
        )
        assert made["mechanism"]["epsilon"] == 0.0
        bob = enrol(client, made["id"], "bob")
        params = made["mechanism"]["params"]

        def send(n, start, key):
            tasks = [f"t{i}" for i in range(start, start + n)]
            body = submission(["yes"] * n, tasks=tasks, params=params)
            body["mechanism"]["name"] = "two-layer"
            return post(client, made["id"], body, bob, key=key)

        refused = send(100, 0, "all")
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert "epsilon 4.60517 per answer, given the worker's other 99" in detail
        assert "ceiling of 4" in detail and "at most 54 reports per submission" in detail
        taken = send(54, 0, "some")
        assert taken.status_code == 201, taken.text
        mech = MECHANISMS["two-layer"](a=0.0, b=1.0, n_labels=2)
        assert taken.json()["epsilon"] == pytest.approx(mech.release_epsilon(54), rel=1e-12)
        assert taken.json()["epsilon"] > 30  # billed 0 before the fix
    app.state.engine.dispose()


def test_each_submission_draws_its_own_flip_probability():
    # The client perturbs each submission with one perturb_worker call and rng=None: a fresh
    # f_u per call, shared by that call's answers only. 20 calls of 2,000 answers under
    # two-layer a = 0, b = 1: the calls' flip rates spread like U(0, 1) (variance 1/12), not
    # like one f_u's binomial noise (variance at most 0.25 / 2000 = 1.25e-4). The sample
    # variance of 20 uniforms is below 0.01 with probability under 1e-9.
    mech = MECHANISMS["two-layer"](a=0.0, b=1.0, n_labels=2)
    rates = [
        np.mean(np.array(mech.perturb_worker(["no"] * 2000, labels=["no", "yes"])) == "yes")
        for _ in range(20)
    ]
    assert np.var(rates, ddof=1) > 0.01, rates
    # Within one call the answers share f_u: each call's rate is one f_u's binomial mean,
    # so two halves of one call agree within the binomial noise (6 sigma of 1,000 draws).
    out = np.array(mech.perturb_worker(["no"] * 2000, labels=["no", "yes"])) == "yes"
    assert abs(out[:1000].mean() - out[1000:].mean()) <= 6 * math.sqrt(0.25 / 1000) * math.sqrt(2)


def test_the_enrol_and_submit_commands_print_both_figures_with_their_units(live, tmp_path, capsys):
    base, api = live
    made, mech = _floored_two_layer(api)
    state = str(tmp_path / "w.json")
    enrol_cmd = ["client", "enrol", base, made["id"], "--name", "w", "--state", state]
    code, _, err = cli([*enrol_cmd, "--code", invite(api, made["id"])], capsys)
    assert code == 0, err
    assert "epsilon 1 per answer alone" in err
    assert (
        f"if you answer all 100 tasks at once: {mech.answer_epsilon(100):.4g} per answer, given "
        f"your other 99 answers of the same draw, {mech.release_epsilon(100):.4g} for all 100 "
        "together"
    ) in err
    answers = tmp_path / "a.csv"
    answers.write_text("task,answer\n" + "".join(f"t{i},yes\n" for i in range(10)))
    code, out, err = cli(["client", "submit", str(answers), "--state", state], capsys)
    assert code == 0, err
    assert (
        f"this submission (one draw): epsilon {mech.answer_epsilon(10):.4g} per answer, given "
        f"your other 9 answers of the same draw, {mech.release_epsilon(10):.4g} for all 10"
    ) in err
    assert f"spent epsilon {mech.release_epsilon(10):g} of 1000" in out


def test_the_page_refuses_a_two_layer_submission_past_the_ceiling_given_the_others(live, browser):
    # The attack in the page, against a server that accepts two-layer a = 0, b = 1 over 100
    # tasks (the creation check lifted, as before the fix). Before: the page checked the stated
    # epsilon 0 and sent all 100 answers (4.61 each given the other 99), counting 0. After: it
    # refuses the 100 on its own figure, sends 20 (3.00 each given the others) and counts their
    # whole release, 12.13, as the server bills it.
    from unittest import mock

    base, api = live
    lifted = mock.patch.object(
        campaigns, "check_campaign_epsilon", lambda *a, **k: (0.0, 0.0), create=True
    )
    with lifted:
        made = make_campaign(
            api,
            mechanism="two-layer",
            epsilon=None,
            params={"a": 0.0, "b": 1.0},
            budget=1000.0,
            tasks=[{"key": f"t{i}"} for i in range(100)],
        )
    mech = MECHANISMS["two-layer"](a=0.0, b=1.0, n_labels=2)
    page = browser.new_page()
    page.set_default_timeout(20_000)
    sent = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    page.goto(f"{base}/collect?campaign={made['id']}&code={invite(api, made['id'])}")
    page.fill("#name", "ivy")
    page.click("text=Enrol")
    page.locator("select[data-task=t99]").wait_for()

    def answer(n):
        page.evaluate(
            f"""() => document.querySelectorAll("select[data-task]").forEach(
                  (s, i) => {{ s.value = i < {n} ? "yes" : ""; }})"""
        )

    answer(100)
    page.click("text=Randomize and send")
    page.get_by_text("epsilon 4.605 per answer, given your other 99 answers").wait_for()
    page.get_by_text("Send at most 20 per submission").wait_for()
    assert not [u for u in sent if u.endswith("/submissions")]
    page.get_by_text("if you answer all 100 tasks at once: 4.605 per answer").wait_for()
    answer(20)
    page.click("text=Randomize and send")
    page.get_by_text("Sent 20 randomized answer(s)").wait_for()
    state = page.evaluate(f"() => JSON.parse(localStorage.getItem('privtd:{made['id']}'))")
    assert state["spent"] == pytest.approx(mech.release_epsilon(20), rel=1e-9)
    ledger = page.evaluate("() => JSON.parse(localStorage.getItem('privtd:ceiling'))")
    assert sum(ledger["spent"].values()) == pytest.approx(mech.release_epsilon(20), rel=1e-9)


# ------------------------------------------------------------------ point 6: enrolment
def test_self_enrolment_is_refused_by_default():
    out = poison.sybils(n=20)
    # Before the fix: 20 of 20 enrolled, each reporting t0 with a fresh budget.
    assert out["enrolled"] == 0 and out["reports_on_t0"] == 0 and out["statuses"] == [401], out


def test_enrolment_codes(api):
    made = make_campaign(api, max_workers=3)
    assert made["open_enrolment"] is False and made["warning"] is None
    cid = made["id"]
    code = invite(api, cid)
    enrol = f"/campaigns/{cid}/workers"
    assert api.post(enrol, json={"name": "a", "code": code}).status_code == 201
    reused = api.post(enrol, json={"name": "b", "code": code})
    assert reused.status_code == 403 and "already used" in reused.json()["detail"]
    assert api.post(enrol, json={"name": "b", "code": "forged"}).status_code == 403
    other = make_campaign(api)
    foreign = api.post(enrol, json={"name": "b", "code": invite(api, other["id"])})
    assert foreign.status_code == 403
    short = api.post(f"/campaigns/{cid}/codes", json={"expires_in_s": 0.05}, headers=AUTH)
    time.sleep(0.1)
    expired = api.post(enrol, json={"name": "b", "code": short.json()["codes"][0]})
    assert expired.status_code == 403 and "expired" in expired.json()["detail"]
    codes = api.post(f"/campaigns/{cid}/codes", json={"count": 5}, headers=AUTH).json()["codes"]
    assert len(set(codes)) == 5
    assert api.post(enrol, json={"name": "b", "code": codes[0]}).status_code == 201
    assert api.post(enrol, json={"name": "c", "code": codes[1]}).status_code == 201
    full = api.post(enrol, json={"name": "d", "code": codes[2]})
    assert full.status_code == 403 and "full" in full.json()["detail"]
    # Codes are the requester's to issue, and stored hashed.
    assert api.post(f"/campaigns/{cid}/codes", json={}).status_code == 401
    with api.app_state.engine.connect() as conn:
        import sqlalchemy as sa

        dump = json.dumps(
            [list(map(str, r)) for r in conn.execute(sa.text("SELECT * FROM enrolment_codes"))]
        )
    assert not any(c in dump for c in codes)


def test_enrolment_without_a_valid_code_tells_no_names(url):
    # The attack: probe enrolment with each candidate name. Before, the name was checked first
    # (409 if enrolled), so a stranger with no code, or a made-up one, found 20 of 20 names.
    out = enrol_names.probe(url)
    for stranger in ("no_code", "wrong_code"):
        assert out[stranger]["found"] == 0 and out[stranger]["false_alarms"] == 0, out
    # The limit left, stated in docs/service.md: an unused code tests names until it enrols.
    assert out["insider_with_one_unused_code"]["found"] == 20, out


def test_every_invalid_code_is_refused_the_same_whatever_the_name(api):
    cid = make_campaign(api)["id"]
    enrol = f"/campaigns/{cid}/workers"
    used, other = invite(api, cid), make_campaign(api, name="other")["id"]
    assert api.post(enrol, json={"name": "alice", "code": used}).status_code == 201
    short = api.post(f"/campaigns/{cid}/codes", json={"expires_in_s": 0.05}, headers=AUTH)
    expiring = short.json()["codes"][0]
    time.sleep(0.1)
    for code in (None, "made-up", used, expiring, invite(api, other)):
        sent = {} if code is None else {"code": code}
        taken = api.post(enrol, json={"name": "alice", **sent})
        free = api.post(enrol, json={"name": "bob", **sent})
        assert taken.status_code in (401, 403), (code, taken.text)
        assert (taken.status_code, taken.text) == (free.status_code, free.text), code
    # A valid code, and only a valid code, meets the name check.
    assert api.post(enrol, json={"name": "alice", "code": invite(api, cid)}).status_code == 409


def test_open_enrolment_is_asked_for_and_warned_about(live, tmp_path):
    base, api = live
    made = pc.Requester(base, REQUESTER).create_campaign(
        "open",
        ["t0", "t1"],
        "one-layer",
        epsilon=1.0,
        labels=["no", "yes"],
        budget=2.0,
        open_enrolment=True,
        max_workers=2,
    )
    assert made["open_enrolment"] and "fake workers" in made["warning"]
    for name in ("a", "b"):
        pc.Worker.enrol(
            base, made["id"], name, tmp_path / f"{name}.json", ledger=tmp_path / "l.json"
        )
    full = api.post(f"/campaigns/{made['id']}/workers", json={"name": "c"})
    assert full.status_code == 403


# ------------------------------------------------------------------ point 6: the report range
def test_the_report_range_bound():
    # P(|noise| > z b) for the laws an honest release uses, at the server's z: each <= 1e-12.
    z_lap, z_mix = campaigns.Z_LAPLACE, campaigns.Z_MIXTURE
    assert math.exp(-z_lap) <= 2 * math.exp(-z_lap) <= 1.000001e-12  # Laplace, discrete Laplace
    assert 2 * z_mix * special.kv(1, z_mix) <= 1.000001e-12  # discrete Gaussian mixture
    assert math.exp(-z_mix) <= 1e-12  # continuous mixture (exactly Laplace)
    # The discrete Laplace tail, summed exactly at a few scales: P(|J| >= z t + 1) <= 1e-12.
    for t in (0.3, 1.0, 5.0, 40.0):
        k = math.ceil(z_lap * t + 1)
        tail = 2 * math.exp(-k / t) / (1 + math.exp(-1 / t))
        assert tail <= 1e-12
    # The discrete Gaussian mixture, by quadrature over v at one setting: the tail past the
    # range's half-width (in grid steps) is within the bound.
    mech = make_mechanism("exp-gaussian", 1.0, low=0.0, high=10.0)
    lo, hi = campaigns.report_range(mech)
    assert lo < 0 and hi > 10
    # Honest releases, a million of them, all inside (seeded simulation of the same laws).
    rng = np.random.default_rng(0)
    for name, params in (
        ("exp-gaussian", {"low": 0.0, "high": 10.0}),
        ("laplace", {"low": 1, "high": 5}),
    ):
        mech = make_mechanism(name, 1.0, **params)
        lo, hi = campaigns.report_range(mech)
        workers = [f"w{i}" for i in range(2000)]
        frame = pd.DataFrame(
            {
                "task": np.tile([f"t{j}" for j in range(500)], 2000),
                "worker": np.repeat(workers, 500),
                "answer": np.where(rng.random(1_000_000) < 0.5, params["low"], params["high"]),
            }
        )
        out = mech.perturb(Answers.from_frame(frame, kind="numeric"), rng=1).value
        assert lo <= out.min() and out.max() <= hi


def test_reports_outside_the_range_are_refused(api):
    # Two tasks: at epsilon 1 a third exp-gaussian report under the worker's one variance takes
    # one report's figure given the others past the workers' default ceiling (refused).
    two = [{"key": "t0"}, {"key": "t1"}]
    made = make_campaign(
        api, mechanism="exp-gaussian", labels=None, params={"low": 0.0, "high": 10.0}, tasks=two
    )
    lo, hi = made["report_range"]
    worker = enrol(api, made["id"], "fake")
    params = made["mechanism"]["params"]

    def submission(values):
        return {
            "mechanism": {"name": "exp-gaussian", "params": params},
            "reports": [{"task": f"t{i}", "value": v} for i, v in enumerate(values)],
        }

    for bad, key in ((1e308, "a"), (hi * 1.0001, "b"), (lo - 1, "c")):
        response = post(api, made["id"], submission([bad]), worker, key)
        assert response.status_code == 422 and "1e-12" in response.json()["detail"], response.text
    # The range's ends, each taken to the nearest point inside it on the public grid.
    origin, step = campaigns.public_grid(campaigns.rebuild("exp-gaussian", params))
    top, bottom = (
        origin + np.floor((hi - origin) / step) * step,
        origin + np.ceil((lo - origin) / step) * step,
    )
    assert lo <= bottom < lo + step and hi - step < top <= hi
    assert post(api, made["id"], submission([top, bottom]), worker, "d").status_code == 201
    # A campaign whose honest reports could pass 1e15 is refused at creation.
    wide = campaign_body(
        mechanism="exp-gaussian",
        labels=None,
        epsilon=1e-3,
        params={"low": -1e13, "high": 1e13},
        tasks=two[:1],
    )
    response = api.post("/campaigns", json=wide, headers=AUTH)
    assert response.status_code == 422 and "1e+15" in response.json()["detail"]


def test_an_exp_gaussian_campaign_past_the_ceiling_through_its_shared_variance_is_refused(api):
    # Twenty reports under one variance: one report given the other 19 keeps 124, not the 1
    # stated; the refusal names the figure and the numeric mechanism with fresh noise per answer.
    body = campaign_body(mechanism="exp-gaussian", labels=None, params={"low": 0.0, "high": 10.0})
    response = api.post("/campaigns", json=body, headers=AUTH)
    detail = response.json()["detail"]
    assert response.status_code == 422 and "124" in detail and "use laplace" in detail, detail
    assert "one-layer" not in detail


def test_reports_off_the_public_grid_are_refused(url):
    # Before: 3.5 on laplace's integer grid, 3 + 2^-51, and half a step off exp-gaussian's
    # grid were all stored (201); honest releases must still be.
    out = off_grid.probe(url)
    assert out["off_grid_stored"] == 0 and out["honest_stored"] == "10 of 10", out
    assert {out[k] for k in out if k.startswith(("laplace", "exp"))} == {422}, out


def test_the_refusal_names_the_grid(api):
    made = make_campaign(
        api,
        mechanism="laplace",
        labels=None,
        method="mean",
        params={"low": 1, "high": 5},
        tasks=[{"key": "t0"}],
    )
    worker = enrol(api, made["id"], "fake")
    body = {
        "mechanism": {"name": "laplace", "params": made["mechanism"]["params"]},
        "reports": [{"task": "t0", "value": 3.5}],
    }
    detail = post(api, made["id"], body, worker).json()["detail"]
    assert detail == (
        "Value 3.5 is off laplace's public grid (the integers), where every release of the "
        "mechanism lies; send what the mechanism released."
    )


@pytest.mark.parametrize(
    "params",
    [
        {"low": 0.0, "high": 10.0},
        {"low": -7.3, "high": 2.9, "granularity": 0.1},
        {"low": 1e6 + 0.1, "high": 1e6 + 3.4, "granularity": 1 / 3},
        {"low": -5e8, "high": 5e8, "granularity": 1e-3},
        # A step below the doubles' spacing there (1/64): several J give one double.
        {"low": 1e14, "high": 1e14 + 100, "granularity": 1e-3},
    ],
)
def test_every_honest_release_is_on_the_grid_and_little_else(params):
    # 200,000 seeded releases of the mechanism's own law (the device's arithmetic): all on
    # the grid as the server checks it; the same values moved by half a step, or by one
    # float spacing, are not (where the step is wider than the doubles' spacing).
    mech = make_mechanism("exp-gaussian", 1.0, **params)
    origin, step = campaigns.public_grid(mech)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "task": np.tile([f"t{j}" for j in range(100)], 2000),
            "worker": np.repeat([f"w{i}" for i in range(2000)], 100),
            "answer": rng.uniform(params["low"], params["high"], 200_000),
        }
    )
    out = mech.perturb(Answers.from_frame(frame, kind="numeric"), rng=1).value
    assert campaigns.on_grid(out, origin, step).all()
    after = np.nextafter(out, np.inf)
    if np.spacing(np.abs(out)).max() < step / 4:
        assert not campaigns.on_grid(out + step / 2, origin, step).any()
        assert not campaigns.on_grid(after, origin, step).any()
    else:  # every double there is some grid point's double: nothing to refuse
        assert campaigns.on_grid(after, origin, step).all()
    laplace = make_mechanism("laplace", 1.0, low=1, high=5)
    released = laplace.perturb(Answers.from_frame(frame.assign(answer=3), kind="numeric"), rng=2)
    assert campaigns.on_grid(released.value, *campaigns.public_grid(laplace)).all()
    assert not campaigns.on_grid(released.value + 0.5, 0.0, 1.0).any()


NUMERIC_METHODS = ("crh", "catd", "gtm", "sigma", "mean", "median", "aware-gaussian")


@pytest.mark.parametrize("method", NUMERIC_METHODS)
def test_estimators_survive_the_worst_accepted_values(method):
    # The largest magnitude any accepted campaign's reports can have, in every sign pattern,
    # from one worker among honest ones, and from every worker at once.
    big = campaigns.MAX_MAGNITUDE
    rng = np.random.default_rng(0)
    honest = rng.uniform(1, 9, 40) + rng.laplace(0, 10, (30, 40))
    patterns = {
        "one high": np.vstack([honest, np.full(40, big)]),
        "one low": np.vstack([honest, np.full(40, -big)]),
        "one alternating": np.vstack([honest, np.where(np.arange(40) % 2, big, -big)]),
        "all extreme": rng.choice([-big, big], (31, 40)),
    }
    mech = make_mechanism("exp-gaussian", 1e-3, low=-1e13, high=1e13)
    for label, matrix in patterns.items():
        frame = pd.DataFrame(
            {
                "task": np.tile([f"t{j}" for j in range(40)], matrix.shape[0]),
                "worker": np.repeat([f"w{i}" for i in range(matrix.shape[0])], 40),
                "answer": matrix.ravel(),
            }
        )
        answers = Answers.from_frame(frame, kind="numeric")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no overflow, no invalid value
            est = (
                make_estimator(method, mechanism=mech)
                if method.startswith("aware")
                else (make_estimator(method))
            )
            est.fit(answers)
        truths = np.asarray(est.truths_, dtype=float)
        assert np.isfinite(truths).all() and (np.abs(truths) <= big).all(), (method, label)


def _shift(out):
    return out["mae_with_fake"] - out["mae_honest"]


def _moves(out):
    keys = list(out["_truths"][0])
    clean, dirty = (np.array([float(t[k]) for k in keys]) for t in out["_truths"])
    return np.abs(dirty - clean)


def test_one_fake_worker_moves_the_mean_by_at_most_the_range_over_n_plus_1():
    # 50 honest workers, one fake sending the top of the accepted range to all 100 tasks (1e308
    # is refused). The mean of n + 1 reports moves by (x_fake - mean_honest) / (n + 1), so each
    # truth, and the MAE, by at most (hi - lo) / (n + 1). Before the fix: MAE infinite.
    for kind in ("laplace", "exp-gaussian"):
        out = poison.poison(kind, method="mean")
        assert out["status"] == 422 and "1e-12" in out["refused"]
        lo, hi = out["report_range"]
        bound = (hi - lo) / (poison.N_HONEST + 1)
        assert math.isfinite(out["mae_with_fake"]) and abs(_shift(out)) <= bound, (out, bound)
        assert (_moves(out) <= bound * (1 + 1e-9)).all()


def test_one_fake_worker_moves_the_median_by_at_most_half_the_middle_gap():
    # n = 50 honest reports: their median is (x_25 + x_26) / 2 (order statistics); with one
    # report above them all it is x_26, so each truth moves by exactly (x_26 - x_25) / 2.
    out = poison.poison("exp-gaussian", method="median")
    assert out["status"] == 422  # 1e308 refused (the median survived it, the mean did not)
    ordered = np.sort(np.asarray(out["_reports"]), axis=0)
    gap = (ordered[poison.N_HONEST // 2] - ordered[poison.N_HONEST // 2 - 1]) / 2
    assert (_moves(out) <= gap + 1e-9).all()
    assert abs(_shift(out)) <= gap.mean() + 1e-9


def test_one_fake_worker_moves_the_default_estimator_little():
    # The exp-gaussian default (aware-gaussian) weighs each worker by its inverse variance; the
    # fake's reports sit ~300 from every truth, so its weight is ~1e-5 of an honest worker's.
    # Derived bound: its truths are weighted means of accepted reports, so no truth leaves the
    # range; measured shift: under 0.01 (before the fix: the run failed, ZeroDivisionError).
    out = poison.poison("exp-gaussian")
    assert out["method"] == "aware-gaussian" and out["status"] == 422
    lo, hi = out["report_range"]
    assert abs(_shift(out)) <= (hi - lo) / (poison.N_HONEST + 1)
    assert abs(_shift(out)) < 0.01, out


def test_the_page_computes_the_same_epsilon_as_python():
    # The page's own epsilon (static/ceiling.js) for every served mechanism, against
    # privtd.mechanisms' guarantee, under Node.
    import shutil
    import subprocess

    if shutil.which("node") is None:
        if os.environ.get("PRIVTD_TEST_NODE") == "require":
            pytest.fail("Node.js is required here (.ci/run sets PRIVTD_TEST_NODE=require).")
        pytest.skip("Node.js is not installed")
    cases = [
        ("one-layer", {"epsilon": 1.3, "n_labels": 4}, ["a", "b", "c", "d"]),
        ("binary-rr", {"epsilon": 0.7}, ["a", "b"]),
        ("two-layer", {"epsilon": 2.0, "n_labels": 3}, ["a", "b", "c"]),
        ("krr-null", {"epsilon": 1.5, "low": 1, "high": 5}, None),
        ("two-layer-null", {"epsilon": 1.5, "low": 1, "high": 5}, None),
        ("laplace", {"epsilon": 0.8, "low": 1, "high": 5}, None),
        ("exp-gaussian", {"epsilon": 2.5, "low": 0.0, "high": 10.0}, None),
        # a granularity that does not divide the range: n g, not high - low
        ("exp-gaussian", {"epsilon": 2.5, "low": 0.0, "high": 10.0, "granularity": 0.3}, None),
    ]
    mechs = []
    for name, kw, labels in cases:
        kw = dict(kw)
        mech = make_mechanism(name, kw.pop("epsilon"), **kw)
        params = {k: (v.item() if hasattr(v, "item") else v) for k, v in mech.params().items()}
        mechs.append(({"name": name, "params": params}, labels, mech.guarantee.epsilon))
    module = Path(campaigns.__file__).with_name("static") / "ceiling.js"
    script = (
        f"import('{module.as_uri()}').then((m) => console.log(JSON.stringify("
        f"{json.dumps([[m, labels] for m, labels, _ in mechs])}"
        ".map(([mech, labels]) => m.epsilonOf(mech, labels)))));"
    )
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True)
    for (mech, _, expected), got in zip(mechs, json.loads(out.stdout), strict=True):
        assert got == pytest.approx(expected, rel=1e-9), mech["name"]


def test_serve_refuses_a_ceiling_that_is_not_a_number(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 's.db'}"
    code, _, err = cli(["serve", "--db", db, "--max-epsilon", "inf"], capsys)
    assert code != 0 and err.count("\n") == 1 and "max_epsilon" in err, err


def test_campaigns_made_before_codes_become_invitation_only(url):
    import sqlalchemy as sa

    from privtd.service import db

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    db.migrate(engine, "0002")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO requesters VALUES ('r', 'h', CURRENT_TIMESTAMP)"))
        conn.execute(
            sa.text(
                "INSERT INTO campaigns (id, requester_id, name, mechanism, mechanism_params, "
                "budget_epsilon, method, created_at) VALUES ('c', 'r', 'old', 'one-layer', "
                "'{\"f\": 0.25, \"n_labels\": 2}', 10, 'aware-ds', CURRENT_TIMESTAMP)"
            )
        )
    db.migrate(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT open_enrolment, max_workers FROM campaigns")).one()
    assert not row.open_enrolment and row.max_workers is None
    engine.dispose()


def test_max_workers_holds_under_concurrent_enrolments(api):
    import threading

    from fastapi.testclient import TestClient

    made = make_campaign(api, open_enrolment=True, max_workers=5)
    statuses = []

    def enrol_one(i):
        with TestClient(api.app) as client:
            r = client.post(f"/campaigns/{made['id']}/workers", json={"name": f"w{i}"})
            statuses.append(r.status_code)

    threads = [threading.Thread(target=enrol_one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses.count(201) == 5 and set(statuses) == {201, 403}, statuses
