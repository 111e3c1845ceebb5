"""Resuming a fit after new answers arrive (``fit(..., warm_start=previous)``) against fitting
the grown answers from scratch, in the same run.

    python benchmarks/bench_warm_start.py [--new 0.05] [--seed 0]

Per setting: a fit on 95% of the answers (the previous run), then the full answers fitted from
scratch and resumed from that fit; best of three times each, the iterations, and how far the
two results are apart (share of tasks with the same label, or the mean absolute difference of
the numeric truths against their MAE to the true values).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import privtd
from privtd.answers import Answers
from privtd.inference import make_estimator
from privtd.mechanisms import ExpGaussian, OneLayerRR


def subset(answers: Answers, keep: np.ndarray) -> Answers:
    """The same tasks, workers and labels, with only the answers in ``keep``."""
    return Answers(
        answers.task[keep],
        answers.worker[keep],
        answers.value[keep],
        answers.tasks,
        answers.workers,
        labels=answers.labels,
    )


def best_of_three(method: str, params: dict, answers: Answers, warm: object = None):
    times, est = [], None
    for _ in range(3):
        est = make_estimator(method, **params)
        start = time.perf_counter()
        est.fit(answers, warm_start=warm)
        times.append(time.perf_counter() - start)
    return min(times), est


def settings(seed: int):
    answers, truth, _ = privtd.datasets.make_categorical(
        100_000, 2_000, 2, answers_per_task=10, accuracy=(0.6, 0.95), rng=seed
    )
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    released = mech.perturb(answers, rng=seed + 1)
    for method, params in (
        ("aware-ds", {"mechanism": mech}),
        ("aware-one-coin", {"mechanism": mech}),
        ("ds", {}),
    ):
        yield method, params, released, truth
    answers, truth, _ = privtd.datasets.make_numeric(
        20_000, 2_000, answers_per_task=50, error_rate=1.0, rng=seed
    )
    low, high = float(answers.value.min()), float(answers.value.max())
    mech = ExpGaussian(1.0 / 2.0, low, high)
    released = mech.perturb(answers, rng=seed + 1)
    for method, params in (("aware-gaussian", {"mechanism": mech}), ("crh", {})):
        yield method, params, released, truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--new", type=float, default=0.05, help="share of answers arriving late")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.simplefilter("ignore", privtd.ConvergenceWarning)
    print("method          answers | scratch s  iters | resumed s  iters | ratio | agreement")
    for method, params, answers, truth in settings(args.seed):
        late = np.random.default_rng(args.seed + 2).random(answers.n_answers) < args.new
        previous = make_estimator(method, **params).fit(subset(answers, ~late))
        t_cold, cold = best_of_three(method, params, answers)
        t_warm, warm = best_of_three(method, params, answers, previous)
        if answers.labels is not None:
            agreement = f"same label {np.mean(cold.truths_ == warm.truths_):.2%}"
        else:
            gold = truth.reindex(answers.tasks).to_numpy()
            apart = np.abs(cold.truths_.to_numpy() - warm.truths_.to_numpy()).mean()
            mae = np.abs(cold.truths_.to_numpy() - gold).mean()
            agreement = f"apart {apart:.4f} (MAE to truth {mae:.4f})"
        print(
            f"{method:15s} {answers.n_answers:8,d} | {t_cold:9.3f} {cold.n_iter_:6d} | "
            f"{t_warm:9.3f} {warm.n_iter_:6d} | {t_warm / t_cold:5.2f} | {agreement}",
            flush=True,
        )


if __name__ == "__main__":
    main()
