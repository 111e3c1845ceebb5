"""Adaptive against uniform redundancy, replayed on the bundled categorical data sets.

Each data set's real answers are perturbed once per seed (one-layer randomized response at
per-answer epsilon 1 and 2, two-layer at epsilon 1; two-layer over more than two labels with the
smallest feasible ``a``), and each task's answers are put in a random order. The two policies
then reveal those perturbed answers one at a time:

- uniform: round-robin over the tasks in a random order (every task's first answer, then every
  task's second, ...), the same redundancy for every task;
- adaptive: ``privtd.inference.adaptive.AdaptiveRedundancy`` (target confidence 0.95, at least
  one answer a task, no other cap than the answers the data set holds), asked for a batch of
  tasks (2% of them) at a time from the answers revealed so far, as a campaign hands each
  arriving worker its tasks; each task handed reveals its next answer. Two rankings, as a
  campaign's ``model`` setting chooses: ``pooled``, the policy's own model (every report weighed
  alike), and ``method``, the default private method fitted on the answers revealed so far
  (each worker weighed by its fitted accuracy; what the service does by default).

At every checkpoint (a quarter of an answer a task apart) the default private method
(``privtd.inference.aware_method(mechanism)``, built by ``make_estimator``, as ``privtd infer
--mechanism`` picks it) is fitted on the answers revealed so far, and its truths are scored on
the expert truths: balanced accuracy (BA), accuracy (acc) and the majority-class baseline's
accuracy (base). Both policies see the same perturbed answers in the same per-task order, so a
difference is the order alone. The comparison stops at ``R`` answers a task on average, below
each data set's own redundancy (about 0.6 of it), so that the adaptive policy has answers left
to spend where it wants them: a replay can only hand out the answers a data set holds.

Reported, per data set and mechanism (mean over seeds): BA and accuracy of each policy at 1,
2, ..., R answers a task; the answers each needs to reach uniform's balanced accuracy at R
answers a task (linear between checkpoints), and what adaptive redundancy saves against
uniform; where the adaptive policy settled every task before R, the answers it used.

    PYTHONPATH=src python benchmarks/bench_adaptive.py [--seeds 5] [--data NAME ...] [--jobs N]

Writes benchmarks/results/adaptive.txt, rewritten as each setting's seeds finish. One replay
takes 5 to 60 s of one core (adult_content the longest); ``--jobs 16`` runs the default grid
(5 data sets x 3 settings x 5 seeds) on 16 cores in a few minutes.
"""

from __future__ import annotations

import argparse
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privtd import datasets, evaluate
from privtd.answers import Answers
from privtd.errors import ConvergenceWarning
from privtd.inference import aware_method, make_estimator
from privtd.inference.adaptive import AdaptiveRedundancy
from privtd.mechanisms import OneLayerRR, TwoLayerRR
from privtd.mechanisms.randomized_response import flip_for_epsilon

OUT = Path(__file__).resolve().parent / "results" / "adaptive.txt"
NAMES = ["duchenne", "sentiment", "dog", "web", "adult_content"]
SETTINGS = [("one-layer", 1.0), ("one-layer", 2.0), ("two-layer", 1.0)]
#: Checkpoints per answer a task.
STEPS = 4
#: The adaptive policy's batch, as a share of the tasks.
BATCH_SHARE = 0.02
#: The adaptive policy's posteriors: its pooled model, and the default private method's fit.
MODELS = ("pooled", "method")


def mechanism(name: str, epsilon: float, k: int) -> OneLayerRR | TwoLayerRR:
    if name == "one-layer":
        return OneLayerRR.from_epsilon(epsilon, n_labels=k)
    a = max(0.0, 2.0 * float(flip_for_epsilon(epsilon, k)) - 1.0)
    return TwoLayerRR.from_epsilon(epsilon, n_labels=k, a=a)


def horizon(answers: Answers) -> int:
    """``R``: answers a task on average where the comparison stops (about 0.6 of the data
    set's own redundancy, at least 2)."""
    return max(2, int(0.6 * answers.n_answers / answers.n_tasks))


def per_task_order(answers: Answers, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The answers sorted by task, each task's in a random order, and each task's first
    position in that sort."""
    order = np.lexsort((gen.random(answers.n_answers), answers.task))
    starts = np.concatenate(([0], np.cumsum(np.bincount(answers.task, minlength=answers.n_tasks))))
    return order, starts[:-1]


def uniform_order(answers: Answers, order: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """Round-robin over the tasks in a random order: every task's first answer, then every
    task's second, and so on (a task out of answers drops out)."""
    task = answers.task[order]
    starts = np.concatenate(([0], np.cumsum(np.bincount(task, minlength=answers.n_tasks))))
    rank = np.arange(task.size) - starts[task]
    shuffled = gen.permutation(answers.n_tasks)
    out: np.ndarray = order[np.lexsort((shuffled[task], rank))]
    return out


def adaptive_order(
    answers: Answers,
    perturbed: Answers,
    order: np.ndarray,
    starts: np.ndarray,
    mech: Any,
    budget: int,
    gen: np.random.Generator,
    model: str,
) -> np.ndarray:
    """The answers in the order the adaptive policy asks for them, up to ``budget`` (fewer if
    it settles every task first). ``model``: "pooled" ranks by the policy's pooled posteriors,
    "method" by those of the default private method fitted on the answers revealed so far."""
    n_tasks, k = answers.n_tasks, answers.n_labels
    held = np.bincount(answers.task, minlength=n_tasks)
    policy = AdaptiveRedundancy(
        target=0.95,
        max_per_task=int(held.max()),
        batch=max(1, int(BATCH_SHARE * n_tasks)),
        max_answers=budget,
    )
    counts = np.zeros((n_tasks, k))
    revealed = np.zeros(n_tasks, dtype=np.int64)
    mask = np.zeros(answers.n_answers, dtype=bool)
    taken: list[np.ndarray] = []
    n = 0
    while n < budget:
        posteriors = None
        if model == "method" and n:
            fit = make_estimator(aware_method(mech), mechanism=mech).fit(perturbed.subset(mask))
            posteriors = policy.posteriors_of(fit, answers.tasks)
        tasks = policy.next_tasks(
            counts, mech, posteriors=posteriors, exclude=revealed >= held, n_answers=n, rng=gen
        )
        if tasks.size == 0:
            break
        picked = order[starts[tasks] + revealed[tasks]]
        np.add.at(counts, (tasks, perturbed.value[picked]), 1.0)
        revealed[tasks] += 1
        mask[picked] = True
        taken.append(picked)
        n += tasks.size
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


def scores(
    perturbed: Answers, revealed: np.ndarray, mech: Any, truth: pd.Series
) -> tuple[float, float, float]:
    """(balanced accuracy, accuracy, the majority class's accuracy) of the default private
    method on the answers ``revealed``."""
    mask = np.zeros(perturbed.n_answers, dtype=bool)
    mask[revealed] = True
    fit = make_estimator(aware_method(mech), mechanism=mech).fit(perturbed.subset(mask))
    truths = fit.truths_.reindex(truth.index)
    if truths.isna().any():  # a task without an answer yet is a miss (none from one a task on)
        truths = truths.astype(object).fillna("(no answer)")
    m = evaluate(truths, truth)
    return m["balanced_accuracy"], m["accuracy"], m["baseline_accuracy"]


def replay(name: str, mech_name: str, epsilon: float, seed: int) -> dict[str, Any]:
    """One seed: both policies' scores at every checkpoint, and the adaptive one's length."""
    warnings.simplefilter("ignore", ConvergenceWarning)
    data = datasets.load(name)
    answers, truth = data.answers, data.truth
    mech = mechanism(mech_name, epsilon, answers.n_labels)
    gen = np.random.default_rng(seed)
    perturbed = mech.perturb(answers, rng=seed)
    order, starts = per_task_order(answers, gen)
    r_max = horizon(answers)
    grid = np.arange(STEPS, STEPS * r_max + 1) * answers.n_tasks // STEPS
    assert len(grid) == STEPS * (r_max - 1) + 1
    orders = {"uniform": uniform_order(answers, order, gen)}
    for model in MODELS:
        orders[model] = adaptive_order(
            answers, perturbed, order, starts, mech, int(grid[-1]), gen, model
        )
    out: dict[str, Any] = {"grid": grid, "r_max": r_max}
    for key, seq in orders.items():
        out[key] = np.array([scores(perturbed, seq[:b], mech, truth) for b in grid])
        out[f"{key}_used"] = seq.size
    return out


def needed(grid: np.ndarray, curve: np.ndarray, level: float) -> float | None:
    """The first answer count (linear between checkpoints) where ``curve`` reaches ``level``."""
    above = np.flatnonzero(curve >= level - 1e-12)
    if above.size == 0:
        return None
    i = int(above[0])
    if i == 0:
        return float(grid[0])
    x0, x1, y0, y1 = grid[i - 1], grid[i], curve[i - 1], curve[i]
    return float(x0 + (x1 - x0) * (level - y0) / (y1 - y0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--data", nargs="*", default=NAMES)
    parser.add_argument("--settings", nargs="*", help="MECHANISM:EPSILON, e.g. one-layer:1")
    parser.add_argument("--jobs", type=int, default=1, help="processes (one replay each)")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    settings = SETTINGS
    if args.settings:
        settings = [(s.split(":")[0], float(s.split(":")[1])) for s in args.settings]
    keys = [(name, mech, eps) for name in args.data for mech, eps in settings]
    start = time.perf_counter()
    # Every replay is submitted at once (any free process takes the next); the file is
    # rewritten as each setting's seeds are in, so a long run leaves what it finished.
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 else None
    futures = {
        key: [pool.submit(replay, *key, seed) if pool else None for seed in range(args.seeds)]
        for key in keys
    }
    by_setting: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for key in keys:
        by_setting[key] = [
            f.result() if f is not None else replay(*key, seed)
            for seed, f in enumerate(futures[key])
        ]
        write(args, by_setting, time.perf_counter() - start)
    if pool is not None:
        pool.shutdown()


def write(
    args: argparse.Namespace,
    by_setting: dict[tuple[str, str, float], list[dict[str, Any]]],
    elapsed: float,
) -> None:
    lines = [
        f"# adaptive vs uniform redundancy, replayed; mean of {args.seeds} seeds; "
        "BA = balanced accuracy, acc = accuracy, base = majority-class accuracy (its BA is "
        "1/classes); default private method: "
        + ", ".join(f"{k} labels {aware_method(mechanism('one-layer', 1, k))}" for k in (2, 4)),
        "# per r answers a task, BA/acc: uniform | adaptive, pooled model | adaptive, the "
        "method's posteriors",
    ]
    summary = [
        "# at R answers a task: BA and accuracy of uniform and adaptive redundancy (model: the "
        "policy's posteriors, pooled or the method's); base = majority-class accuracy; dBA = "
        "adaptive - uniform BA (+- 2 standard errors of the paired difference over seeds); "
        "need: the answers each policy needs for uniform's BA at R (uniform's own curve can "
        "reach it before R: balanced accuracy is not monotone in the answers); saved = 1 - "
        "adaptive's need / uniform's",
        f"{'data':14s} {'mechanism':9s} {'eps':>3s} {'R':>2s} {'model':6s} {'uni BA':>6s} "
        f"{'ada BA':>6s} {'dBA':>14s} {'uni acc':>7s} {'ada acc':>7s} {'base':>5s} "
        f"{'need uni':>8s} {'need ada':>8s} {'saved':>6s}",
    ]
    for (name, mech, eps), runs in by_setting.items():
        grid = runs[0]["grid"]
        r_max = runs[0]["r_max"]
        mean = {key: np.mean([r[key] for r in runs], axis=0) for key in ("uniform", *MODELS)}
        uni = mean["uniform"]
        cells = []
        for r in range(1, r_max + 1):
            i = (r - 1) * STEPS
            cells.append(
                f"r{r} " + "|".join(f"{mean[key][i, 0]:.3f}/{mean[key][i, 1]:.3f}" for key in mean)
            )
        lines.append(f"{name:14s} {mech:9s} {eps:3g}  " + "  ".join(cells))
        level = float(uni[-1, 0])
        need_uni = needed(grid, uni[:, 0], level)
        for model in MODELS:
            ada = mean[model]
            diff = np.array([r[model][-1, 0] - r["uniform"][-1, 0] for r in runs])
            err = 2 * diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
            need_ada = needed(grid, ada[:, 0], level)
            used = min(r[f"{model}_used"] for r in runs)
            ada_s = "never" if need_ada is None else f"{need_ada:.0f}"
            saved = (
                "-" if need_ada is None or need_uni is None else f"{1 - need_ada / need_uni:+.0%}"
            )
            summary.append(
                f"{name:14s} {mech:9s} {eps:3g} {r_max:2d} {model:6s} {uni[-1, 0]:6.3f} "
                f"{ada[-1, 0]:6.3f} {diff.mean():+7.3f}+-{err:.3f} {uni[-1, 1]:7.3f} "
                f"{ada[-1, 1]:7.3f} {uni[-1, 2]:5.3f} {need_uni:8.0f} {ada_s:>8s} {saved:>6s}"
                + (f"  (settled every task at {used} answers)" if used < grid[-1] else "")
            )
            if (name, mech, eps) == list(by_setting)[-1]:
                print(summary[-1], flush=True)
    text = lines + [""] + summary + [f"# {elapsed:.0f} s, {args.jobs} job(s)"]
    args.output.write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
