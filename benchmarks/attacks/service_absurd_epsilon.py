"""Attack: a requester creates a campaign whose natural parameters mean an
absurd epsilon (one-layer RR with f = 1e-300: epsilon = ln((1 - f) / f) = 690 per answer), and
the worker's client, trusting the server's parameters, sends its raw answers.

    python benchmarks/attacks/service_absurd_epsilon.py

Prints what the server did with the campaign and, against a server that accepts it anyway (a
compromised one, simulated by lifting its ceiling), how many of the worker's 200 answers left
its device unchanged. Before the fix: accepted, 200 of 200. After: the server refuses the
campaign (422) and the client refuses it before enrolling, perturbing or sending (0 sent).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _service import AUTH, service  # noqa: E402

from privtd.client import Worker  # noqa: E402
from privtd.errors import PrivtdError  # noqa: E402

N = 200
LABELS = ["no", "yes"]


def campaign(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "absurd",
        "tasks": [{"key": f"t{i}"} for i in range(N)],
        "mechanism": "one-layer",
        "params": {"f": 1e-300},
        "labels": LABELS,
        "budget": 1e6,
    }
    body.update(changes)
    return body


def server_side(url: str | None = None) -> dict[str, Any]:
    """What an honest server does with the absurd campaign, given three ways."""
    out = {}
    with service(url) as (api, _):
        for label, body in (
            ("natural f=1e-300", campaign()),
            ("epsilon=690", campaign(params={}, epsilon=690.0)),
            ("natural f=0", campaign(params={"f": 0.0})),
        ):
            r = api.post("/campaigns", json=body, headers=AUTH)
            eps = r.json()["mechanism"]["epsilon"] if r.status_code == 201 else None
            out[label] = {"status": r.status_code, "epsilon": eps, "detail": r.json().get("detail")}
    return out


def client_side(url: str | None = None) -> dict[str, Any]:
    """Against a server that accepts the campaign (its ceiling lifted, as a compromised one
    would), how many raw answers the worker's client sends."""
    with (
        service(url, live=True, max_epsilon=1e9) as (api, base),
        tempfile.TemporaryDirectory() as d,
    ):
        # A compromised server takes any budget too (an honest one refuses a worker's spend
        # past the default lifetime ceiling unless told the workers raise theirs).
        r = api.post("/campaigns", json=campaign(workers_raise_ceiling=True), headers=AUTH)
        assert r.status_code == 201, r.text
        made = r.json()
        code = api.post(f"/campaigns/{made['id']}/codes", json={"count": 1}, headers=AUTH)
        extra = {"code": code.json()["codes"][0]} if code.status_code == 201 else {}
        answers = {f"t{i}": LABELS[i % 2] for i in range(N)}
        state = Path(d) / "alice.json"
        try:
            worker = Worker.enrol(base, made["id"], "alice", state, **extra)
            worker.submit(answers)
        except PrivtdError as exc:
            with api.app.state.engine.connect() as conn:
                import sqlalchemy as sa

                enrolled = conn.execute(sa.text("SELECT count(*) FROM workers")).scalar_one()
            sent = json.loads(state.read_text())["pending"] if state.exists() else None
            return {
                "enrolled": enrolled,
                "epsilon": made["mechanism"]["epsilon"],
                "refused": str(exc),
                "sent": 0,
                "raw": 0,
                "pending": sent,
            }
        with api.app.state.engine.connect() as conn:  # what the server stored
            import sqlalchemy as sa

            stored = conn.execute(sa.text("SELECT value, task_position FROM reports")).all()
        raw = sum(LABELS[int(v)] == answers[f"t{p}"] for v, p in stored)
        return {
            "epsilon": made["mechanism"]["epsilon"],
            "refused": None,
            "sent": len(stored),
            "raw": raw,
        }


def main() -> None:
    print("server:", json.dumps(server_side(), indent=1))
    c = client_side()
    print(
        f"client: campaign epsilon {c['epsilon']:.1f} per answer; "
        f"{c['raw']} of {N} answers sent raw ({c['sent']} sent; workers enrolled: "
        f"{c.get('enrolled', 1)}); refused: {c['refused']}"
    )


if __name__ == "__main__":
    main()
