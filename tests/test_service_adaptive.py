"""Adaptive redundancy in the service: a campaign that asks for it hands each worker the least
settled tasks it has not answered, until each is settled or capped, or the answer budget is
spent; what a worker is handed never depends on its own reports; campaigns without it list
every task as before."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
import sqlalchemy as sa  # noqa: E402

import test_service  # noqa: E402
from test_cli import run as cli  # noqa: E402
from test_service import (  # noqa: E402
    AUTH,
    LABELS,
    REQUESTER,
    campaign_body,
    enrol,
    make_campaign,
    post,
    submission,
)

# The service tests' fixtures: a database of each kind, the API on it, a live server.
url, api, live = test_service.url, test_service.api, test_service.live


def tasks(api, cid, headers):
    response = api.get(f"/campaigns/{cid}/tasks", headers=headers)
    assert response.status_code == 200, response.text
    return [t["key"] for t in response.json()]


def answer(api, cid, made, headers, keys, value, key):
    body = submission([value] * len(keys), keys, made["mechanism"]["params"])
    response = post(api, cid, body, headers, key)
    assert response.status_code == 201, response.text


def test_a_campaign_without_it_lists_every_task(api):
    made = make_campaign(api)
    assert made["adaptive"] is None
    alice = enrol(api, made["id"], "alice")
    answer(api, made["id"], made, alice, ["t0", "t1"], "yes", "a")
    # Every task, in the campaign's order, answered ones included.
    assert tasks(api, made["id"], alice) == [f"t{i}" for i in range(20)]


def test_workers_are_handed_the_least_settled_tasks_until_settled(api):
    settings = {"target": 0.9, "batch": 5, "max_per_task": 6, "model": "pooled"}
    made = make_campaign(api, epsilon=3.0, budget=60.0, adaptive=settings)
    cid = made["id"]
    assert made["adaptive"] == {**settings, "min_per_task": 1, "max_answers": None}
    # The first workers cover the tasks once before any task gets a second report.
    seen: set[str] = set()
    for w in range(4):
        who = enrol(api, cid, f"w{w}")
        got = tasks(api, cid, who)
        assert len(got) == 5 and not seen & set(got)
        seen |= set(got)
        answer(api, cid, made, who, got, "yes", "a")
    assert len(seen) == 20
    # t0..t9 then get agreeing reports (settled), t10..t19 torn ones: only those are handed.
    first, second = [f"t{i}" for i in range(10)], [f"t{i}" for i in range(10, 20)]
    for w in range(4, 7):
        who = enrol(api, cid, f"w{w}")
        answer(api, cid, made, who, first, "yes", "a")
        answer(api, cid, made, who, second, "no" if w < 6 else "yes", "b")
    fresh = enrol(api, cid, "fresh")
    handed = tasks(api, cid, fresh)
    assert len(handed) == 5 and set(handed) <= set(second)
    # A worker is never handed what it answered.
    assert tasks(api, cid, who) == []  # w6 answered every task
    # Two more reports take the torn tasks to their cap of 6: nothing is left to hand.
    for w in range(7, 9):
        answer(api, cid, made, enrol(api, cid, f"w{w}"), second, "yes", "a")
    assert tasks(api, cid, fresh) == []


def test_the_answer_budget_and_the_target_stop_the_list(api):
    made = make_campaign(api, epsilon=3.0, budget=60.0, adaptive={"max_answers": 25, "batch": 20})
    cid = made["id"]
    alice = enrol(api, cid, "alice")
    first = tasks(api, cid, alice)
    assert len(first) == 20
    answer(api, cid, made, alice, first[:18], "yes", "a")
    bob = enrol(api, cid, "bob")
    assert len(tasks(api, cid, bob)) == 7  # 18 of the 25 reports are in
    answer(api, cid, made, bob, [f"t{i}" for i in range(7)], "yes", "a")
    carol = enrol(api, cid, "carol")
    assert tasks(api, cid, carol) == []
    # The target: at epsilon 3 three agreeing reports settle a task at 0.8.
    low = make_campaign(
        api, epsilon=3.0, budget=60.0, adaptive={"target": 0.8, "batch": 20, "model": "pooled"}
    )
    for w in range(3):
        who = enrol(api, low["id"], f"w{w}")
        answer(api, low["id"], low, who, [f"t{i}" for i in range(20)], "no", "a")
    assert tasks(api, low["id"], enrol(api, low["id"], "dave")) == []


def reports(api, cid, made, headers, values, first=0):
    """One submission: ``values`` (a string of 0/1, as no/yes) for tasks t{first}, ..."""
    keys = [f"t{first + i}" for i in range(len(values))]
    body = submission([LABELS[int(v)] for v in values], keys, made["mechanism"]["params"])
    response = post(api, cid, body, headers, f"k{first}")
    assert response.status_code == 201, response.text


#: Per model, a target between the confidence that t10..t14 (three agreeing reports) get from
#: the other workers' reports alone and what they would get were Alice's agreeing reports read
#: too: at epsilon 1, 0.90 against 0.92 for the pooled model, 0.835 against 0.848 for aware-ds
#: (turning half of hers around would give 0.89 and 0.834).
TARGETS = {"pooled": 0.91, "method": 0.84}


@pytest.mark.parametrize("model", ["pooled", "method"])
def test_what_a_worker_is_handed_does_not_depend_on_its_own_reports(api, model):
    made = make_campaign(
        api,
        epsilon=1.0,
        budget=40.0,
        adaptive={"target": TARGETS[model], "batch": 20, "max_per_task": 10, "model": model},
    )
    cid = made["id"]
    truth = "10" * 10
    # Three workers agree on t0..t14; on t15..t19 one of them says otherwise.
    for w in range(3):
        torn = "".join(str(1 - int(v)) for v in truth[15:]) if w == 2 else truth[15:]
        reports(api, cid, made, enrol(api, cid, f"w{w}"), truth[:15] + torn)
    alice = enrol(api, cid, "alice")
    reports(api, cid, made, alice, truth[:10])
    before = tasks(api, cid, alice)
    # Open: t10..t19 (t10..t14 short of the target by a little); t0..t9 are Alice's.
    assert sorted(before, key=lambda k: int(k[1:])) == [f"t{i}" for i in range(10, 20)]
    engine = api.app_state.engine

    def flip(name, first=0, end=20):
        # Turn a worker's stored reports around (on tasks t{first} to t{end - 1}), as if its
        # device had sent the other label.
        with engine.begin() as conn:
            worker_id = conn.execute(
                sa.text("SELECT id FROM workers WHERE campaign_id = :c AND name = :n"),
                {"c": cid, "n": name},
            ).scalar_one()
            conn.execute(
                sa.text(
                    "UPDATE reports SET value = 1 - value WHERE worker_id = :w "
                    "AND task_position >= :p AND task_position < :e"
                ),
                {"w": worker_id, "p": first, "e": end},
            )

    flip("alice", 0, 5)
    assert tasks(api, cid, alice) == before
    flip("alice", 5, 10)
    assert tasks(api, cid, alice) == before
    # The others' reports do steer it: w2's turned around on t15..t19 make those as settled
    # as t10..t14.
    flip("w2", 15)
    assert tasks(api, cid, alice) != before


def test_adaptive_settings_are_checked(api):
    cases = [
        ({"target": 0.5}, "above 0.5"),
        ({"min_per_task": 5, "max_per_task": 2}, "min_per_task <= max_per_task"),
        ({"max_per_task": 0}, "adaptive.max_per_task"),
        ({"window": 3}, "adaptive.window"),
        ({"model": "pooled-ds"}, "adaptive.model"),
    ]
    for settings, match in cases:
        response = api.post("/campaigns", json=campaign_body(adaptive=settings), headers=AUTH)
        assert response.status_code == 422 and match in response.json()["detail"], response.text
    numeric = campaign_body(
        mechanism="laplace", labels=None, params={"low": 0, "high": 4}, method="mean", adaptive={}
    )
    response = api.post("/campaigns", json=numeric, headers=AUTH)
    assert response.status_code == 422 and "randomized-response" in response.json()["detail"]
    assert api.get("/campaigns", headers=AUTH).json() == []


def test_campaign_create_takes_adaptive(live, tmp_path, capsys):
    base, api = live
    path = tmp_path / "tasks.csv"
    path.write_text("task\nq1\nq2\nq3\n")
    create = ["campaign", "create", base, "--tasks", str(path), "--mechanism", "one-layer"]
    common = ["--epsilon", "2", "--labels", "no,yes", "--budget", "6", "--token", REQUESTER]
    settings = "target=0.9,batch=2,model=pooled"
    code, out, err = cli([*create, *common, "--adaptive", settings], capsys)
    assert code == 0, err
    assert "up to 2 of the least settled tasks" in err and "confidence 0.9" in err
    made = api.get(f"/campaigns/{out.strip()}").json()
    assert made["adaptive"]["target"] == 0.9 and made["adaptive"]["batch"] == 2
    assert made["adaptive"]["model"] == "pooled"
    code, out, err = cli([*create, *common, "--adaptive", "0.99"], capsys)
    assert code == 0 and api.get(f"/campaigns/{out.strip()}").json()["adaptive"]["target"] == 0.99
    code, _, err = cli([*create, *common, "--adaptive", "target=0.3"], capsys)
    assert code != 0 and err.count("\n") == 1 and "above 0.5" in err


def test_the_method_ranks_up_to_its_limit_then_the_pooled_model(api, monkeypatch):
    from privtd.service import adaptive

    calls = []
    fitted = adaptive._fitted
    monkeypatch.setattr(adaptive, "_fitted", lambda *a: calls.append(1) or fitted(*a))
    made = make_campaign(api, epsilon=2.0, adaptive={"batch": 5})
    cid = made["id"]
    answer(api, cid, made, enrol(api, cid, "w0"), [f"t{i}" for i in range(20)], "yes", "a")
    alice = enrol(api, cid, "alice")
    assert len(tasks(api, cid, alice)) == 5 and calls == [1]
    monkeypatch.setattr(adaptive, "METHOD_LIMIT", 19)  # w0's 20 reports are past it
    assert len(tasks(api, cid, alice)) == 5 and calls == [1]
