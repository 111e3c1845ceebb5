"""Dask ingest of Parquet files: this tree against a reference tree, in alternating fresh
processes on one LocalCluster size, so both see the same machine load.

The answers are ``bench_distributed.generate``'s (K = 2, 5 answers a task spread over five
files, integer ids; reused when ``--dir`` holds them). Each run starts a LocalCluster of
``--workers`` processes, ingests ``--dir`` and prints the seconds ingest took (the cluster's
start is not timed). The reference runs once with its defaults and, with ``--groups N``, once
more with ``group_answers = answers / N``, which makes it read every file ``N + 1`` times, as
its default did at 1e9 answers (7 groups: 8 reads), so that the read count's share of the
time shows at a size this machine ingests in seconds.

    git clone -q --branch BEFORE . /tmp/before
    python benchmarks/bench_ingest.py --reference /tmp/before/src --answers 2e7 --groups 7

Results go to benchmarks/results/ingest.txt (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")

RUN = """
import json, sys, time, warnings
from privtd.inference.distributed import connect, ingest
folder, workers, group = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with connect(workers=workers) as client:
    kwargs = {} if group == "-" else {"group_answers": int(group)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        start = time.perf_counter()
        data = ingest(folder, client, **kwargs)
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "answers": data.n_answers,
                      "partitions": data.n_partitions}))
"""


def run(src: str, folder: Path, workers: int, group: int | None) -> dict:
    env = {**os.environ, "PYTHONPATH": src}
    size = "-" if group is None else str(group)
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(folder), str(workers), size],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="the reference tree's src folder")
    parser.add_argument("--answers", type=float, default=2e7)
    parser.add_argument("--n-workers", type=float, default=1e5, help="crowd workers")
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/privtd-ingest"))
    parser.add_argument("--groups", type=int, default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ingest.txt")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_distributed import generate

    n = int(args.answers)
    generate(n, int(args.n_workers), args.dir)
    cases: list[tuple[str, str, int | None]] = [
        ("this tree (each file read once)", SRC, None),
        ("reference, default", args.reference, None),
    ]
    if args.groups:
        cases.append(
            (
                f"reference, {args.groups} groups ({args.groups + 1} reads)",
                args.reference,
                n // args.groups,
            )
        )
    times: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    info: dict[str, dict] = {}
    for _ in range(args.runs):
        for label, src, group in cases:
            result = run(src, args.dir, args.workers, group)
            times[label].append(result["seconds"])
            info[label] = result
    lines = [
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end",
        f"# {n:.3g} answers in {len(list(args.dir.glob('part-*.parquet')))} Parquet files, "
        f"{args.workers} Dask worker processes, median of {args.runs} alternating runs",
    ]
    base = statistics.median(times[cases[0][0]])
    for label, _, _ in cases:
        med = statistics.median(times[label])
        runs = " ".join(f"{t:.1f}" for t in times[label])
        lines.append(
            f"{label:<45} {med:8.1f} s  ({med / base:.2f}x this tree)  [{runs}]  "
            f"{info[label]['partitions']} shards"
        )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.write_text(text)


if __name__ == "__main__":
    main()
