"""GLAD's fit quality at each tool's defaults: the MAP objective EM climbs (log marginal
likelihood plus the log prior densities of alpha and log beta, per answer) at the fitted
parameters, privtd against crowd-kit 1.4.2.

GLAD's M-step is an inner optimiser (conjugate gradients), so the agreement test for it is
whether privtd's objective at its stopping point is at least crowd-kit's. crowd-kit's `betas_`
are log beta (it optimises exp(beta)), privtd's `betas_` are beta. Writes
benchmarks/results/glad_objective.txt.

    PYTHONPATH=src python benchmarks/bench_glad_objective.py [--datasets dog,sentiment]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_crowdkit_glad_mace import (  # noqa: E402
    CATEGORICAL,
    CkGLAD,
    accuracy,
    ck_frame,
    ck_labels,
    timed,
)

from privtd import datasets  # noqa: E402
from privtd.answers import Answers  # noqa: E402
from privtd.inference import GLAD  # noqa: E402
from privtd.inference._truth_step import task_incidence, truth_step  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "glad_objective.txt"


def glad_objective(answers: Answers, alpha: np.ndarray, log_beta: np.ndarray) -> float:
    """log P(answers | alpha, beta) + log N(alpha; 1, 1) + log N(log beta; 1, 1), per answer,
    uniform class prior; a wrong answer is uniform over the other K - 1 labels."""
    k, t, w, r = answers.n_labels, answers.task, answers.worker, answers.value
    z = alpha[w] * np.exp(log_beta[t])
    log_right = -np.logaddexp(0.0, -z)
    log_wrong = -np.logaddexp(0.0, z) - np.log(k - 1)
    log_lik = np.repeat(log_wrong[:, None], k, axis=1)
    log_lik[np.arange(r.size), r] = log_right
    _, loglik = truth_step(
        log_lik, task_incidence(t, answers.n_tasks), np.full(k, -np.log(k)), None
    )
    prior = -0.5 * (((alpha - 1) ** 2).sum() + ((log_beta - 1) ** 2).sum())
    prior -= 0.5 * np.log(2 * np.pi) * (alpha.size + log_beta.size)
    return float((loglik + prior) / answers.n_answers)


def row(name: str) -> str:
    data = datasets.load(name)
    answers = data.answers
    frame, worker_of, label_of = ck_frame(answers)
    ck, t_ck = timed(lambda: CkGLAD().fit(frame))
    # crowd-kit's workers are codes in first-appearance order (ck_frame), its tasks names.
    alpha = np.empty(answers.n_workers)
    alpha[worker_of[ck.alphas_.index.to_numpy().astype(int)]] = ck.alphas_.to_numpy()
    log_beta = ck.betas_.reindex(answers.tasks).to_numpy()
    ck_obj = glad_objective(answers, alpha, log_beta)
    ours, t_ours = timed(lambda: GLAD().fit(answers))
    ours_obj = glad_objective(
        answers, ours.weights_["weight"].to_numpy(), np.log(ours.betas_.to_numpy())
    )
    ck_acc = accuracy(ck_labels(ck.labels_, answers, label_of), data.truth)
    return (
        f"{name:14s} objective/answer privtd {ours_obj:.6f} (its own record "
        f"{ours.objective_[-1]:.6f}, {ours.n_iter_} it) crowd-kit {ck_obj:.6f} "
        f"({len(ck.loss_history_)} it), privtd - crowd-kit {ours_obj - ck_obj:+.2e}; accuracy "
        f"privtd {accuracy(ours.truths_, data.truth):.4f} crowd-kit {ck_acc:.4f}; "
        f"time {t_ours:.2f}s / {t_ck:.1f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(CATEGORICAL))
    args = parser.parse_args()
    lines = [f"# GLAD at each tool's defaults; load {os.getloadavg()[0]:.2f} at start"]
    for name in args.datasets.split(","):
        lines.append(row(name))
        print(lines[-1], flush=True)
    lines.append(f"# load {os.getloadavg()[0]:.2f} at end")
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
