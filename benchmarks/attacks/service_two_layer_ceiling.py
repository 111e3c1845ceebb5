"""Attack: a requester makes a two-layer campaign whose stated epsilon is small, and a worker's
answers, all sharing one flip probability ``f_u``, keep far less than that per answer.

    python benchmarks/attacks/service_two_layer_ceiling.py

Two campaigns of 100 tasks over two labels: two-layer with ``a = 0, b = 1`` (it states epsilon 0
per answer) and two-layer at stated epsilon 1 (``a = 0``). The figures a worker who answers all
100 tasks in one submission (one draw of ``f_u``) gets are the mechanism's own exact ones
(``answer_epsilon``, ``release_epsilon``; checked against enumeration and simulation in
tests/test_worker_level_privacy.py): 4.61 per answer given its other 99 answers, and 66.8 / 67.2
for all 100 together.

Prints, for each campaign, what the server did at creation and, against a server that accepts
it anyway (a compromised one, or a campaign made before the check), what a worker with the
default ceiling (3 per answer) sends, what the server bills and what the worker's state counts.
Before the fix: both campaigns are made, the worker sends its 100 answers, and it is billed 0
(a = 0, b = 1) or 100 (stated 1) against a per-answer loss of 4.61, above its ceiling of 3 and
under the server's 10. After: the server refuses both at creation naming 4.61 and what to do,
and the worker refuses the 100-answer submission before perturbing (at most 20 per
submission); sent 20 at a time, it is billed each draw's whole release (12.1 or 13.1).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _service import AUTH, service  # noqa: E402

from privtd.client import Worker  # noqa: E402
from privtd.errors import PrivtdError  # noqa: E402
from privtd.mechanisms import make_mechanism  # noqa: E402
from privtd.service import campaigns  # noqa: E402

N = 100
LABELS = ["no", "yes"]
CASES = {
    "a=0, b=1": {"params": {"a": 0.0, "b": 1.0}},
    "stated epsilon 1": {"epsilon": 1.0},
}


def body(case: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "shared-draw",
        "tasks": [{"key": f"t{i}"} for i in range(N)],
        "mechanism": "two-layer",
        "labels": LABELS,
        "budget": 1000.0,
        **case,
    }


def true_figures(case: dict[str, Any], k: int = N) -> dict[str, float]:
    """What ``k`` answers under one draw keep: per answer given the others, all together."""
    params = {"n_labels": 2, **case.get("params", {})}
    mech = make_mechanism("two-layer", case.get("epsilon"), **params)
    return {
        "stated": mech.epsilon,
        "per_answer_given_others": mech.answer_epsilon(k),
        "all_together": mech.release_epsilon(k),
    }


def creation(case: dict[str, Any], url: str | None = None) -> dict[str, Any]:
    """What an honest server does with the campaign."""
    with service(url) as (api, _):
        r = api.post("/campaigns", json=body(case), headers=AUTH)
        out: dict[str, Any] = {"status": r.status_code}
        if r.status_code == 201:
            out["stated_epsilon"] = r.json()["mechanism"]["epsilon"]
        else:
            out["detail"] = r.json().get("detail")
        return out


def worker_side(case: dict[str, Any], url: str | None = None) -> dict[str, Any]:
    """Against a server that accepts the campaign anyway, a worker with the default ceiling
    answers all 100 tasks at once, then (if refused) 20 at a time."""
    # The creation check, lifted as a compromised server would (absent before the fix).
    lifted = mock.patch.object(
        campaigns, "check_campaign_epsilon", lambda *a, **k: (0.0, 0.0), create=True
    )
    with (
        lifted,
        service(url, live=True) as (api, base),
        tempfile.TemporaryDirectory() as d,
    ):
        r = api.post("/campaigns", json=body(case), headers=AUTH)
        assert r.status_code == 201, r.text
        made = r.json()
        code = api.post(f"/campaigns/{made['id']}/codes", json={"count": 1}, headers=AUTH)
        extra = {"code": code.json()["codes"][0]} if code.status_code == 201 else {}
        worker = Worker.enrol(base, made["id"], "alice", Path(d) / "alice.json", **extra)
        answers = {f"t{i}": LABELS[i % 2] for i in range(N)}
        out: dict[str, Any] = {"refused": None, "batches": []}
        try:
            sent = worker.submit(answers)
            out["batches"].append({"n": N, "billed": sent["epsilon"]})
        except PrivtdError as exc:
            out["refused"] = str(exc)
            for start in range(0, N, 20):
                part = {k: answers[k] for k in list(answers)[start : start + 20]}
                sent = worker.submit(part)
                out["batches"].append({"n": len(part), "billed": sent["epsilon"]})
        out["server_spent"] = sent["spent_epsilon"]
        out["worker_spent"] = worker.state["spent_epsilon"]
        out["largest_batch"] = max(b["n"] for b in out["batches"])
        figures = true_figures(case, out["largest_batch"])
        out["per_answer_given_others"] = figures["per_answer_given_others"]
        out["true_total"] = sum(true_figures(case, b["n"])["all_together"] for b in out["batches"])
        return out


def main() -> None:
    for label, case in CASES.items():
        print(f"== two-layer, {label}, {N} tasks")
        print("true figures, all 100 answers under one draw:", json.dumps(true_figures(case)))
        print("server at creation:", json.dumps(creation(case)))
        w = worker_side(case)
        print(
            f"worker (default ceiling 3) against a server that accepts it: largest submission "
            f"{w['largest_batch']} answers, {w['per_answer_given_others']:.3g} per answer given "
            f"its others; billed {w['server_spent']:.4g} by the server, {w['worker_spent']:.4g} "
            f"in its state, true total {w['true_total']:.4g}; refused first: {w['refused']}"
        )


if __name__ == "__main__":
    main()
