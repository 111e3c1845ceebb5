"""Task-differencing attack on the secure EM: two tasks whose answers differ by one worker.

``min_answers`` keeps every released sum a sum over at least ``k`` workers' terms. But a
semi-honest requester can subtract two released sums. If task ``i'`` was answered by the same
workers as task ``i``, with the same labels, plus one more worker ``D``, then in every EM round
``S(i') - S(i)`` is exactly ``D``'s own terms on ``i'``: ``(log a_D, log(1 - b_D))`` if ``D``
said 1, ``(log(1 - a_D), log b_D)`` if it said 0 (binary model). The requester knows every
task's answer count (count round), so it only differences tasks with ``c`` and ``c + 1``
answers, whatever ``c >= k`` is.

It cannot see the answering sets, but a single worker's terms certify themselves: the
difference of pair 1 (worker ``D`` said 1) and that of pair 2 (``D`` said 0) satisfy
``e^X + e^Y = 1`` in both components and in every round, which the differences of unrelated
sums never do; two pairs isolating the same (worker, label) give identical trajectories. The
requester keeps the differences that pass either certificate (all terms <= 0, and a complement
or an exact repeat), reads the worker's sensitivity and specificity from them round by round,
and the label it gave on the task of the pair.

Figures (``python benchmarks/attacks/attack_task_difference.py``): certified differences, how
many are truly one worker's terms, how many distinct workers are exposed (parameters and
labels), the largest parameter error, the share of labels read right.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import binary_crowd, run_recorded  # noqa: E402
from secure_grouping import counts_seen  # noqa: E402

from privtd.secure import split_by_worker  # noqa: E402

#: Two trajectories are "the same" to this many decimals (fixed point is exact to ~1e-11).
_DECIMALS = 7


@dataclass
class DifferenceResult:
    pairs_tried: int  # (c, c + 1)-answer task pairs differenced
    certified: int  # differences the requester certifies as one worker's terms
    truly_single: int  # of those, the ones that are one worker's terms (scored on the truth)
    workers_exposed: int  # distinct workers whose parameters and some labels were read
    max_parameter_error: float | None
    labels_right: float | None  # share of certified pairs whose label was read right
    min_answers_in_sums: int

    def line(self) -> str:
        err = "-" if self.max_parameter_error is None else f"{self.max_parameter_error:.1e}"
        lab = "-" if self.labels_right is None else f"{self.labels_right:.3f}"
        return (
            f"{self.pairs_tried} task pairs differenced; {self.certified} certified as one "
            f"worker's terms ({self.truly_single} truly so); {self.workers_exposed} workers "
            f"exposed, parameters read to {err}, labels read right {lab}; fewest answers behind "
            f"a released sum: {self.min_answers_in_sums}"
        )


def attack(answers: Any, *, max_iter: int = 30, **options: Any) -> DifferenceResult:
    run = run_recorded(answers, max_iter=max_iter, **options)
    if run.error is not None:
        raise run.error
    n_tasks = answers.n_tasks
    counts = counts_seen(run, n_tasks)  # the count round (or, before it existed, the start sums)
    em = [r for r in run.releases if r.phase == "em"]
    rows = em[0].rows
    # The trajectory of each kept task: every EM round's two sums, side by side.
    traj = np.concatenate([r.sums for r in em], axis=1)  # (kept, 2 * rounds)
    c = counts[rows]
    firsts, seconds = [], []
    for size in np.unique(c):
        lo, hi = np.flatnonzero(c == size), np.flatnonzero(c == size + 1)
        if lo.size and hi.size:
            a, b = np.meshgrid(lo, hi, indexing="ij")
            firsts.append(a.ravel())
            seconds.append(b.ravel())
    if not firsts:
        return DifferenceResult(0, 0, 0, 0, None, None, int(c.min()))
    small, big = np.concatenate(firsts), np.concatenate(seconds)
    diff = traj[big] - traj[small]
    # One worker's terms are logs of probabilities: every one <= 0 (up to fixed point).
    ok = (diff <= 1e-9).all(axis=1)
    small, big, diff = small[ok], big[ok], diff[ok]
    e = np.exp(diff)
    key = np.round(e, _DECIMALS)
    comp = np.round(1.0 - e, _DECIMALS)
    seen: dict[bytes, int] = {}
    for row in key:
        seen[row.tobytes()] = seen.get(row.tobytes(), 0) + 1
    repeat = np.array([seen[row.tobytes()] >= 2 for row in key], dtype=bool)
    has_comp = np.array([row.tobytes() in seen for row in comp], dtype=bool)
    # Only the complement is a certificate: an exact repeat also arises from two pairs whose
    # sets differ by the same several workers.
    del repeat
    # Second pass: a trajectory certified once (or its complement, the other label of the same
    # worker) certifies every other difference equal to it.
    known = {row.tobytes() for row, c in zip(key, has_comp, strict=True) if c}
    known |= {row.tobytes() for row, c in zip(comp, has_comp, strict=True) if c}
    cert = np.array([row.tobytes() in known for row in key], dtype=bool)
    small, big, e = small[cert], big[cert], e[cert]
    # Score on the truth: the (worker, label) multisets of both tasks.
    held = split_by_worker(answers)
    who: dict[int, set[tuple[int, int]]] = {}
    for w, (tasks, values) in held.items():
        for t, v in zip(tasks.tolist(), np.asarray(values).tolist(), strict=True):
            who.setdefault(t, set()).add((w, int(v)))
    by_id = {w.worker_id: w.model for w in run.workers}
    truly, exposed, errors, right = 0, set(), [], []
    for s, b, ee in zip(rows[small].tolist(), rows[big].tolist(), e, strict=True):
        extra = who[b] - who[s]
        # The label as the requester reads it: label 1 gives (a, 1 - b) with a > 1/2.
        read = int(ee[-2] > 0.5)
        if who[s] <= who[b] and len(extra) == 1:
            truly += 1
            ((worker, label),) = extra
            exposed.add(worker)
            right.append(read == label)
            a, one_minus_b = (ee[-2], ee[-1]) if read == 1 else (1 - ee[-2], 1 - ee[-1])
            model = by_id[worker]
            errors.append(
                max(abs(a - model.sensitivity), abs(1 - one_minus_b - model.specificity))  # type: ignore[union-attr]
            )
        else:
            right.append(False)
    true_counts = np.bincount(answers.task, minlength=n_tasks)
    return DifferenceResult(
        int(ok.size),
        int(cert.sum()),
        truly,
        len(exposed),
        float(max(errors)) if errors else None,
        float(np.mean(right)) if right else None,
        int(true_counts[rows].min()),
    )


def scenario(seed: int = 0) -> Any:
    """A crowd of 20 workers and 2,000 tasks, each worker answering each task with probability
    0.2 (about 4 answers per task)."""
    answers, _ = binary_crowd(20, 2000, 0.2, np.random.default_rng(seed))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-answers", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--p-answer", type=float, default=0.2)
    args = parser.parse_args()
    answers, _ = binary_crowd(
        args.workers, args.tasks, args.p_answer, np.random.default_rng(args.seed)
    )
    options = {} if args.min_answers is None else {"min_answers": args.min_answers}
    print(f"{answers.n_workers} workers, {answers.n_tasks} tasks, {answers.n_answers} answers")
    print(attack(answers, **options).line())


if __name__ == "__main__":
    main()
