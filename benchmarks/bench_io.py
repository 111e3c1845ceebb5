"""Reading platform exports (privtd.io) against reading the same answers as a long CSV.

The same crowd (``--answers`` answers, 5 per task, 500 workers, 2 labels) is written once as a
long CSV and as a Toloka results TSV, an MTurk batch results CSV, a Label Studio JSON export
and an Appen full report, each with its platform's columns (docs/formats.md). Each file is then
read ``--runs`` times, alternating, and the median time of each reader is reported with its
ratio to ``Answers.from_csv`` on the long CSV measured in the same run.

    python benchmarks/bench_io.py --answers 200000 --runs 3

Results go to benchmarks/results/io_read.txt (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from privtd import Answers, io


def write_files(n: int, folder: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    n_tasks = n // 5
    task = np.repeat(np.arange(n_tasks), 5)
    worker = (task + 100 * np.tile(np.arange(5), n_tasks)) % 500  # 5 distinct per task
    label = np.where(rng.random(n) < 0.8, "cat", "dog")
    tasks = pd.Series(task).map("t{:07d}".format)
    workers = pd.Series(worker).map("w{:04d}".format)
    files = {"long": folder / "long.csv"}
    pd.DataFrame({"task": tasks, "worker": workers, "answer": label}).to_csv(
        files["long"], index=False
    )
    files["toloka"] = folder / "toloka.tsv"
    pd.DataFrame(
        {
            "INPUT:image": "https://example.com/" + tasks + ".jpg",
            "OUTPUT:result": label,
            "GOLDEN:result": "",
            "ASSIGNMENT:task_id": tasks,
            "ASSIGNMENT:assignment_id": "a" + pd.Series(np.arange(n)).astype(str),
            "ASSIGNMENT:worker_id": workers,
            "ASSIGNMENT:status": "APPROVED",
        }
    ).to_csv(files["toloka"], sep="\t", index=False)
    files["mturk"] = folder / "mturk.csv"
    pd.DataFrame(
        {
            "HITId": tasks,
            "AssignmentId": "a" + pd.Series(np.arange(n)).astype(str),
            "WorkerId": workers,
            "AssignmentStatus": "Approved",
            "Input.image_url": "https://example.com/" + tasks + ".jpg",
            "Answer.cat.on": label == "cat",
            "Answer.dog.on": label == "dog",
        }
    ).to_csv(files["mturk"], index=False)
    files["appen"] = folder / "appen.csv"
    pd.DataFrame(
        {
            "_unit_id": tasks,
            "_golden": "false",
            "_tainted": "false",
            "_worker_id": workers,
            "animal": label,
            "animal_gold": "",
        }
    ).to_csv(files["appen"], index=False)
    files["label-studio"] = folder / "label_studio.json"
    items = [{"id": int(t), "data": {}, "annotations": []} for t in range(n_tasks)]
    for t, w, a in zip(task.tolist(), worker.tolist(), label.tolist(), strict=True):
        items[t]["annotations"].append(
            {
                "completed_by": w,
                "was_cancelled": False,
                "ground_truth": False,
                "result": [{"from_name": "animal", "type": "choices", "value": {"choices": [a]}}],
            }
        )
    files["label-studio"].write_text(json.dumps(items))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/io_read.txt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(args.answers, Path(tmp))
        readers = {
            "long (Answers.from_csv)": lambda: Answers.from_csv(str(files["long"])),
            **{fmt: (lambda p=files[fmt]: io.read(str(p)).answers) for fmt in io.FORMATS[1:]},
        }
        times: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(args.runs + 1):  # the first round warms the imports and is dropped
            for name, read in readers.items():
                start = time.perf_counter()
                data = read()
                times[name].append(time.perf_counter() - start)
                assert data.n_answers == args.answers, (name, data.n_answers)
        sizes = {fmt: os.path.getsize(p) / 1e6 for fmt, p in files.items()}
    base = statistics.median(times["long (Answers.from_csv)"][1:])
    load = os.getloadavg()[0]
    lines = [
        f"privtd.io read times, {args.answers} answers, median of {args.runs} runs "
        f"(load average {load:.2f} at the end; python benchmarks/bench_io.py "
        f"--answers {args.answers} --runs {args.runs})",
        f"{'reader':<26} {'MB':>7} {'seconds':>8} {'x long':>7}",
    ]
    for name, values in times.items():
        fmt = "long" if name.startswith("long") else name
        median = statistics.median(values[1:])
        lines.append(f"{name:<26} {sizes[fmt]:>7.1f} {median:>8.3f} {median / base:>7.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
