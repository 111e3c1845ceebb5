"""CSV injection: plant formula ids in the answers and count the formula cells privtd writes.

    python benchmarks/attacks/attack_csv_injection.py
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_csv_injection.py   # another tree

A worker or task id (or a label) that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or a
carriage return) runs as a formula when the requester opens privtd's output in a spreadsheet
(OWASP, "CSV Injection"). The attack puts such ids in an answers file, then runs ``privtd
infer`` (truths, workers, probabilities), ``privtd perturb``, ``Answers.to_csv`` and the
service's export, and prints one JSON line: for each output the number of cells a spreadsheet
would take for a formula (numbers such as ``-1`` aside), and whether privtd reads its own
truths and perturbed answers back with the ids they had ("round_trip").
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import tempfile
from pathlib import Path

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
TASKS = ['=HYPERLINK("http://evil.example","click")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)"]
TASKS += ["-1", "t5"]
WORKERS = ["=w1", "@w2", "-w3", "w4"]


def formula_cells(text: str) -> int:
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, header=None)
    cells = [c for c in frame.to_numpy().ravel() if c]
    return sum(c.startswith(FORMULA_START) and not NUMBER.fullmatch(c) for c in cells)


def cli(*args: object) -> None:
    from privtd.cli import main

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            if exc.code:
                raise RuntimeError(f"privtd {args[0]} failed") from None


def service_export() -> str | None:
    try:
        from fastapi.testclient import TestClient

        from privtd.service import create_app
    except ImportError:
        return None
    token = "attack-requester-token-of-32-chars!"
    auth = {"Authorization": f"Bearer {token}"}
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(f"sqlite:///{tmp}/s.db", requester_token=token)
        with TestClient(app) as api:
            body = {
                "name": "=attack",
                "tasks": [{"key": k} for k in TASKS],
                "mechanism": "one-layer",
                "epsilon": 1.0,
                "labels": ["=yes", "no"],
                "budget": 40.0,
            }
            made = api.post("/campaigns", json=body, headers=auth).json()
            cid = made["id"]
            code = api.post(f"/campaigns/{cid}/codes", json={"count": 1}, headers=auth).json()
            enrolled = api.post(
                f"/campaigns/{cid}/workers", json={"name": "@mallory", "code": code["codes"][0]}
            ).json()
            submission = {
                "mechanism": {"name": "one-layer", "params": made["mechanism"]["params"]},
                "reports": [{"task": k, "value": "=yes"} for k in TASKS],
            }
            headers = {"Authorization": f"Bearer {enrolled['token']}", "Idempotency-Key": "k"}
            api.post(f"/campaigns/{cid}/submissions", json=submission, headers=headers)
            return api.get(f"/campaigns/{cid}/reports", headers=auth).text


def main() -> None:
    from privtd import Answers

    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = [
            (t, w, ("=yes", "no")[(i + j) % 2])
            for i, t in enumerate(TASKS)
            for j, w in enumerate(WORKERS)
        ]
        answers = folder / "answers.csv"
        pd.DataFrame(rows, columns=["task", "worker", "answer"]).to_csv(
            answers, index=False, quoting=csv.QUOTE_NONNUMERIC
        )
        truths, workers, probas = (folder / f"{n}.csv" for n in ("truths", "workers", "probas"))
        cli(
            "infer",
            answers,
            "-m",
            "ds",
            "-o",
            truths,
            "--workers-output",
            workers,
            "--probas-output",
            probas,
        )
        perturbed = folder / "perturbed.csv"
        cli("perturb", answers, "-M", "one-layer", "-e", "2", "--seed", "1", "-o", perturbed)
        saved = folder / "saved.csv"
        Answers.from_csv(str(answers)).to_csv(str(saved))
        outputs = {
            "truths": truths,
            "workers": workers,
            "probas": probas,
            "perturbed": perturbed,
            "answers_to_csv": saved,
        }
        cells = {name: formula_cells(path.read_text()) for name, path in outputs.items()}
        export = service_export()
        if export is not None:
            cells["service_export"] = formula_cells(export)
        out["formula_cells"] = cells
        out["total"] = sum(cells.values())
        back = Answers.from_csv(str(perturbed))
        truth_tasks = set(Answers.from_csv(str(saved)).tasks.astype(str))
        out["round_trip"] = (
            set(back.tasks.astype(str)) == set(TASKS)
            and set(back.workers.astype(str)) == set(WORKERS)
            and truth_tasks == set(TASKS)
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
