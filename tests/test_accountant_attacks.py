"""Attacks on the one privacy accountant: ways a worker's total epsilon could pass the limit it
was given (its campaign budget, its lifetime ceiling), by odd figures, split or repeated
releases, two campaigns sharing one ceiling, whole-row releases, or a server that answers the
device's two reads of the task list differently."""

from __future__ import annotations

import json
import math

import pytest

from privtd import BudgetExceededError, ValidationError
from privtd.client import Ceiling, CeilingExceededError, Worker
from privtd.mechanisms import (
    MECHANISMS,
    Accountant,
    Budget,
    KRRNull,
    LaplaceNull,
    OneLayerRR,
    TwoLayerNull,
    TwoLayerRR,
    make_mechanism,
)
from privtd.mechanisms.null_aware import NullAwareMechanism
from privtd.mechanisms.randomized_response import BinaryRR
from privtd.service import campaigns

DEVICE = {
    "one-layer": OneLayerRR.from_epsilon(1.0, 3),
    "two-layer": TwoLayerRR(0.1, 0.4, 3),
    "binary-rr": make_mechanism("binary-rr", 1.0),
    "exp-gaussian": make_mechanism("exp-gaussian", 1.0, low=0, high=1),
    "krr-null": KRRNull.from_epsilon(1.0, 1, 5),
    "laplace": LaplaceNull.from_epsilon(1.0, 1, 5),
    "two-layer-null": TwoLayerNull(1.0, 1, 5),
}


# ------------------------------------------------------------------ figures that are not spends
@pytest.mark.parametrize("bad", [-0.5, -1e-300, -math.inf])
def test_a_negative_spend_refunds_nothing(bad):
    account = Accountant(1.0)
    account.spend(0.9)
    assert not account.allows(bad)
    with pytest.raises((ValidationError, BudgetExceededError)):
        account.spend(bad)
    assert account.spent_epsilon == 0.9 and account.remaining == pytest.approx(0.1)
    with pytest.raises((ValidationError, BudgetExceededError)):
        account.spend(0.0, -1e-9)  # nor a negative delta
    assert account.spent_delta == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_spend_that_is_not_a_finite_number_is_refused(bad):
    account = Accountant(1e6)
    assert not account.allows(bad) and not account.allows(0.0, bad)
    with pytest.raises(BudgetExceededError):
        account.spend(bad)
    assert account.spent_epsilon == 0.0


@pytest.mark.parametrize(
    ("limit", "spent"), [(math.inf, 0.0), (math.nan, 0.0), (-1.0, 0.0), (1.0, math.nan)]
)
def test_an_account_is_never_opened_on_a_limit_or_spend_that_is_not_a_number(limit, spent):
    with pytest.raises(ValidationError):
        Accountant(limit, spent_epsilon=spent)


def test_the_rounding_slack_only_forgives_rounding():
    account = Accountant(10.0, spent_epsilon=9.0)
    assert account.allows(1.0) and account.allows(1.0 + 1e-12)  # a sum's rounding
    assert not account.allows(1.0 + 1e-9)
    assert not Accountant(0.0).allows(1e-300)  # a zero limit has no slack at all


# ------------------------------------------------------------------ splitting and repeating
@pytest.mark.parametrize("name", list(DEVICE))
def test_many_small_releases_stop_at_the_budget(name):
    # One unit per release, each a fresh draw: the releases add up and the one that would
    # pass the budget is refused, however small each is.
    mech = DEVICE[name]
    budget = Budget(5.0)
    released = 0
    with pytest.raises(BudgetExceededError):
        for _ in range(1000):
            budget.charge(mech, 1)
            released += 1
    assert budget.spent_epsilon == pytest.approx(released * mech.release_epsilon(1), rel=1e-12)
    assert budget.spent_epsilon <= 5.0 * (1 + 1e-12)
    assert released == math.floor(5.0 / mech.release_epsilon(1) + 1e-9)


@pytest.mark.parametrize("name", ["one-layer", "two-layer", "exp-gaussian"])
def test_the_service_plans_the_spend_its_submissions_charge(name):
    # What the server plans a worker of n tasks to spend is what the worker's budget is
    # charged, submission by submission, each a fresh draw of at most MAX_REPORTS answers.
    mech = DEVICE[name]
    n = 2 * campaigns.MAX_REPORTS + 7
    budget = Budget(1e6)
    left = n
    while left:
        k = min(left, campaigns.MAX_REPORTS)
        budget.charge(mech, k)
        left -= k
    assert campaigns.worker_spend(mech, n) == pytest.approx(budget.spent_epsilon, rel=1e-12)
    fits = campaigns.answers_within(mech, 7.0, n)
    assert campaigns.worker_spend(mech, fits) <= 7.0 * (1 + 1e-12)
    assert campaigns.worker_spend(mech, fits + 1) > 7.0


def test_a_shared_draw_is_billed_whole_not_per_answer():
    # Two-layer's answers of one draw cost the exact joint figure: checked here against the
    # worst-case odds ratio of two binary answers under one f ~ U(a, b), by hand.
    a, b = 0.1, 0.4
    mech = TwoLayerRR(a, b, 2)
    keep2 = ((1 - a) ** 3 - (1 - b) ** 3) / (3 * (b - a))
    flip2 = (b**3 - a**3) / (3 * (b - a))
    assert Accountant.cost(mech, 2)[0] == pytest.approx(math.log(keep2 / flip2), rel=1e-9)


# ------------------------------------------------------------------ whole-row releases
@pytest.mark.parametrize("name", ["krr-null", "laplace", "two-layer-null"])
def test_a_whole_row_release_counts_every_cell_answered_or_not(name):
    mech = DEVICE[name]
    assert mech.releases_cells and isinstance(mech, NullAwareMechanism)
    tasks = [f"t{i}" for i in range(40)]
    budget = Budget(1e6)
    mech.perturb_worker({"t0": 3}, tasks=tasks, budget=budget)
    assert budget.spent_epsilon == mech.release_epsilon(40)
    assert campaigns.worker_spend(mech, 40) == mech.release_epsilon(40)
    assert campaigns.answers_within(mech, mech.release_epsilon(40) * 0.999, 40) == 0


def test_releases_cells_and_flips_labels_name_the_same_classes_as_before():
    for name, cls in MECHANISMS.items():
        assert cls.releases_cells == issubclass(cls, NullAwareMechanism), name
        assert cls.flips_labels == issubclass(cls, OneLayerRR | TwoLayerRR | BinaryRR), name


# ------------------------------------------------------------------ one ceiling, many campaigns
def test_two_campaigns_share_one_lifetime_ceiling(tmp_path):
    path = tmp_path / "ceiling.json"
    path.write_text(json.dumps({"max_lifetime_epsilon": 10.0, "spent": {}}))
    first, second = Ceiling(path), Ceiling(path)  # two processes, one file
    first.check_spend("a", 6.0)
    first.record("a", 6.0)
    second.check_spend("b", 4.0)
    with pytest.raises(CeilingExceededError):
        second.check_spend("b", 4.0 + 1e-9)
    second.record("b", 4.0)
    # Campaign a's own total is replaced by its new one, not added; b's stays counted.
    with pytest.raises(CeilingExceededError):
        first.check_spend("a", 6.0 + 1e-9)
    assert first.account("a").remaining == pytest.approx(6.0)
    # A ledger entry that is not a number refuses every campaign, never lets one through.
    path.write_text(json.dumps({"max_lifetime_epsilon": 10.0, "spent": {"a": "nan"}}))
    with pytest.raises((ValidationError, CeilingExceededError)):
        Ceiling(path).check_spend("b", 0.5)
    with pytest.raises((ValidationError, CeilingExceededError)):
        Ceiling(path).check_spend("b", math.nan)


# ------------------------------------------------------------------ the device's submission
def _worker(tmp_path, mech_name, params, task_lists, *, budget=100.0, lifetime=5.0):
    """A worker whose server (a stub) answers its reads of the task list from ``task_lists``
    in turn, and records the bodies it is sent."""
    ledger = tmp_path / "ceiling.json"
    ledger.write_text(json.dumps({"max_lifetime_epsilon": lifetime, "spent": {}}))
    state = tmp_path / "w.json"
    state.write_text(
        json.dumps(
            {
                "url": "http://x",
                "campaign_id": "c",
                "name": "w",
                "worker_id": "i",
                "token": "t",
                "budget": budget,
                "spent_epsilon": 0.0,
                "pending": None,
                "ledger": str(ledger),
            }
        )
    )
    mech = MECHANISMS[mech_name](**params)
    campaign = {
        "name": "c",
        "mechanism": {
            "name": mech_name,
            "params": params,
            "epsilon": mech.epsilon,
            "unit": mech.unit,
        },
        "whole_row": mech.releases_cells,
        "labels": None,
        "n_tasks": len(task_lists[0]),
        "max_answers_per_worker": None,
        "budget": budget,
    }
    reads = iter(task_lists)
    sent: list[dict] = []

    def call(method, path, body, headers=None):
        if (method, path) == ("GET", ""):
            return campaign
        if (method, path) == ("GET", "/tasks"):
            return [{"key": k} for k in next(reads)]
        sent.append(body)
        return {"spent_epsilon": 0.0, "n_reports": len(body["reports"])}

    worker = Worker(state, ledger=ledger)
    worker._call = call  # type: ignore[method-assign]
    return worker, ledger, sent


def test_a_task_list_that_grows_between_reads_cannot_pass_the_ceiling(tmp_path):
    # The device checks its ceiling for a row of the tasks it read, then perturbs a row over
    # the tasks it reads: a server that lists 3 tasks, then 50, must not get 50 cells.
    params = KRRNull.from_epsilon(1.0, 1, 5).params()
    small, large = [f"t{i}" for i in range(3)], [f"t{i}" for i in range(50)]
    worker, ledger, sent = _worker(tmp_path, "krr-null", params, [small, large, large])
    try:
        worker.submit({"t0": 3})
    except (CeilingExceededError, ValidationError, BudgetExceededError):
        pass
    spent = json.loads(ledger.read_text())["spent"]
    for body in sent:
        assert len(body["reports"]) <= 5
    assert sum(spent.values()) <= 5.0 * (1 + 1e-12)


def test_a_refused_release_is_neither_sent_nor_recorded(tmp_path):
    params = KRRNull.from_epsilon(1.0, 1, 5).params()
    tasks = [f"t{i}" for i in range(6)]  # 6 cells of epsilon 1: past the lifetime 5
    worker, ledger, sent = _worker(tmp_path, "krr-null", params, [tasks] * 3)
    with pytest.raises(CeilingExceededError):
        worker.submit({"t0": 3})
    assert sent == [] and json.loads(ledger.read_text())["spent"] == {}
    state = json.loads(worker.path.read_text())
    assert state["spent_epsilon"] == 0.0 and state["pending"] is None


def test_a_release_within_the_ceiling_is_recorded_before_it_is_sent(tmp_path):
    params = OneLayerRR.from_epsilon(1.0, 2).params()
    worker, ledger, sent = _worker(tmp_path, "one-layer", params, [["a", "b"]] * 3)
    worker.campaign()["labels"] = [0, 1]
    recorded = []
    send = worker._call

    def call(method, path, body, headers=None):
        if method == "POST":
            recorded.append(json.loads(ledger.read_text())["spent"])
        return send(method, path, body, headers)

    worker._call = call  # type: ignore[method-assign]
    worker.submit({"a": 1, "b": 0})
    assert len(sent) == 1 and list(recorded[0].values()) == [pytest.approx(2.0)]


def test_a_restored_state_file_does_not_make_earlier_releases_free(tmp_path):
    # The worker restores its state file from a copy taken before its releases: the ledger
    # still counts them, so three releases of epsilon 2 cannot pass a lifetime ceiling of 5.
    params = OneLayerRR.from_epsilon(1.0, 2).params()
    worker, ledger, sent = _worker(tmp_path, "one-layer", params, [["a", "b"]] * 6)
    worker.campaign()["labels"] = [0, 1]
    fresh = worker.path.read_text()
    with pytest.raises(CeilingExceededError):
        for _ in range(3):
            worker.path.write_text(fresh)
            worker.state = json.loads(fresh)
            worker.submit({"a": 1, "b": 0})
    assert len(sent) == 2
    assert json.loads(ledger.read_text())["spent"] == {worker._ledger_key: pytest.approx(4.0)}


def test_the_ledger_keeps_the_servers_figure_when_it_is_larger(tmp_path):
    params = OneLayerRR.from_epsilon(1.0, 2).params()
    worker, ledger, _ = _worker(tmp_path, "one-layer", params, [["a", "b"]] * 3)
    worker.campaign()["labels"] = [0, 1]
    send = worker._call

    def call(method, path, body, headers=None):
        out = send(method, path, body, headers)
        return {**out, "spent_epsilon": 3.5} if method == "POST" else out

    worker._call = call  # type: ignore[method-assign]
    worker.submit({"a": 1, "b": 0})
    assert json.loads(ledger.read_text())["spent"][worker._ledger_key] == pytest.approx(3.5)


# ------------------------------------------------------------------ processes sharing a ledger
def _submit_in_a_process(tmp_path, name, ready, go, slow_check):
    """One process: campaign ``name``'s worker (its own state file, the shared ledger) sends
    two answers of epsilon 1 each (2 in all), with ``slow_check`` widening the time between
    reading the ledger and recording to it; exits 0 if sent, 3 if refused by the ceiling."""
    import os
    import time

    folder = tmp_path / name
    folder.mkdir()
    params = OneLayerRR.from_epsilon(1.0, 2).params()
    worker, _, sent = _worker(folder, "one-layer", params, [["a", "b"]] * 3)
    worker.ceiling = Ceiling(tmp_path / "ceiling.json")
    worker.state["campaign_id"] = name  # its own campaign: its own key in the ledger
    worker.campaign()["labels"] = [0, 1]
    if slow_check:
        check = worker.ceiling.check_spend

        def check_spend(key, total):
            check(key, total)
            time.sleep(0.3)  # the others read the ledger meanwhile

        worker.ceiling.check_spend = check_spend  # type: ignore[method-assign]
    ready.set()
    go.wait()
    try:
        worker.submit({"a": 1, "b": 0})
    except CeilingExceededError:
        os._exit(3)
    os._exit(0 if len(sent) == 1 else 1)


@pytest.mark.parametrize("slow_check", [False, True])
def test_processes_sharing_a_ledger_cannot_pass_its_lifetime_total_together(tmp_path, slow_check):
    """Three campaigns' workers, one per process, submit at once against one lifetime ceiling
    of 5 that two releases of epsilon 2 fit and three do not: exactly two are sent, and the
    ledger counts both (neither record drops the other's)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    ledger = tmp_path / "ceiling.json"
    ledger.write_text(json.dumps({"max_lifetime_epsilon": 5.0, "spent": {}}))
    go = ctx.Event()
    readies, procs = [], []
    for name in ("c1", "c2", "c3"):
        ready = ctx.Event()
        proc = ctx.Process(
            target=_submit_in_a_process, args=(tmp_path, name, ready, go, slow_check)
        )
        proc.start()
        readies.append(ready)
        procs.append(proc)
    for ready in readies:
        assert ready.wait(60)
    go.set()
    for proc in procs:
        proc.join(60)
    codes = sorted(proc.exitcode for proc in procs)
    assert codes == [0, 0, 3]
    spent = json.loads(ledger.read_text())["spent"]
    assert sorted(spent.values()) == [pytest.approx(2.0), pytest.approx(2.0)]


def _lock_is_free(ledger) -> bool:
    """Whether another process could take the ledger's lock now (probed from a new file)."""
    import fcntl
    import os

    fd = os.open(f"{ledger}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_threads_sharing_one_ceiling_take_turns_and_leave_it_locked_for_others(tmp_path):
    import threading

    ledger = tmp_path / "ceiling.json"
    ceiling = Ceiling(ledger)
    inside, release, entered = threading.Event(), threading.Event(), threading.Event()

    def holder():
        with ceiling.locked():
            inside.set()
            release.wait(10)

    def second():
        with ceiling.locked():
            entered.set()

    first = threading.Thread(target=holder)
    first.start()
    assert inside.wait(10)
    other = threading.Thread(target=second)
    other.start()
    assert not entered.wait(0.5)  # waits for the first thread
    release.set()
    first.join(10)
    other.join(10)
    assert entered.is_set()
    with ceiling.locked():  # still a lock between processes afterwards
        assert not _lock_is_free(ledger)
    assert _lock_is_free(ledger)


def test_two_ceilings_of_one_file_nest_in_one_thread(tmp_path):
    import threading

    ledger = tmp_path / "ceiling.json"
    a, b = Ceiling(ledger), Ceiling(ledger)
    done = threading.Event()

    def nested():
        with a.locked():
            b.record("k", 1.0)
        done.set()

    threading.Thread(target=nested, daemon=True).start()
    assert done.wait(10)
    assert Ceiling(ledger).spent == {"k": 1.0}


def test_a_relative_ledger_names_the_same_file_from_any_folder(tmp_path, monkeypatch):
    (tmp_path / "home" / "c").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "home")
    Ceiling("c/privtd-ledger.json").record("a", 90.0)
    monkeypatch.chdir(tmp_path / "other")
    assert Ceiling(tmp_path / "home" / "c" / "privtd-ledger.json").total == 90.0
    assert Ceiling.for_state(tmp_path / "home" / "c" / "w.json").total == 90.0


def test_a_symlinked_ledger_is_written_through_and_locked_once(tmp_path):
    real = tmp_path / "real" / "ledger.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"spent": {"a": 1.0}}))
    link = tmp_path / "ledger.json"
    link.symlink_to(real)
    with Ceiling(link).locked():
        assert not _lock_is_free(real)  # one lock, whatever the spelling
    Ceiling(link).record("b", 2.0)
    assert link.is_symlink()
    assert Ceiling(real).spent == {"a": 1.0, "b": 2.0}


def test_a_planted_link_at_the_lock_name_is_refused(tmp_path):
    ledger = tmp_path / "ceiling.json"
    (tmp_path / "ceiling.json.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValidationError, match="Cannot lock"):
        Ceiling(ledger).record("a", 1.0)
    assert not (tmp_path / "elsewhere").exists()


def test_a_refused_release_is_in_the_ledger_even_if_its_record_was_lost(tmp_path):
    params = OneLayerRR.from_epsilon(1.0, 2).params()
    worker, ledger, _ = _worker(tmp_path, "one-layer", params, [["a", "b"]] * 3)
    worker.campaign()["labels"] = [0, 1]
    from privtd.client import ServiceError

    def call(method, path, body, headers=None):
        if method == "POST":
            ledger.write_text(json.dumps({"max_lifetime_epsilon": 5.0, "spent": {}}))  # lost
            raise ServiceError(409, "task already reported")
        return send(method, path, body, headers)

    send = worker._call
    worker._call = call  # type: ignore[method-assign]
    with pytest.raises(ServiceError):
        worker.submit({"a": 1, "b": 0})
    assert json.loads(ledger.read_text())["spent"] == {worker._ledger_key: pytest.approx(2.0)}
