"""The perturbation-aware default against majority vote and Dawid-Skene, in balanced accuracy.

On skewed classes with little evidence per task, the aware Dawid-Skene model's learned class
prior can run to a fixed point where the prior alone explains the answers, and its most probable
label (the MAP decision) is then the majority class for every task: accuracy equal to that
class's share, balanced accuracy 0.5. This measures, on the same perturbed answers, majority vote
(``mv``), Dawid-Skene (``ds``) and the default aware method (``privtd.inference.aware_method``:
``aware-ds``, its class prior learned over two labels and fixed uniform over more) decided three
ways: the most probable
label (``map``), the balanced decision ``argmax mu / prior`` (``bal``), and ``aware-ds`` fitted
with a fixed uniform class prior (``unif``, at every label count); ``dflt`` is what the estimator's
``truths_`` give as shipped. On the synthetic crowd, ``omap`` and ``obal`` decide from the exact
posteriors (the true class prior, every worker's true confusion and flip): the best any
estimator can do in expectation, for accuracy and for balanced accuracy. Each cell is balanced
accuracy / accuracy, the mean over seeds (each seed one perturbation, and for the synthetic crowd
one crowd).

Data: a synthetic crowd with the traits of a product-matching set (8,315 tasks, 3 answers each,
12% of truths class 1; 176 workers: 45% conservative, recall of 1 uniform in 0.1-0.5 and of 0 in
0.95-1.0; 35% good, 0.75-0.9 / 0.93-0.99; 12% coin-flippers; 8% adversarial, 0.87 / 0.11), and
the bundled categorical datasets scored on their expert truths. Mechanisms: one-layer and
two-layer randomized response at per-answer epsilon 0.5, 1, 2 and 4 (two-layer over more than two
labels with the smallest feasible ``a``, as close to the paper's ``a = 0`` as the epsilon allows).

    PYTHONPATH=src python benchmarks/bench_class_prior.py [--seeds 10] [--data NAME ...] \\
        [--mechanisms one-layer two-layer] [--epsilons 0.5 1 2 4] [--jobs N] [--output FILE]

``sel`` is :class:`privtd.inference.AwareSelect` (``aware-select``): the aware model chosen by
held-out likelihood (docs/inference.md). Each line ends with whether ``dflt`` and ``sel`` reach
the target, balanced accuracy at least ``max(mv, ds) - 0.005``, and how often ``sel`` chose each
candidate. ``--jobs N`` spreads the (data, mechanism, epsilon, seed) cells over N processes.
Writes benchmarks/results/class_prior.txt: 3 seeds took 8 minutes on one core, so the 10-seed
grid takes about 27 minutes of one core, or 2-3 minutes with ``--jobs 16``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from privtd import datasets, evaluate
from privtd.errors import ConvergenceWarning
from privtd.inference import aware_method, decide, make_estimator
from privtd.mechanisms import OneLayerRR, TwoLayerRR
from privtd.mechanisms.randomized_response import flip_for_epsilon

OUT = Path(__file__).resolve().parent / "results" / "class_prior.txt"
NAMES = ["synthetic", "duchenne", "sentiment", "dog", "web", "adult_content"]
EPSILONS = (0.5, 1.0, 2.0, 4.0)


def skewed_crowd(seed: int) -> tuple[datasets.Answers, pd.Series, np.ndarray]:
    """The product-matching crowd above (tests/test_decision.py builds the same one), with its
    workers' confusions ``[worker, answer, truth]``."""
    gen = np.random.default_rng(seed)
    n_workers = 176
    kind = gen.choice(4, size=n_workers, p=[0.45, 0.35, 0.12, 0.08])
    # Recall of class 1 and of class 0 per worker type: conservative, good, coin, adversarial.
    recall_1 = gen.uniform(
        np.array([0.1, 0.75, 0.5, 0.87])[kind], np.array([0.5, 0.9, 0.5, 0.87])[kind]
    )
    recall_0 = gen.uniform(
        np.array([0.95, 0.93, 0.5, 0.11])[kind], np.array([1.0, 0.99, 0.5, 0.11])[kind]
    )
    confusion = np.stack(
        [np.stack([recall_0, 1 - recall_0], axis=1), np.stack([1 - recall_1, recall_1], axis=1)],
        axis=2,
    )  # [worker, answer, truth]
    answers, truth, _ = datasets.make_categorical(
        8315, n_workers, 2, answers_per_task=3, confusion=confusion, prior=[0.88, 0.12], rng=gen
    )
    return answers, truth, confusion


def oracle(
    perturbed: datasets.Answers,
    confusion: np.ndarray,
    flips: np.ndarray,
    prior: np.ndarray,
) -> np.ndarray:
    """The exact posteriors of the synthetic crowd: the true class prior, each worker's true
    confusion composed with the flip its device used (``flips`` per worker code); what no
    estimator can beat, in expectation, under either decision."""
    f = flips[:, None, None]
    composed = (1.0 - 2.0 * f) * confusion + f  # (R_f pi)[z, y] over two labels
    log_lik = np.log(composed[perturbed.worker, perturbed.value, :])
    scores = np.log(prior) + np.stack(
        [np.bincount(perturbed.task, log_lik[:, y], minlength=perturbed.n_tasks) for y in (0, 1)],
        axis=1,
    )
    mu = np.exp(scores - scores.max(axis=1, keepdims=True))
    return mu / mu.sum(axis=1, keepdims=True)


def mechanism(name: str, epsilon: float, k: int) -> OneLayerRR | TwoLayerRR:
    if name == "one-layer":
        return OneLayerRR.from_epsilon(epsilon, n_labels=k)
    a = max(0.0, 2.0 * float(flip_for_epsilon(epsilon, k)) - 1.0)
    return TwoLayerRR.from_epsilon(epsilon, n_labels=k, a=a)


def scores(truths: pd.Series, truth: pd.Series) -> np.ndarray:
    m = evaluate(truths, truth)
    return np.array([m["balanced_accuracy"], m["accuracy"]])


def load(name: str, seed: int) -> tuple[datasets.Answers, pd.Series, np.ndarray | None]:
    if name == "synthetic":
        return skewed_crowd(seed)
    data = datasets.load(name)
    return data.answers, data.truth, None


def cell(job: tuple[str, str, float, int]) -> dict[str, np.ndarray]:
    """One (data, mechanism, epsilon, seed): each row's balanced accuracy and accuracy."""
    name, mech_name, epsilon, seed = job
    warnings.simplefilter("ignore", ConvergenceWarning)
    answers, truth, confusion = load(name, seed)
    mech = mechanism(mech_name, epsilon, answers.n_labels)
    perturbed = mech.perturb(answers, rng=seed)
    aware = aware_method(mech)
    rows: dict[str, pd.Series] = {}
    if confusion is not None:
        if isinstance(mech, TwoLayerRR):
            flips = mech.flips_for(answers, seed)
        else:
            flips = np.full(answers.n_workers, mech.f)
        mu = pd.DataFrame(
            oracle(perturbed, confusion, flips, np.array([0.88, 0.12])),
            index=answers.tasks,
            columns=answers.labels,
        )
        rows["omap"] = decide(mu, "map")
        rows["obal"] = decide(mu, "balanced", prior=np.array([0.88, 0.12]))
    rows["mv"] = make_estimator("mv").fit(perturbed).truths_
    rows["ds"] = make_estimator("ds").fit(perturbed).truths_
    fit = make_estimator(aware, mechanism=mech).fit(perturbed)
    rows["dflt"] = fit.truths_
    rows["map"] = decide(fit.probas_, "map")
    rows["bal"] = decide(fit.probas_, "balanced", prior=getattr(fit, "priors_", None))
    # aware-ds with its class prior fixed uniform (over more than two labels the default).
    uniform = make_estimator("aware-ds", mechanism=mech, class_prior="uniform")
    rows["unif"] = decide(uniform.fit(perturbed).probas_, "map")
    select = make_estimator("aware-select", mechanism=mech, seed=seed).fit(perturbed)
    rows["sel"] = select.truths_
    got = {key: scores(truths, truth) for key, truths in rows.items()}
    # Which candidate the selection chose, counted over seeds.
    got[f"chose:{select.selected_}"] = np.ones(2)
    return got


def setting(jobs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The mean over seeds of one setting's cells (a choice's count is summed instead)."""
    out: dict[str, np.ndarray] = {}
    for got in jobs:
        for key, value in got.items():
            out[key] = out.get(key, np.zeros(2)) + value
    return {k: v if k.startswith("chose:") else v / len(jobs) for k, v in out.items()}


#: The target: a default at least the better of majority vote and Dawid-Skene, in balanced
#: accuracy, within this margin.
MARGIN = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--data", nargs="*", default=NAMES)
    parser.add_argument("--mechanisms", nargs="*", default=["one-layer", "two-layer"])
    parser.add_argument("--epsilons", nargs="*", type=float, default=list(EPSILONS))
    parser.add_argument("--jobs", type=int, default=1, help="processes over the cells")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    keys = ["mv", "ds", "dflt", "sel", "map", "bal", "unif", "omap", "obal"]
    lines = [
        f"# balanced accuracy / accuracy, mean of {args.seeds} seeds; dflt = the aware default's "
        "truths_ as shipped; aware = "
        + ", ".join(f"{k} {aware_method(mechanism('one-layer', 1, k))}" for k in (2, 4))
        + "; sel = aware-select; target: balanced accuracy >= max(mv, ds) - "
        + f"{MARGIN} (dflt?, sel?, unif?); chose = aware-select's picks over the seeds "
        + "(pooled / aware-one-coin / aware-ds)",
        f"{'data':14s} {'mechanism':9s} {'eps':>4s} "
        + " ".join(f"{k:>13s}" for k in keys)
        + f" {'dflt?':>5s} {'sel?':>5s} {'unif?':>5s} {'chose':>8s}",
    ]
    print("\n".join(lines), flush=True)
    start = time.perf_counter()
    settings = [
        (name, mech_name, epsilon)
        for name in args.data
        for mech_name in args.mechanisms
        for epsilon in args.epsilons
    ]
    jobs = [(*s, seed) for s in settings for seed in range(args.seeds)]
    met = {"dflt": 0, "sel": 0, "unif": 0}
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(args.jobs))
            results = pool.imap(cell, jobs, chunksize=1)  # in order, as they finish
        else:
            results = map(cell, jobs)
        for name, mech_name, epsilon in settings:
            got = setting([next(results) for _ in range(args.seeds)])
            cells = [
                f"{got[k][0]:.3f}/{got[k][1]:.3f}" if k in got else f"{'-':>11s}" for k in keys
            ]
            target = max(got["mv"][0], got["ds"][0]) - MARGIN
            flags = []
            for k in met:
                ok = got[k][0] >= target
                met[k] += ok
                flags.append(f"{'yes' if ok else 'NO':>5s}")
            chose = "/".join(
                str(int(got.get(f"chose:{c}", np.zeros(2))[0]))
                for c in ("pooled", "aware-one-coin", "aware-ds")
            )
            line = (
                f"{name:14s} {mech_name:9s} {epsilon:4g} "
                + " ".join(f"{c:>13s}" for c in cells)
                + " "
                + " ".join(flags)
                + f" {chose:>8s}"
            )
            lines.append(line)
            print(line, flush=True)
    lines.append("# target met: " + ", ".join(f"{k} {v}/{len(settings)}" for k, v in met.items()))
    lines.append(f"# {time.perf_counter() - start:.0f} s with --jobs {args.jobs}")
    print("\n".join(lines[-2:]), flush=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
