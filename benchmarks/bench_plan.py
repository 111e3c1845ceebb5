"""``privtd plan``'s predictions against what is then measured.

Each cell is a data set, a mechanism, a per-answer epsilon and a redundancy ``r`` (answers per
task). Measured: the mean over seeds of accuracy, balanced accuracy and the rarest class's
recall of the default perturbation-aware method (``privtd.inference.aware_method``, its default
decision) on answers subsampled to ``r`` a task and perturbed with the mechanism; each seed one
subsample and one perturbation (for the synthetic crowds, one crowd drawn from the described
population). Predicted: ``privtd.plan.predict`` from what a requester has before collecting:

- bundled sets (those with at least 500 truths: sentiment, dog, web): a pilot of 10% of the
  tasks, all their answers, perturbed under one-layer at the planned epsilon (one pilot serves
  every mechanism), with those tasks' truths as golden tasks (``Crowd.from_pilot``); the
  measured runs use the other 90% of the tasks, whose truths the plan never sees;
- synthetic crowds: the rough description the crowd was drawn from (class shares, mean
  per-class recall and its spread), as a requester would state it (``Crowd.from_accuracy``).

Two-layer over more than two labels uses the smallest feasible ``a`` (the paper's 0 where the
epsilon allows it). A cell passes when every metric is within 0.03 of the measured mean.
Numeric cells: the MAE of a synthetic numeric crowd under exp-gaussian and laplace, measured on
``privtd.datasets.make_numeric`` and predicted by ``privtd.plan.predict_numeric`` from its
description.

    PYTHONPATH=src python benchmarks/bench_plan.py [--seeds 10] [--jobs 16] [--data NAME ...]

Writes benchmarks/results/plan_validation.txt (the full grid: about 2 minutes on one core;
``--jobs N`` runs the cells in N processes).
"""

from __future__ import annotations

import argparse
import time
import warnings
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

from privtd import datasets
from privtd.answers import Answers
from privtd.errors import ConvergenceWarning
from privtd.plan import (
    Crowd,
    NumericCrowd,
    _class_scores,
    _default_method,
    _fit_truths,
    make_plan_mechanism,
    predict,
    predict_numeric,
)

OUT = Path(__file__).resolve().parent / "results" / "plan_validation.txt"
EPSILONS = (0.5, 1.0, 2.0, 4.0)
MECHANISMS = ("one-layer", "two-layer")
BUNDLED = {"sentiment": (3, 5, 10, 20), "dog": (3, 5, 10), "web": (3, 5)}
PILOT_SHARE = 0.1
TOLERANCE = 0.03
#: Whether the bundled sets' pilots come with their tasks' truths (golden tasks).
PILOT_TRUTH = True

# Synthetic crowds: class shares, per-class recall ranges (each worker's recall of class c
# uniform in its range), workers, tasks, their own redundancy. The rough description a
# requester gives is the shares, the ranges' midpoints and their half-width.
SYNTHETIC: dict[str, dict[str, Any]] = {
    "skewed": {
        "shares": [0.88, 0.12],
        "recall": [(0.85, 1.0), (0.55, 0.85)],
        "workers": 100,
        "tasks": 2000,
        "redundancy": (3,),
    },
    "binary": {
        "shares": [0.5, 0.5],
        "recall": [(0.55, 0.95), (0.55, 0.95)],
        "workers": 60,
        "tasks": 1000,
        "redundancy": (3, 5, 7),
    },
    "four": {
        "shares": [0.4, 0.3, 0.2, 0.1],
        "recall": [(0.5, 0.9)] * 4,
        "workers": 80,
        "tasks": 1000,
        "redundancy": (3, 5),
    },
}


def subsample(answers: Answers, per_task: int, gen: np.random.Generator) -> Answers:
    """At most ``per_task`` answers of each task, chosen at random."""
    key = gen.random(answers.n_answers)
    order = np.lexsort((key, answers.task))
    starts = np.searchsorted(answers.task[order], np.arange(answers.n_tasks))
    rank = np.empty(answers.n_answers, dtype=np.int64)
    rank[order] = np.arange(answers.n_answers) - np.repeat(starts, answers.task_counts())
    return answers.subset(rank < per_task)


def task_subset(answers: Answers, tasks: np.ndarray) -> Answers:
    """The answers of the task codes ``tasks``, with unused tasks and workers dropped."""
    keep = np.isin(answers.task, tasks)
    sub = answers.subset(keep)
    t_used, t_code = np.unique(sub.task, return_inverse=True)
    w_used, w_code = np.unique(sub.worker, return_inverse=True)
    return Answers(
        task=t_code.astype(np.int32),
        worker=w_code.astype(np.int32),
        value=sub.value,
        tasks=sub.tasks.take(t_used),
        workers=sub.workers.take(w_used),
        labels=sub.labels,
    )


def synthetic_crowd(spec: dict[str, Any], seed: int) -> tuple[Answers, np.ndarray, int]:
    gen = np.random.default_rng(seed)
    k, w = len(spec["shares"]), spec["workers"]
    lo = np.array([r[0] for r in spec["recall"]])
    hi = np.array([r[1] for r in spec["recall"]])
    own = gen.uniform(lo, hi, size=(w, k))
    conf = np.broadcast_to(((1 - own) / (k - 1))[:, None, :], (w, k, k)).copy()
    conf[:, np.arange(k), np.arange(k)] = own
    answers, truth, _ = datasets.make_categorical(
        spec["tasks"], w, k, answers_per_task=max(spec["redundancy"]), confusion=conf,
        prior=np.array(spec["shares"]), rng=gen,
    )  # fmt: skip
    return answers, truth.to_numpy(), int(np.argmin(spec["shares"]))


def rough_crowd(spec: dict[str, Any]) -> Crowd:
    lo = np.array([r[0] for r in spec["recall"]])
    hi = np.array([r[1] for r in spec["recall"]])
    return Crowd.from_accuracy(
        len(spec["shares"]), (lo + hi) / 2, spec["shares"], n_workers=spec["workers"],
        spread=float(np.mean(hi - lo) / 2), rng=0,
    )  # fmt: skip


def cell(job: tuple[str, str, float, int, int, int]) -> dict[str, Any]:
    """One cell: measured over ``seeds`` seeds, and predicted."""
    name, mech_name, eps, per_task, seeds, replicates = job
    warnings.simplefilter("ignore", ConvergenceWarning)
    start = time.perf_counter()
    measured = []
    if name in SYNTHETIC:
        spec = SYNTHETIC[name]
        k = len(spec["shares"])
        mech = make_plan_mechanism(mech_name, eps, k)
        method = _default_method(mech)
        for seed in range(seeds):
            answers, truth, minority = synthetic_crowd(spec, 1000 + seed)
            gen = np.random.default_rng(seed)
            reports = mech.perturb(subsample(answers, per_task, gen), rng=seed)
            pred = _fit_truths(reports, mech, method)
            measured.append(_class_scores(pred, truth, k, minority))
        crowd = rough_crowd(spec)
        n_tasks = spec["tasks"]
    else:
        data = datasets.load(name)
        answers = data.answers
        k = answers.n_labels
        assert answers.labels is not None
        mech = make_plan_mechanism(mech_name, eps, k)
        method = _default_method(mech)
        # The pilot: a fixed 10% of the tasks, all their answers, perturbed as planned.
        order = np.random.default_rng(12345).permutation(answers.n_tasks)
        n_pilot = int(round(PILOT_SHARE * answers.n_tasks))
        pilot = task_subset(answers, order[:n_pilot])
        rest = task_subset(answers, order[n_pilot:])
        truth_codes = answers.labels.get_indexer(data.truth.reindex(rest.tasks).to_numpy())
        scored = truth_codes >= 0
        shares = np.bincount(truth_codes[scored], minlength=k)
        minority = int(np.argmin(np.where(shares > 0, shares, np.inf)))
        for seed in range(seeds):
            gen = np.random.default_rng(seed)
            reports = mech.perturb(subsample(rest, per_task, gen), rng=seed)
            pred = _fit_truths(reports, mech, method)
            measured.append(_class_scores(pred[scored], truth_codes[scored], k, minority))
        truth = data.truth[data.truth.index.isin(pilot.tasks)] if PILOT_TRUTH else None
        # One pilot, collected under one-layer at the same epsilon, serves every mechanism.
        pilot_mech = make_plan_mechanism("one-layer", eps, k)
        crowd = Crowd.from_pilot(pilot_mech.perturb(pilot, rng=777), pilot_mech, truth)
        n_tasks = rest.n_tasks
    # The recall of the class the measured runs call the rarest (a pilot's shares of nearly
    # balanced classes may rank them the other way).
    predicted = predict(
        crowd, mech, per_task, n_tasks=n_tasks, replicates=replicates, rng=99, minority=minority
    )
    return {
        "data": name,
        "mechanism": mech_name,
        "eps": eps,
        "r": per_task,
        "measured": np.nanmean(np.array(measured), axis=0),
        "predicted": np.array(
            [predicted.scores[m][0] for m in ("accuracy", "balanced", "minority")]
        ),
        "interval": [predicted.scores[m][1:] for m in ("accuracy", "balanced", "minority")],
        "seconds": time.perf_counter() - start,
    }


#: A numeric crowd: truths uniform in [0, 10], each worker's error SD ``NOISE`` times
#: ``U(0.5, 1.5)``, described to the plan as ``--range 0,10 --noise 1 --spread 0.5``.
NUMERIC = {"low": 0.0, "high": 10.0, "noise": 1.0, "spread": 0.5, "workers": 50, "tasks": 500}
NUMERIC_REDUNDANCY = (3, 5)


def numeric_cell(job: tuple[str, float, int, int, int]) -> dict[str, Any]:
    """MAE measured on the data sets' numeric generator, and predicted from the description."""
    mech_name, eps, per_task, seeds, replicates = job
    spec = NUMERIC
    bounds = {"low": spec["low"], "high": spec["high"]}
    if mech_name == "laplace":
        bounds = {k: int(v) for k, v in bounds.items()}
    mech = make_plan_mechanism(mech_name, eps, **bounds)
    method = _default_method(mech)
    maes = []
    for seed in range(seeds):
        gen = np.random.default_rng(2000 + seed)
        sd = spec["noise"] * gen.uniform(1 - spec["spread"], 1 + spec["spread"], spec["workers"])
        answers, truth, _ = datasets.make_numeric(
            spec["tasks"], spec["workers"], answers_per_task=per_task,
            truth=(spec["low"], spec["high"]), sigma=sd, rng=gen,
        )  # fmt: skip
        value = np.clip(answers.value, spec["low"], spec["high"])
        if mech_name == "laplace":
            value = np.round(value)
        reports = mech.perturb(answers.with_values(value), rng=seed)
        pred = _fit_truths(reports, mech, method)
        maes.append(float(np.abs(pred - truth.reindex(reports.tasks).to_numpy()).mean()))
    crowd = NumericCrowd.from_noise(
        spec["low"], spec["high"], spec["noise"], n_workers=spec["workers"],
        spread=spec["spread"], rng=0,
    )  # fmt: skip
    p = predict_numeric(crowd, mech, per_task, n_tasks=spec["tasks"], replicates=replicates, rng=99)
    return {"mechanism": mech_name, "eps": eps, "r": per_task, "measured": float(np.mean(maes)),
            "predicted": p.scores["mae"][0], "interval": p.scores["mae"][1:],
            "baseline": p.baseline}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--data", nargs="*", default=[*BUNDLED, *SYNTHETIC])
    parser.add_argument("--epsilons", nargs="*", type=float, default=list(EPSILONS))
    parser.add_argument("--mechanisms", nargs="*", default=list(MECHANISMS))
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--no-numeric", action="store_true", help="Skip the numeric cells.")
    args = parser.parse_args()
    jobs = []
    for name in args.data:
        levels = BUNDLED[name] if name in BUNDLED else SYNTHETIC[name]["redundancy"]
        for mech in args.mechanisms:
            for eps in args.epsilons:
                for r in levels:
                    jobs.append((name, mech, eps, r, args.seeds, args.replicates))
    start = time.perf_counter()
    numeric_jobs = [
        (mech, eps, r, args.seeds, args.replicates)
        for mech in ("exp-gaussian", "laplace")
        for eps in args.epsilons
        for r in NUMERIC_REDUNDANCY
        if not args.no_numeric
    ]
    if args.jobs > 1:
        with Pool(args.jobs) as pool:
            rows = pool.map(cell, jobs, chunksize=1)
            numeric_rows = pool.map(numeric_cell, numeric_jobs, chunksize=1)
    else:
        rows = [cell(job) for job in jobs]
        numeric_rows = [numeric_cell(job) for job in numeric_jobs]
    lines = [
        f"# privtd plan: predicted vs measured (mean of {args.seeds} seeds); "
        f"{args.replicates} simulated crowds per prediction; pass = all three within "
        f"{TOLERANCE}",
        "# acc = accuracy, bal = balanced accuracy, min = rarest class's recall; "
        "meas / pred (pred - meas)",
        f"{'data':<10} {'mechanism':<10} {'eps':>4} {'r':>3}  {'acc':<22} {'bal':<22} "
        f"{'min':<22} pass  in95",
    ]
    misses = []
    for row in rows:
        meas, pred = row["measured"], row["predicted"]
        diff = pred - meas
        ok = bool(np.all(np.abs(diff) <= TOLERANCE))
        inside = all(lo <= m <= hi for m, (lo, hi) in zip(meas, row["interval"], strict=True))
        parts = [f"{m:.3f}/{p:.3f} ({d:+.3f})" for m, p, d in zip(meas, pred, diff, strict=True)]
        lines.append(
            f"{row['data']:<10} {row['mechanism']:<10} {row['eps']:>4g} {row['r']:>3}  "
            + " ".join(f"{p:<22}" for p in parts)
            + f" {'yes' if ok else 'NO':<4}  {'yes' if inside else 'no'}"
        )
        if not ok:
            worst = ("acc", "bal", "min")[int(np.argmax(np.abs(diff)))]
            misses.append(f"{row['data']} {row['mechanism']} eps {row['eps']:g} r {row['r']}: "
                          f"{worst} off by {float(np.max(np.abs(diff))):.3f}")  # fmt: skip
    n_ok = len(rows) - len(misses)
    lines.append(f"# {n_ok} of {len(rows)} cells within {TOLERANCE} on all three metrics")
    for metric, i in (("accuracy", 0), ("balanced", 1), ("minority", 2)):
        if not rows:
            break
        err = np.array([abs(r["predicted"][i] - r["measured"][i]) for r in rows])
        lines.append(
            f"# {metric}: mean |error| {np.nanmean(err):.3f}, max {np.nanmax(err):.3f}, "
            f"within {TOLERANCE}: {int((err <= TOLERANCE).sum())}/{len(rows)}"
        )
    lines += [f"# miss: {m}" for m in misses]
    if numeric_rows:
        lines += [
            "# numeric: truths uniform in [0, 10], worker error SD 1 x U(0.5, 1.5), "
            f"{NUMERIC['workers']} workers, {NUMERIC['tasks']} tasks; MAE measured / predicted "
            "(relative error), the plan's 95% interval, and the median-of-answers baseline",
            f"{'mechanism':<13} {'eps':>4} {'r':>3}  {'MAE meas/pred':<24} {'interval':<16} "
            "baseline",
        ]
        for row in numeric_rows:
            rel = (row["predicted"] - row["measured"]) / row["measured"]
            lo, hi = row["interval"]
            lines.append(
                f"{row['mechanism']:<13} {row['eps']:>4g} {row['r']:>3}  "
                f"{row['measured']:.3f}/{row['predicted']:.3f} ({rel:+.1%})".ljust(44)
                + f" [{lo:.2f}, {hi:.2f}]".ljust(17)
                + f" {row['baseline']:.3f}"
            )
        rels = [abs(r["predicted"] - r["measured"]) / r["measured"] for r in numeric_rows]
        lines.append(
            f"# numeric: mean relative error {np.mean(rels):.1%}, max {np.max(rels):.1%}, "
            f"within 10%: {sum(r <= 0.1 for r in rels)}/{len(rels)}"
        )
    lines.append(f"# {time.perf_counter() - start:.0f} s with {args.jobs} job(s)")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)


if __name__ == "__main__":
    main()
