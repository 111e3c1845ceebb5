"""Load, crash and throughput check of the collection service, on loopback only.

Starts ``privtd serve`` as its own process, creates a campaign, enrols ``--workers`` simulated
workers and has them submit ``--answers`` answers in total, ``--batch`` per submission, each
perturbed on the worker's side with the campaign's mechanism. Every submission carries an
idempotency key and is retried with the same key and body until acknowledged. Afterwards the
database must hold every acknowledged submission exactly once.

    python benchmarks/load_service.py                         # 200 workers, 200,000 answers
    python benchmarks/load_service.py --crash                 # kill -9 the server mid-way
    python benchmarks/load_service.py --db postgresql://postgres@127.0.0.1:5432/DB
    python benchmarks/load_service.py --rate 2000             # open loop at 2,000 answers/s

Closed loop (default): every worker sends its next batch as soon as the last is acknowledged,
which measures the server's capacity; latency then includes queueing behind 200 clients.
Open loop (``--rate``): batches leave on a fixed schedule whatever the server does, which is how
the p50/p99 target (2,000 answers/s, p99 under 100 ms) is stated. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

from privtd.mechanisms import MECHANISMS

TOKEN = "load-test-requester-token-32-chars"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(url: str, port: int) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("privtd")
    env = {**os.environ, "PRIVTD_REQUESTER_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [str(exe), "serve", "--db", url, "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start within 60 s")


async def run_load(args: argparse.Namespace, base: str, restart) -> dict:  # type: ignore[no-untyped-def]
    n_tasks = args.answers // args.workers
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        base_url=base, timeout=60, limits=httpx.Limits(max_connections=400)
    ) as http:
        made = await http.post(
            "/campaigns",
            headers=auth,
            json={
                "name": "load",
                "tasks": [{"key": f"t{i}"} for i in range(n_tasks)],
                "mechanism": "one-layer",
                "epsilon": 1.0,
                "labels": ["a", "b", "c"],
                "budget": float(n_tasks),
                # Its workers answer every task at epsilon 1 each, past the default lifetime
                # ceiling (100) from 101 tasks on; they are load, not devices with a ceiling.
                "workers_raise_ceiling": True,
            },
        )
        made.raise_for_status()
        campaign = made.json()
        cid = campaign["id"]
        mech = MECHANISMS["one-layer"](**campaign["mechanism"]["params"])
        issued = await http.post(
            f"/campaigns/{cid}/codes", headers=auth, json={"count": args.workers}
        )
        issued.raise_for_status()
        codes = issued.json()["codes"]
        tokens = []
        for w in range(args.workers):
            r = await http.post(
                f"/campaigns/{cid}/workers", json={"name": f"w{w}", "code": codes[w]}
            )
            r.raise_for_status()
            tokens.append(r.json()["token"])

        latencies: list[float] = []
        acked: dict[str, int] = {}
        retries = [0]
        batches_per_worker = -(-n_tasks // args.batch)
        interval = (
            args.workers * args.batch / args.rate if args.rate else 0.0
        )  # seconds between one worker's batches

        async def worker(w: int) -> None:
            rng = np.random.default_rng(w)
            headers = {"Authorization": f"Bearer {tokens[w]}"}
            start = time.perf_counter() + (w / args.workers) * interval
            for b in range(batches_per_worker):
                tasks = [f"t{i}" for i in range(b * args.batch, min(n_tasks, (b + 1) * args.batch))]
                answers = rng.choice(["a", "b", "c"], size=len(tasks)).tolist()
                values = mech.perturb_worker(answers, labels=["a", "b", "c"])
                body = {
                    "mechanism": {"name": "one-layer", "params": campaign["mechanism"]["params"]},
                    "reports": [
                        {"task": t, "value": v} for t, v in zip(tasks, values, strict=True)
                    ],
                }
                key = str(uuid.uuid4())
                if interval:
                    await asyncio.sleep(max(0.0, start + b * interval - time.perf_counter()))
                while True:
                    sent = time.perf_counter()
                    try:
                        r = await http.post(
                            f"/campaigns/{cid}/submissions",
                            json=body,
                            headers={**headers, "Idempotency-Key": key},
                        )
                    except httpx.TransportError:
                        retries[0] += 1
                        await asyncio.sleep(0.1)
                        continue
                    if r.status_code >= 500:
                        retries[0] += 1
                        await asyncio.sleep(0.1)
                        continue
                    if r.status_code not in (200, 201):
                        raise SystemExit(f"refused: {r.status_code} {r.text}")
                    latencies.append(time.perf_counter() - sent)
                    acked[r.json()["submission_id"]] = len(tasks)
                    break

        begin = time.perf_counter()
        jobs = [asyncio.create_task(worker(w)) for w in range(args.workers)]
        if args.crash:
            await asyncio.sleep(args.crash_after)
            restart()
        await asyncio.gather(*jobs)
        elapsed = time.perf_counter() - begin
    lat = np.array(latencies)
    return {
        "campaign": cid,
        "answers": int(sum(acked.values())),
        "submissions": len(acked),
        "seconds": round(elapsed, 2),
        "answers_per_s": round(sum(acked.values()) / elapsed, 1),
        "p50_ms": round(float(np.percentile(lat, 50)) * 1000, 1),
        "p99_ms": round(float(np.percentile(lat, 99)) * 1000, 1),
        "retries": retries[0],
        "acked": acked,
    }


def check_stored(url: str, campaign: str, acked: dict[str, int]) -> dict:
    """Every acknowledged submission stored once, with all its reports; nothing else."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        stored = dict(
            conn.execute(
                sa.text(
                    "SELECT s.id, count(r.task_position) FROM submissions s LEFT JOIN reports r "
                    "ON r.submission_id = s.id WHERE s.campaign_id = :c GROUP BY s.id"
                ),
                {"c": campaign},
            ).all()
        )
        reports = conn.execute(
            sa.text("SELECT count(*) FROM reports WHERE campaign_id = :c"), {"c": campaign}
        ).scalar_one()
    engine.dispose()
    missing = [s for s in acked if s not in stored]
    wrong = [s for s, n in acked.items() if stored.get(s) not in (None, n)]
    extra = [s for s in stored if s not in acked]
    return {
        "stored_submissions": len(stored),
        "stored_reports": int(reports),
        "missing": len(missing),
        "partial": len(wrong),
        "unacknowledged_but_stored": len(extra),
        "exactly_once": not missing and not wrong and not extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--answers", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rate", type=float, help="open loop: answers per second offered")
    parser.add_argument("--crash", action="store_true", help="kill -9 the server mid-way")
    parser.add_argument("--crash-after", type=float, default=3.0)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="privtd-load-")
    url = args.db or f"sqlite:///{folder}/load.db"
    port = free_port()
    server = [start_server(url, port)]

    def restart() -> None:
        server[0].send_signal(signal.SIGKILL)
        server[0].wait()
        server[0] = start_server(url, port)

    try:
        result = asyncio.run(run_load(args, f"http://127.0.0.1:{port}", restart))
    finally:
        server[0].terminate()
        server[0].wait(10)
    acked = result.pop("acked")
    result.update(check_stored(url, result["campaign"], acked))
    result.update({"db": url.split(":")[0], "workers": args.workers, "crash": args.crash})
    print(json.dumps(result))
    if not result["exactly_once"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
