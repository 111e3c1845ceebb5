"""Speed of privtd's estimators against crowd-kit on the same data, in one run.

Reports, per algorithm and size, privtd's time, crowd-kit's time, their ratio, and the share of
tasks given the same label. Ratios (not absolute times) are the targets, so the numbers stay
comparable across machines.

    python benchmarks/bench_inference.py                      # 1e5 and 1e6 answers, K = 2, 5
    python benchmarks/bench_inference.py --sizes 1e5 1e6 1e7  # adds 1e7 (crowd-kit takes minutes)
    python benchmarks/bench_inference.py --numeric 1e7        # CRH, CATD, GTM on numeric answers
    python benchmarks/bench_inference.py --real               # the bundled real datasets

crowd-kit (1.4.2 needs scikit-learn < 1.6) is a benchmark-only dependency; without it only
privtd's times are printed. Results are appended as JSON lines to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privtd import Answers, datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import CATD, CRH, GTM, DawidSkene, MajorityVote, OneCoinDawidSkene, _kernels

try:
    import crowdkit.aggregation as ck
except ImportError:  # pragma: no cover - benchmark-only dependency
    ck = None

RESULTS = Path(__file__).parent / "results"


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def categorical_data(n_answers: int, k: int, seed: int = 0):
    # Heterogeneous one-coin workers (accuracy U(0.4, 0.95)), 5 answers per task, 1,000 workers.
    per_task = 5
    answers, truth, _ = datasets.make_categorical(
        n_answers // per_task, 1000, k, answers_per_task=per_task, accuracy=(0.4, 0.95), rng=seed
    )
    return answers, truth


PAIRS: list[tuple[str, Callable[[], Any], str]] = [
    ("mv", MajorityVote, "MajorityVote"),
    ("ds", DawidSkene, "DawidSkene"),
    ("one-coin-ds", OneCoinDawidSkene, "OneCoinDawidSkene"),
]


def compare(answers, label: str, repeat: int, ck_repeat: int, methods: list[str]) -> list[dict]:
    rows = []
    frame = None
    t_code = 0.0
    for name, ours_cls, ck_name in PAIRS:
        if name not in methods:
            continue
        ours_cls().fit(answers)  # warm-up: numba compiles (or loads its cache) once
        t_ours, est = best_of(lambda cls=ours_cls: cls().fit(answers), repeat)
        row: dict[str, Any] = {
            "data": label,
            "method": name,
            "n_answers": answers.n_answers,
            "privtd_s": round(t_ours, 4),
            "privtd_iter": est.n_iter_,
        }
        if ck is not None:
            if frame is None:
                frame = answers.to_frame().rename(columns={"answer": "label"})
                # privtd's times above are fits on coded answers; coding crowd-kit's table
                # (hashing ids and labels, checking duplicates) is paid once per dataset.
                t_code, _ = best_of(lambda f=frame: Answers.from_frame(f), 1)
            row["coding_s"] = round(t_code, 4)
            model = getattr(ck, ck_name)
            t_ck, labels = best_of(lambda m=model, f=frame: m().fit_predict(f), ck_repeat)
            ours = est.truths_
            same = (ours.loc[labels.index].to_numpy() == labels.to_numpy()).mean()
            row.update(
                crowdkit_s=round(t_ck, 3),
                ratio=round(t_ck / t_ours, 1),
                ratio_with_coding=round(t_ck / (t_ours + t_code), 1),
                same_label=round(float(same), 4),
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def numeric_rows(n_answers: int, repeat: int) -> list[dict]:
    answers, truth, _ = datasets.make_numeric(
        n_answers // 10, 1000, answers_per_task=10, error_rate=1.0, rng=0
    )
    rows = []
    for name, cls in (("crh", CRH), ("catd", CATD), ("gtm", GTM)):
        t, est = best_of(lambda c=cls: c().fit(answers), repeat)
        mae = float(np.abs(est.truths_.to_numpy() - truth.to_numpy()).mean())
        row = {
            "data": "numeric",
            "method": name,
            "n_answers": n_answers,
            "privtd_s": round(t, 3),
            "privtd_iter": est.n_iter_,
            "mae": round(mae, 4),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=float, default=[1e5, 1e6])
    parser.add_argument("--labels", nargs="*", type=int, default=[2, 5])
    parser.add_argument("--methods", nargs="*", default=[p[0] for p in PAIRS])
    parser.add_argument("--numeric", nargs="*", type=float, default=[])
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ck-repeat", type=int, default=1)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    header = {
        "machine": platform.processor() or platform.machine(),
        "backend": _kernels.get_backend(),
        "crowdkit": getattr(ck, "__name__", None) and __import__("crowdkit").__version__,
        "pandas": pd.__version__,
    }
    print(json.dumps(header))
    rows: list[dict] = []
    for size in args.sizes:
        for k in args.labels:
            answers, _ = categorical_data(int(size), k)
            rows += compare(answers, f"synthetic K={k}", args.repeat, args.ck_repeat, args.methods)
    for size in args.numeric:
        rows += numeric_rows(int(size), args.repeat)
    if args.real:
        for name in ("duchenne", "web", "adult_content", "sentiment", "dog"):
            answers = datasets.load(name).answers
            rows += compare(answers, name, args.repeat, args.ck_repeat, args.methods)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(RESULTS / f"inference-{stamp}.jsonl", "w") as handle:
        for row in [header, *rows]:
            handle.write(json.dumps(row) + "\n")
    print(pd.DataFrame(rows).to_string(index=False) if rows else "no rows")


if __name__ == "__main__":
    main()
