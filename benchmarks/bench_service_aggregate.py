"""Aggregation of a 1,000,000-answer campaign straight from the database (target: 30 s),
and a re-run after new answers arrive, resumed from the previous fit (warm start).

The reports are written to the database directly (this measures aggregation, not ingestion:
`load_service.py` measures that). 95% of them first, one run through the service's own path
(read the reports column-wise, fit the campaign's estimator, write the result document); then
the other 5%, a second run that resumes from the first; then the same reports fitted from
scratch (the stored states cleared), to compare time, iterations and truths.

    python benchmarks/bench_service_aggregate.py [--db URL] [--answers 1000000] [--method ds]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import numpy as np
import sqlalchemy as sa

from privtd.datasets import make_categorical
from privtd.mechanisms import OneLayerRR
from privtd.service import aggregate, db
from privtd.service.schema import campaigns, reports, requesters, submissions, tasks, workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--answers", type=int, default=1_000_000)
    parser.add_argument("--per-task", type=int, default=10)
    parser.add_argument("--method", default="aware-one-coin", help="the campaign's estimator")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='privtd-agg-')}/agg.db"
    engine = db.connect(url)
    n_tasks, n_workers = args.answers // args.per_task, 2000
    answers, _, _ = make_categorical(
        n_tasks, n_workers, 2, answers_per_task=args.per_task, accuracy=(0.6, 0.95), rng=0
    )
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    released = mech.perturb(answers, rng=1)
    now = datetime.now(UTC)
    cid, rid = str(uuid.uuid4()), str(uuid.uuid4())
    worker_ids = [str(uuid.uuid4()) for _ in range(n_workers)]
    start = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(
            requesters.insert().values(id=rid, token_hash=uuid.uuid4().hex, created_at=now)
        )
        row = dict(
            id=cid,
            requester_id=rid,
            name="bench",
            mechanism="one-layer",
            mechanism_params={"f": float(mech.f), "n_labels": 2},
            labels=["a", "b"],
            budget_epsilon=1e6,
            method=args.method,
            created_at=now,
        )
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
        sub = [str(uuid.uuid4()) for _ in range(n_workers)]
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
    late = np.random.default_rng(2).random(released.n_answers) < 0.05

    def write(mask: np.ndarray) -> None:
        chosen = np.flatnonzero(mask)
        chunk = 100_000
        with engine.begin() as conn:
            for lo in range(0, chosen.size, chunk):
                pick = chosen[lo : lo + chunk]
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
                        for t, w, v in zip(
                            released.task[pick], w_codes[pick], released.value[pick], strict=True
                        )
                    ],
                )

    write(~late)
    written = time.perf_counter() - start
    campaign = SimpleNamespace(**row)
    runner = aggregate.Runner(engine)

    def run() -> tuple[float, Any]:
        begin = time.perf_counter()
        run_id = runner.start(campaign)
        while True:
            time.sleep(0.05)
            with engine.connect() as conn:
                out = conn.execute(
                    sa.select(aggregate.t_runs).where(aggregate.t_runs.c.id == run_id)
                ).one()
            if out.status in ("done", "failed"):
                return time.perf_counter() - begin, out

    elapsed, first = run()
    write(late)
    warm_time, warm = run()
    with engine.begin() as conn:
        conn.execute(aggregate.t_runs.update().values(state=None))
    cold_time, cold = run()
    runner.pool.shutdown(wait=True)
    verdict = "met" if elapsed <= 30 and first.status == "done" else "MISSED"
    kind = url.split(":")[0]
    print(
        f"{kind}: {first.n_reports:,} reports, run {first.status} in {elapsed:.1f} s "
        f"({first.iteration} iterations; target 30 s: {verdict}); writing them took "
        f"{written:.1f} s"
    )
    print(f"({np.unique(released.task).size:,} tasks, {n_workers:,} workers, {args.method})")
    same = np.mean([warm.result["truths"][k] == v for k, v in cold.result["truths"].items()])
    print(
        f"{kind}: +{int(late.sum()):,} reports ({warm.n_reports:,} in all): resumed run "
        f"{warm_time:.1f} s, {warm.iteration} iterations (from {warm.warm_from is not None}); "
        f"from scratch {cold_time:.1f} s, {cold.iteration} iterations; same truth on "
        f"{same:.4%} of tasks"
    )


if __name__ == "__main__":
    main()
