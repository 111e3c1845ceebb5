"""A fake worker sends numeric reports off the mechanism's public grid.

    python benchmarks/attacks/service_off_grid.py                   # a fresh SQLite file
    python benchmarks/attacks/service_off_grid.py --db postgresql://postgres@127.0.0.1:5432/DB

Runs the API in-process (FastAPI's test client) on the given database. Every release of a
numeric mechanism lies on a public grid: ``laplace`` on the integers, ``exp-gaussian`` on
``low + J * granularity``. A report off it cannot come from an honest device: it marks its
sender as a modified client, and a value between grid points is one the estimators (and the
perturbation-aware likelihoods, which sum over grid points) were never meant to see. The fake
worker sends 3.5 to a ``laplace`` campaign (scores 1..5), a value half a step off the grid to
an ``exp-gaussian`` one, and an integer one ulp away (3 + 2^-51); honest workers send what the
mechanism released. Prints the status of each, and how many of the off-grid values were stored.

Before the fix, every off-grid value within the report range was stored (3 of 3, 201);
now each is refused with 422 and honest releases are still stored.
tests/test_service_attacks.py runs :func:`probe` on both databases.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

TOKEN = "grid-requester-token-of-32-characters"


def probe(url: str) -> dict[str, Any]:
    """The status of each off-grid report, and of honest ones, on a fresh app on ``url``."""
    import numpy as np
    from fastapi.testclient import TestClient

    from privtd.answers import Answers
    from privtd.mechanisms import MECHANISMS
    from privtd.service import create_app

    auth = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(url, requester_token=TOKEN)
    out: dict[str, Any] = {}
    with TestClient(app) as api:

        def campaign(mechanism: str, params: dict[str, Any], n_tasks: int) -> dict[str, Any]:
            body = {
                "name": mechanism,
                "tasks": [{"key": f"t{i}"} for i in range(n_tasks)],
                "mechanism": mechanism,
                "epsilon": 1.0,
                "params": params,
                "budget": 100.0,
                "method": "mean",
            }
            made = api.post("/campaigns", json=body, headers=auth)
            assert made.status_code == 201, made.text
            return dict(made.json())

        def send(made: dict[str, Any], name: str, values: list[Any]) -> int:
            code = api.post(f"/campaigns/{made['id']}/codes", json={}, headers=auth)
            who = api.post(
                f"/campaigns/{made['id']}/workers",
                json={"name": name, "code": code.json()["codes"][0]},
            )
            body = {
                "mechanism": {
                    "name": made["mechanism"]["name"],
                    "params": made["mechanism"]["params"],
                },
                "reports": [{"task": f"t{i}", "value": v} for i, v in enumerate(values)],
            }
            headers = {"Authorization": f"Bearer {who.json()['token']}", "Idempotency-Key": "k"}
            sent = api.post(f"/campaigns/{made['id']}/submissions", json=body, headers=headers)
            return int(sent.status_code)

        laplace = campaign("laplace", {"low": 1, "high": 5}, 4)
        # Two tasks: exp-gaussian's reports share the worker's variance, and at epsilon 1 a
        # third report takes one report's figure given the others past the ceilings.
        gauss = campaign("exp-gaussian", {"low": 0.0, "high": 10.0}, 2)
        g = gauss["mechanism"]["params"]["granularity"]
        off = {
            # laplace releases the whole row: the off-grid value and three honest-looking ones.
            "laplace_3.5": (laplace, [3.5, 3, 3, 3]),
            "laplace_3_plus_one_ulp": (laplace, [3 + 2.0**-51, 3, 3, 3]),
            "exp_gaussian_half_a_step_off": (gauss, [5 * g + g / 2]),
        }
        for what, (made, values) in off.items():
            out[what] = send(made, what, values)
        out["off_grid_stored"] = sum(out[w] == 201 for w in off)
        # Honest devices: each mechanism's own releases (seeded), every task per worker.
        rng = np.random.default_rng(0)
        honest = 0
        for made in (laplace, gauss):
            mech = MECHANISMS[made["mechanism"]["name"]](**made["mechanism"]["params"])
            n = 4 if made is laplace else 2
            for w in range(5):
                answers = Answers.from_frame(
                    _frame([f"t{i}" for i in range(n)], rng.integers(1, 6, n).astype(float)),
                    kind="numeric",
                )
                values = [
                    float(v) for v in mech.perturb(answers, rng=int(rng.integers(1 << 30))).value
                ]
                honest += send(made, f"honest-{w}", values) == 201
        out["honest_stored"] = f"{honest} of 10"
    app.state.engine.dispose()
    return out


def _frame(tasks: list[str], answers: Any) -> Any:
    import pandas as pd

    return pd.DataFrame({"task": tasks, "worker": "w", "answer": answers})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='privtd-grid-')}/grid.db"
    print(json.dumps(probe(url)))


if __name__ == "__main__":
    main()
