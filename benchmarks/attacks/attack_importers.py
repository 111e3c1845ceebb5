"""Feed privtd's importers (privtd.io) hostile and huge files: errors, peak memory, time.

    python benchmarks/attacks/attack_importers.py            # the default sizes (a few minutes)
    python benchmarks/attacks/attack_importers.py --quick    # small sizes only
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_importers.py   # another tree

Four probes, each printed as one JSON line:

``label_studio_hostile``
    ``privtd infer`` on Label Studio exports of hostile shapes (JSON nested 100,000 deep, and a
    wrong type at each level of the export: the task list, a task's id, its annotations, an
    annotation, its annotator, its result, a region, its value, its choices, a choice). Counts
    how many end in an "internal error ... please report it" instead of a one-line error that
    names what was wrong.
``label_studio_memory``
    A realistic Label Studio export (Label Studio 1.x's full JSON: three annotations a task
    with their metadata) at several sizes, each read by ``privtd.io.read`` in a fresh process:
    the peak resident memory above what the process held before reading, as a multiple of the
    file's size, and the seconds taken (wall clock, and CPU time, which a loaded machine does
    not inflate). Linear time keeps CPU seconds per MB flat.
``mturk_options``
    An MTurk batch file of 200 assignments whose one radio group has K options (``Answer.<o>.on``
    columns) at several K: seconds and peak memory multiple.
``toloka_inputs``
    A Toloka results file of 100 assignments with K ``INPUT:`` columns beside the three read:
    seconds and peak memory multiple.
``wide_header``
    Whether :func:`privtd.io.detect` recognises an MTurk file whose header line is over 64 KB
    (``WorkerId`` and ``HITId`` after the first 64 KB).

Every measurement runs ``privtd.io.read`` in a child process of this Python with the same
environment (``PYTHONPATH`` picks the tree), so peak memory is that read's alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time
import privtd.io

def status(field):
    # VmHWM, the peak resident size, starts afresh at exec (ru_maxrss would inherit the
    # parent's).
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024

before = status("VmHWM")
start, cpu = time.perf_counter(), time.process_time()
data = privtd.io.read(sys.argv[1])
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = status("VmHWM")
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_bytes": peak - before,
                  "answers": data.answers.n_answers}))
"""


def label_studio_task(number: int, n_annotations: int = 3) -> dict:
    """One task as Label Studio 1.x exports it (JSON, not JSON_MIN)."""
    annotations = []
    for k in range(n_annotations):
        worker = (number * 7 + k * 13) % 500
        annotations.append(
            {
                "id": number * n_annotations + k,
                "completed_by": worker,
                "result": [
                    {
                        "value": {"choices": [("Positive", "Negative", "Neutral")[worker % 3]]},
                        "id": f"r{number}-{k}",
                        "from_name": "sentiment",
                        "to_name": "text",
                        "type": "choices",
                        "origin": "manual",
                    }
                ],
                "was_cancelled": False,
                "ground_truth": False,
                "created_at": "2023-05-02T09:14:22.301000Z",
                "updated_at": "2023-05-02T09:14:22.301000Z",
                "draft_created_at": None,
                "lead_time": 6.41,
                "prediction": {},
                "result_count": 0,
                "unique_id": f"5c1f{number:08d}-{k}",
                "import_id": None,
                "last_action": None,
                "task": number,
                "project": 12,
                "updated_by": worker,
                "parent_prediction": None,
                "parent_annotation": None,
                "last_created_by": None,
            }
        )
    return {
        "id": number,
        "annotations": annotations,
        "file_upload": "reviews.json",
        "drafts": [],
        "predictions": [],
        "data": {"text": f"Review {number}: the product arrived on time and works as described."},
        "meta": {},
        "created_at": "2023-05-01T10:00:00.000000Z",
        "updated_at": "2023-05-02T09:14:22.301000Z",
        "inner_id": number,
        "total_annotations": n_annotations,
        "cancelled_annotations": 0,
        "total_predictions": 0,
        "comment_count": 0,
        "unresolved_comment_count": 0,
        "last_comment_updated_at": None,
        "project": 12,
        "updated_by": 3,
        "comment_authors": [],
    }


def write_label_studio(path: Path, megabytes: float) -> int:
    """A Label Studio export of about ``megabytes`` MB; returns its size in bytes."""
    target = int(megabytes * 1e6)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[")
        number, written = 0, 1
        while written < target:
            text = ("," if number else "") + json.dumps(label_studio_task(number))
            handle.write(text)
            written += len(text)
            number += 1
        handle.write("]")
    return path.stat().st_size


def write_mturk(path: Path, n_options: int, n_rows: int = 200) -> int:
    """An MTurk batch file whose radio group has ``n_options`` options."""
    head = ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "Input.text"]
    options = [f"Answer.sentiment.o{j}.on" for j in range(n_options)]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(",".join(head + options) + "\n")
        for i in range(n_rows):
            cells = ["" for _ in range(n_options)]
            cells[(i * 31) % n_options] = "true"
            row = [f"H{i % 50}", f"A{i}", f"W{i % 40}", "Approved", f"item {i % 50}"]
            handle.write(",".join(row + cells) + "\n")
    return path.stat().st_size


def write_toloka(path: Path, n_inputs: int, n_rows: int = 100) -> int:
    """A Toloka results file with ``n_inputs`` input columns besides the three read."""
    inputs = [f"INPUT:f{j}" for j in range(n_inputs)]
    head = ["ASSIGNMENT:task_id", "ASSIGNMENT:worker_id", "OUTPUT:label"]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\t".join(inputs + head) + "\n")
        for i in range(n_rows):
            handle.write("\t".join(["x"] * n_inputs + [f"t{i % 20}", f"w{i}", "y"]) + "\n")
    return path.stat().st_size


def hostile_label_studio() -> dict[str, object]:
    """Each hostile shape's name -> its JSON text."""
    good = label_studio_task(1, n_annotations=1)

    def change(edit) -> str:
        task = json.loads(json.dumps(good))
        edit(task)
        return json.dumps([task])

    region = ("annotations", 0, "result", 0)

    def set_at(keys, value):
        def edit(task):
            node = task
            for key in keys[:-1]:
                node = node[key]
            node[keys[-1]] = value

        return edit

    return {
        "deep_nesting": "[" * 100_000 + "]" * 100_000,
        "deep_in_data": json.dumps([{**good, "data": "X"}]).replace(
            '"X"', "[" * 100_000 + "]" * 100_000
        ),
        "task_id_object": change(set_at(("id",), {"a": 1})),
        "annotations_object": change(set_at(("annotations",), {"a": 1})),
        "annotation_string": change(set_at(("annotations", 0), "oops")),
        "completed_by_list": change(set_at(("annotations", 0, "completed_by"), [1, 2])),
        "result_string": change(set_at(("annotations", 0, "result"), "oops")),
        "region_number": change(set_at((*region[:-1], 0), 7)),
        "value_list": change(set_at((*region, "value"), ["Positive"])),
        "choices_string": change(set_at((*region, "value", "choices"), "Positive")),
        "choices_number": change(set_at((*region, "value", "choices"), 3)),
        "choice_object": change(set_at((*region, "value", "choices"), [{"a": 1}])),
        "from_name_list": change(set_at((*region, "from_name"), ["sentiment"])),
    }


def probe_hostile(folder: Path) -> dict[str, object]:
    from privtd.cli import main

    outcome: dict[str, str] = {}
    for name, text in hostile_label_studio().items():
        path = folder / f"{name}.json"
        path.write_text(text)
        err = io.StringIO()
        code = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["infer", str(path), "-m", "mv", "-o", str(folder / "out.csv")])
            except SystemExit as exc:
                code = int(exc.code or 0)
        lines = err.getvalue().strip().splitlines()
        message = lines[-1] if lines else ""
        if code == 0:
            outcome[name] = "accepted"
        elif "internal error" in message:
            outcome[name] = "internal error"
        else:
            outcome[name] = "one-line error" if len(lines) == 1 else "several lines"
        outcome[name + ":message"] = message[:160]
    shapes = [k for k in outcome if ":" not in k]
    return {
        "probe": "label_studio_hostile",
        "shapes": len(shapes),
        "internal_errors": sum(outcome[k] == "internal error" for k in shapes),
        "accepted": sum(outcome[k] == "accepted" for k in shapes),
        "outcomes": outcome,
    }


def measure(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        capture_output=True,
        text=True,
        env=os.environ,
        check=False,
    )
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1][:200]}
    return json.loads(done.stdout)


def probe_sizes(folder: Path, what: str, sizes: list[float]) -> dict[str, object]:
    rows = []
    for size in sizes:
        path = folder / {"label_studio_memory": "ls.json", "mturk_options": "mturk.csv"}.get(
            what, "toloka.tsv"
        )
        if what == "label_studio_memory":
            nbytes = write_label_studio(path, size)
        elif what == "mturk_options":
            nbytes = write_mturk(path, int(size))
        else:
            nbytes = write_toloka(path, int(size))
        got = measure(path)
        row = {"size": size, "file_mb": round(nbytes / 1e6, 1)}
        if "error" in got:
            row["error"] = got["error"]
        else:
            row["seconds"] = round(got["seconds"], 2)
            row["cpu_seconds"] = round(got["cpu_seconds"], 2)
            row["peak_mb"] = round(got["peak_bytes"] / 1e6, 1)
            row["peak_over_file"] = round(got["peak_bytes"] / nbytes, 1)
            row["cpu_seconds_per_mb"] = round(got["cpu_seconds"] / (nbytes / 1e6), 3)
        rows.append(row)
        path.unlink()
    unit = {"label_studio_memory": "MB", "mturk_options": "options"}.get(what, "columns")
    return {"probe": what, "unit": unit, "rows": rows}


def probe_wide_header(folder: Path) -> dict[str, object]:
    import privtd.io

    path = folder / "wide.csv"
    filler = [f"Input.field_{j:05d}" for j in range(6000)]  # about 110 KB of header
    head = [*filler, "HITId", "AssignmentId", "WorkerId", "Answer.label"]
    with open(path, "w") as handle:
        handle.write(",".join(head) + "\n")
        for i in range(4):
            handle.write(",".join(["x"] * len(filler) + [f"H{i % 2}", f"A{i}", f"W{i}", "y"]))
            handle.write("\n")
    header_kb = len(",".join(head)) / 1024
    try:
        found = privtd.io.detect(str(path))
    except Exception as exc:  # noqa: BLE001 - the probe reports whatever happens
        found = f"{type(exc).__name__}: {exc}"[:160]
    return {"probe": "wide_header", "header_kb": round(header_kb), "detected": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--ls-mb", type=float, nargs="*", help="Label Studio sizes in MB")
    parser.add_argument("--options", type=int, nargs="*", help="MTurk option counts")
    parser.add_argument("--inputs", type=int, nargs="*", help="Toloka input column counts")
    probes = ("hostile", "header", "mturk", "toloka", "label-studio")
    parser.add_argument("--only", nargs="*", choices=probes, default=probes, help="probes to run")
    args = parser.parse_args()
    ls_sizes = args.ls_mb or ([5, 10, 20] if args.quick else [25, 50, 100])
    options = args.options or ([2500, 5000, 10000] if args.quick else [12500, 25000, 50000])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs = args.inputs or ([2500, 5000, 10000] if args.quick else [5000, 10000, 20000])
        runs = {
            "hostile": lambda: probe_hostile(folder),
            "header": lambda: probe_wide_header(folder),
            "mturk": lambda: probe_sizes(folder, "mturk_options", options),
            "toloka": lambda: probe_sizes(folder, "toloka_inputs", inputs),
            "label-studio": lambda: probe_sizes(folder, "label_studio_memory", ls_sizes),
        }
        for name in args.only:
            print(json.dumps(runs[name]()), flush=True)


if __name__ == "__main__":
    main()
