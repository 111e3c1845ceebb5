"""MACE on a skewed binary crowd: privtd against crowd-kit 1.4.2, as given and with its workers
coded in first-appearance order.

The crowd (tests/crowds.py, ``skewed_crowd(seed, activity=1.6)``) has the traits of a
product-matching set: 8,315 tasks, 3 answers each, 12% of truths class 1, 176 workers with
Zipf(1.6) activity. On it crowd-kit's ``MACE`` at its defaults is more accurate than privtd's
but has a lower balanced accuracy, and the difference is crowd-kit's, not the model's:
crowd-kit 1.4.2 indexes its parameters by first appearance and its strategy counts by a sorted
``groupby``, so unless worker ids appear in sorted order each worker gets another's strategy
(docs/inference.md, MACE). Fed integer worker codes in first-appearance order, crowd-kit fits
the model and gives privtd's figures; renaming the workers (the same answers) moves its
figures. Rows:

- ``mv``, ``ds``: majority vote and Dawid-Skene, for scale;
- ``mace``, ``mace em``: privtd at its defaults (VB), and with ``method="em"``;
- ``ck``: crowd-kit's ``MACE()`` on the answers as they are (workers ``w0`` ... ``w175``);
- ``ck coded``: the same with workers coded in first-appearance order (the model, fitted);
- ``ck renamed r``: crowd-kit on the same answers with the worker ids permuted at random.

crowd-kit runs ``n_restarts=1``: it reseeds each restart with the same ``random_state``, so
its default 10 are that one start repeated. Each cell is accuracy / balanced accuracy / number
of tasks labelled 1; the first line of each seed gives the truth and the majority baseline.

Needs crowd-kit (not a privtd dependency), in a separate environment:

    python -m venv /tmp/ck && /tmp/ck/bin/pip install crowd-kit==1.4.2 'scikit-learn<1.6' pytest
    /tmp/ck/bin/pip install --no-deps -e .
    PYTHONPATH=src /tmp/ck/bin/python benchmarks/bench_mace_skewed.py [--seeds 5]

Writes benchmarks/results/mace_skewed.txt and, for seeds 0 and 1, the reference figures and
labels tests/test_mace_skewed.py holds privtd to (tests/reference/crowdkit_glad_mace/).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from crowdkit.aggregation import MACE as CkMACE

from privtd import evaluate
from privtd.errors import ConvergenceWarning
from privtd.inference import MACE, DawidSkene, MajorityVote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from crowds import skewed_crowd  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "mace_skewed.txt"
REFERENCE = ROOT / "tests" / "reference" / "crowdkit_glad_mace" / "skewed_crowd_mace.json"
ACTIVITY = 1.6
REFERENCE_SEEDS = (0, 1)

warnings.simplefilter("ignore", ConvergenceWarning)


def figures(labels: pd.Series, truth: pd.Series) -> dict[str, float]:
    labels = labels.reindex(truth.index).astype(int)
    m = evaluate(labels, truth)
    return {
        "accuracy": round(float(m["accuracy"]), 4),
        "balanced_accuracy": round(float(m["balanced_accuracy"]), 4),
        "ones": int((labels == 1).sum()),
    }


def cell(f: dict[str, float]) -> str:
    return f"{f['accuracy']:.4f} / {f['balanced_accuracy']:.4f} / {f['ones']:>5}"


def crowdkit(frame: pd.DataFrame) -> pd.Series:
    labels = CkMACE(n_restarts=1).fit_predict(frame)
    return labels.astype(int)


def coded(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Workers and labels as integers in order of first appearance, and each label code's
    value: the order crowd-kit's parameters use, so its sorted counts land on the right rows."""
    worker, _ = pd.factorize(frame["worker"])
    label, label_of = pd.factorize(frame["label"])
    return frame.assign(worker=worker, label=label), np.asarray(label_of)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--renamings", type=int, default=3)
    args = parser.parse_args()
    lines = [
        "MACE on the skewed crowd (tests/crowds.py, activity=1.6): accuracy / balanced "
        "accuracy / tasks labelled 1",
        "",
    ]
    reference: dict[str, dict[str, object]] = {}
    for seed in range(args.seeds):
        answers, truth = skewed_crowd(seed, activity=ACTIVITY)
        majority = 1.0 - float(truth.mean())
        lines.append(
            f"seed {seed}: truth {int(truth.sum())} of {len(truth)} tasks class 1; majority "
            f"baseline accuracy {majority:.4f}, balanced 0.5000"
        )
        rows: dict[str, dict[str, float]] = {}
        for name, est in (
            ("mv", MajorityVote()),
            ("ds", DawidSkene()),
            ("mace", MACE()),
            ("mace em", MACE(method="em")),
        ):
            rows[name] = figures(est.fit(answers).truths_, truth)
        frame = answers.to_frame().rename(columns={"answer": "label"})
        rows["ck"] = figures(crowdkit(frame), truth)
        coded_frame, label_of = coded(frame)
        ck = crowdkit(coded_frame)
        ck_coded = pd.Series(label_of[ck.to_numpy()], index=ck.index).reindex(truth.index)
        rows["ck coded"] = figures(ck_coded, truth)
        gen = np.random.default_rng(1000 + seed)
        for r in range(args.renamings):
            names = pd.Index(answers.workers)[gen.permutation(answers.n_workers)]
            rename = dict(zip(answers.workers, names, strict=True))
            renamed = frame.assign(worker=frame["worker"].map(rename))
            rows[f"ck renamed {r}"] = figures(crowdkit(renamed), truth)
        for name, f in rows.items():
            lines.append(f"  {name:<14} {cell(f)}")
        lines.append("")
        print("\n".join(lines[-len(rows) - 2 :]), flush=True)
        if seed in REFERENCE_SEEDS:
            reference[str(seed)] = {
                "truth_ones": int(truth.sum()),
                "crowdkit": rows["ck"],
                "crowdkit_coded": rows["ck coded"],
                "crowdkit_coded_labels": "".join(map(str, ck_coded.to_numpy().astype(int))),
            }
    OUT.write_text("\n".join(lines))
    if set(reference) == {str(s) for s in REFERENCE_SEEDS}:
        REFERENCE.write_text(
            json.dumps({"crowd-kit": "1.4.2", "activity": ACTIVITY, "seeds": reference}) + "\n"
        )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
