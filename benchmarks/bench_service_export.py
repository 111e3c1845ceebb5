"""Export of a campaign's reports as CSV (GET /campaigns/ID/reports, ``privtd campaign export``)
against the aggregation's own read of the same reports (``aggregate.load``), in one process.

The reports are written to the database directly. The export is read through the API in
process (FastAPI's TestClient, the whole streamed body); the reference reads the same rows into
integer-coded arrays, what every aggregation run does first. Prints one JSON line with both
times and their ratio.

    python benchmarks/bench_service_export.py [--db URL] [--answers 200000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import sqlalchemy as sa
from fastapi.testclient import TestClient

from privtd.datasets import make_categorical
from privtd.mechanisms import OneLayerRR
from privtd.service import aggregate, create_app
from privtd.service.schema import campaigns, reports, submissions, tasks, workers

TOKEN = "bench-export-requester-token-32-chars-long"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--answers", type=int, default=200_000)
    parser.add_argument("--per-task", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many of each")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='privtd-export-')}/export.db"
    app = create_app(url, requester_token=TOKEN)
    engine = app.state.engine
    with engine.connect() as conn:
        rid = conn.execute(sa.text("SELECT id FROM requesters")).scalar_one()
    n_tasks, n_workers = args.answers // args.per_task, 1000
    answers, _, _ = make_categorical(
        n_tasks, n_workers, 2, answers_per_task=args.per_task, accuracy=(0.6, 0.95), rng=0
    )
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    released = mech.perturb(answers, rng=1)
    now = datetime.now(UTC)
    cid = str(uuid.uuid4())
    worker_ids = [str(uuid.uuid4()) for _ in range(n_workers)]
    sub = [str(uuid.uuid4()) for _ in range(n_workers)]
    row = dict(
        id=cid,
        requester_id=rid,
        name="bench",
        mechanism="one-layer",
        mechanism_params={"f": float(mech.f), "n_labels": 2},
        labels=["a", "b"],
        budget_epsilon=1e6,
        method="mv",
        created_at=now,
    )
    with engine.begin() as conn:
        conn.execute(campaigns.insert().values(**row))
        conn.execute(
            tasks.insert(),
            [
                {"campaign_id": cid, "position": i, "key": f"t{i}", "text": ""}
                for i in range(n_tasks)
            ],
        )
        conn.execute(
            workers.insert(),
            [
                {
                    "id": w,
                    "campaign_id": cid,
                    "name": f"w{i}",
                    "token_hash": uuid.uuid4().hex,
                    "spent_epsilon": 0.0,
                    "enrolled_at": now,
                }
                for i, w in enumerate(worker_ids)
            ],
        )
        conn.execute(
            submissions.insert(),
            [
                {
                    "id": s,
                    "campaign_id": cid,
                    "worker_id": w,
                    "idempotency_key": "k",
                    "body_hash": "",
                    "n_reports": 0,
                    "epsilon": 0.0,
                    "received_at": now,
                }
                for s, w in zip(sub, worker_ids, strict=True)
            ],
        )
        w_codes = released.worker.astype(int)
        conn.execute(
            reports.insert(),
            [
                {
                    "campaign_id": cid,
                    "task_position": int(t),
                    "worker_id": worker_ids[w],
                    "submission_id": sub[w],
                    "value": float(v),
                }
                for t, w, v in zip(released.task, w_codes, released.value, strict=True)
            ],
        )
    campaign = SimpleNamespace(**row)
    export_s, load_s, size, lines = [], [], 0, 0
    with TestClient(app) as client:
        for _ in range(args.repeat):
            start = time.perf_counter()
            body = client.get(
                f"/campaigns/{cid}/reports", headers={"Authorization": f"Bearer {TOKEN}"}
            ).content
            export_s.append(time.perf_counter() - start)
            size, lines = len(body), body.count(b"\n")
            start = time.perf_counter()
            loaded, _ = aggregate.load(engine, campaign)
            load_s.append(time.perf_counter() - start)
    assert lines == released.n_answers + 1, (lines, released.n_answers)
    assert loaded is not None and loaded.n_answers == released.n_answers
    out = {
        "db": url.split(":", 1)[0],
        "answers": int(released.n_answers),
        "export_s": round(float(np.min(export_s)), 3),
        "load_s": round(float(np.min(load_s)), 3),
        "ratio_export_to_load": round(float(np.min(export_s) / np.min(load_s)), 2),
        "csv_bytes": size,
    }
    print(json.dumps(out))
    engine.dispose()


if __name__ == "__main__":
    main()
