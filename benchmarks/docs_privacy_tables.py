"""The figures of docs/privacy.md's audit and attack tables, from the commands named beside them:
every row is one command, run here as written, and its output is stored
under benchmarks/results/, which tests/test_readme_figures.py compares with the tables.

    nice -n 19 python benchmarks/docs_privacy_tables.py audit    # -> results/audit_table.jsonl
    nice -n 19 python benchmarks/docs_privacy_tables.py attack   # -> results/attack_tables.jsonl

``audit`` runs ``privtd audit ... --json`` at the CLI's default seed (0) and samples; ``attack``
runs benchmarks/attack_duchenne.py's Duchenne table and the synthetic crowd of
tests/test_mechanisms.py::test_attack_measures_the_two_layer_leak at 20 seeds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

# (row label in docs/privacy.md, the privtd audit arguments that row names)
AUDIT_ROWS: list[tuple[str, list[str]]] = [
    ("one-layer", ["-M", "one-layer", "-e", "1"]),
    ("two-layer", ["-M", "two-layer", "-e", "1"]),
    ("binary-rr (eps 2)", ["-M", "binary-rr", "-e", "2"]),
    (
        "exp-gaussian (range [0, 10], default grid)",
        ["-M", "exp-gaussian", "-e", "1", "-p", "low=0", "-p", "high=10"],
    ),
    ("krr-null ([0, 4])", ["-M", "krr-null", "-e", "1", "-p", "low=0", "-p", "high=4"]),
    (
        "two-layer-null ([0, 4])",
        ["-M", "two-layer-null", "-e", "1", "-p", "low=0", "-p", "high=4"],
    ),
    ("laplace ([0, 4], integer grid)", ["-M", "laplace", "-e", "1", "-p", "low=0", "-p", "high=4"]),
    (
        "mf (d = 2, one task, [0, 4]; 2e5 samples)",
        ["-M", "mf", "-e", "1", "-p", "d=2", "-p", "low=0", "-p", "high=4", "-n", "200000"],
    ),
]


def _audit(samples: int | None) -> list[dict]:
    out = []
    for label, args in AUDIT_ROWS:
        if samples is not None:  # a quick check of the commands, never stored
            if "-n" in args:
                args = args[: args.index("-n")]
            args = [*args, "-n", str(samples)]
        command = ["privtd", "audit", *args]
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "privtd.cli", "audit", *args, "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        if not done.stdout.strip():
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
        record = {"row": label, "command": " ".join(command), **json.loads(done.stdout)}
        record["seconds"] = round(time.perf_counter() - started, 1)
        print(json.dumps(record), flush=True)
        out.append(record)
    return out


def _attack(trials: int) -> list[dict]:
    import numpy as np

    from privtd import datasets
    from privtd.attack import attack
    from privtd.mechanisms import OneLayerRR, TwoLayerRR

    out = []
    crowds = {
        "duchenne": datasets.load("duchenne").answers,
        # tests/test_mechanisms.py::test_attack_measures_the_two_layer_leak's crowd.
        "synthetic": datasets.make_categorical(
            300, 60, 2, answers_per_task=20, accuracy=(0.75, 0.95), rng=1
        )[0],
    }
    grids = {"duchenne": (2.0, 1.0, 0.5, 0.1, 0.0), "synthetic": (2.0, 1.0, 0.5, 0.3, 0.1, 0.0)}
    for crowd, answers in crowds.items():
        for eps in grids[crowd]:
            for cls in (OneLayerRR, TwoLayerRR):
                mech = cls.from_epsilon(eps)
                runs = [attack(answers, mech.perturb(answers, rng=s)) for s in range(trials)]
                recovered = [r.recovered for r in runs]
                record = {
                    "crowd": crowd,
                    "epsilon": eps,
                    "mechanism": mech.name,
                    "trials": trials,
                    "as_reported": float(np.mean([r.as_reported for r in runs])),
                    "recovered": float(np.mean(recovered)),
                    "best": float(np.mean([r.best for r in runs])),
                    "recovered_se": float(np.std(recovered, ddof=1) / np.sqrt(trials)),
                    "inverted_workers": float(np.mean([r.inverted_workers for r in runs])),
                    "chance": float(runs[0].chance),
                }
                print(json.dumps(record), flush=True)
                out.append(record)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=["audit", "attack"])
    parser.add_argument("--samples", type=int, help="audit: override -n (not stored)")
    parser.add_argument("--trials", type=int, default=20, help="attack: seeds per row")
    args = parser.parse_args()
    if args.table == "audit":
        records = _audit(args.samples)
        path = RESULTS / "audit_table.jsonl"
        store = args.samples is None
    else:
        records = _attack(args.trials)
        path = RESULTS / "attack_tables.jsonl"
        store = args.trials == 20
    if store:
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
