"""Grouping attack on the secure EM: tasks with one answer name a worker.

On a sparse crowd, the secure sums of a task that exactly one worker answered are that worker's
own terms: ``log a_j`` and ``log(1 - b_j)`` if it said 1, ``log(1 - a_j)`` and ``log b_j`` if it
said 0. A semi-honest requester learns each task's answer count (the start sums hold it), takes
the tasks answered once, turns each one's sums into the pair ``(a, b)`` round by round (for a
worker better than chance on positives, ``(e^s1, e^s2)`` or its complement, whichever has the
first term above one half), and groups the
tasks whose trajectories over all rounds coincide: each group is one worker, whose sensitivity
and specificity it reads, with the label of every task in the group.

More generally, any task whose released sums come from a single worker is such a group: the
score counts the groups whose tasks each have exactly one answering worker.

    python benchmarks/attacks/secure_grouping.py               # default min_answers
    python benchmarks/attacks/secure_grouping.py --min-answers 2
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import Run, binary_crowd, run_recorded  # noqa: E402

from privtd.secure import split_by_worker  # noqa: E402


@dataclass
class GroupingResult:
    """What the grouping attack found."""

    n_single: int  # tasks the requester knows had exactly one answer
    n_single_in_sums: int  # of those, tasks whose sums it was given
    n_groups: int  # groups of tasks with one trajectory
    groups_of_one: int  # groups whose tasks each have one answering worker
    workers_exposed: int  # distinct workers named by a group of one
    max_parameter_error: float | None  # |(a, b) read - the worker's own| over exposed workers
    labels_recovered: float | None  # share of the single-answer tasks' labels read right
    min_answers_in_sums: int  # fewest answers behind any released sum (the true counts)

    def line(self) -> str:
        err = "-" if self.max_parameter_error is None else f"{self.max_parameter_error:.2e}"
        lab = "-" if self.labels_recovered is None else f"{self.labels_recovered:.3f}"
        return (
            f"{self.n_single} tasks with one answer, {self.n_single_in_sums} of them in the sums; "
            f"{self.n_groups} groups, {self.groups_of_one} of one worker "
            f"({self.workers_exposed} workers exposed); parameters read to {err}; labels "
            f"recovered {lab}; fewest answers behind a released sum: {self.min_answers_in_sums}"
        )


def counts_seen(run: Run, n_tasks: int) -> np.ndarray:
    """The answer count per task, as the requester sees it (count round, or start sums)."""
    for release in run.releases:
        if release.phase == "count":
            return np.rint(release.sums[:, 0]).astype(int)
    start = next(r for r in run.releases if r.phase == "start")
    counts = np.zeros(n_tasks, dtype=int)
    counts[start.rows] = np.rint(start.sums[:, 1]).astype(int)
    return counts


def attack(answers: Any, *, max_iter: int = 50, **options: Any) -> GroupingResult:
    """Run the protocol as a recording requester, then group the single-answer tasks."""
    run = run_recorded(answers, max_iter=max_iter, **options)
    if run.error is not None:
        raise run.error
    n_tasks = answers.n_tasks
    true_counts = np.bincount(answers.task, minlength=n_tasks)
    seen = counts_seen(run, n_tasks)
    single = np.flatnonzero(seen == 1)
    em = [r for r in run.releases if r.phase == "em"]
    released_rows = em[0].rows if em else np.zeros(0, dtype=int)
    min_in_sums = int(true_counts[released_rows].min()) if released_rows.size else 0
    targets = np.intersect1d(single, released_rows)
    if targets.size == 0 or not em:
        return GroupingResult(single.size, 0, 0, 0, 0, None, None, min_in_sums)
    # Each target's trajectory of (a, b) over the rounds, read as one worker's terms.
    traj = []
    for release in em:
        pos = np.searchsorted(release.rows, targets)
        s = np.exp(release.sums[pos])
        # Label 1 gives (a, 1 - b), label 0 gives (1 - a, b): flip the pair to the one whose
        # first term is above one half, the same for both labels of one worker (a > 1/2).
        flip = s[:, :1] < 0.5
        traj.append(np.where(flip, 1.0 - s, s))
    key = np.round(np.concatenate(traj, axis=1), 6)
    _, group = np.unique(key, axis=0, return_inverse=True)
    group = group.ravel()
    # Score against the truth: who answered each target task, and with what label.
    who = np.full(n_tasks, -1)
    label = np.full(n_tasks, -1)
    held = split_by_worker(answers)
    for w, (tasks, values) in held.items():
        one = true_counts[tasks] == 1
        who[tasks[one]] = w
        label[tasks[one]] = np.asarray(values)[one]
    workers_by_group = [np.unique(who[targets[group == g]]) for g in range(group.max() + 1)]
    pure = [g for g, ws in enumerate(workers_by_group) if ws.size == 1 and ws[0] >= 0]
    exposed = {int(workers_by_group[g][0]) for g in pure}
    by_id = {w.worker_id: w for w in run.workers}
    errors = []
    for g in pure:
        model = by_id[int(workers_by_group[g][0])].model
        a, one_minus_b = key[group == g][0][-2:]
        errors.append(
            max(abs(a - model.sensitivity), abs(1.0 - one_minus_b - model.specificity))  # type: ignore[union-attr]
        )
    # The label: 1 when the first sum is log a (the larger of log a and log(1 - a)).
    last = em[-1]
    s = np.exp(last.sums[np.searchsorted(last.rows, targets), 0])
    read = (s > 0.5).astype(int)
    return GroupingResult(
        single.size,
        targets.size,
        int(group.max() + 1),
        len(pure),
        len(exposed),
        float(max(errors)) if errors else None,
        float(np.mean(read == label[targets])),
        min_in_sums,
    )


def residual(answers: Any, *, max_iter: int = 50, **options: Any) -> dict[str, Any]:
    """What is left with ``min_answers``: group the tasks whose sums come from the fewest
    workers allowed (exactly ``min_answers``) by their trajectories over the rounds.

    A group whose tasks all have the same answering workers with the same labels tells the
    requester that those tasks share their workers and their answers (not who they are); with
    the label combinations of one set of workers linked, their terms could be solved for, as
    the single-answer groups were. Returns the counts that measure how often that can happen.
    """
    run = run_recorded(answers, max_iter=max_iter, **options)
    if run.error is not None:
        raise run.error
    n_tasks = answers.n_tasks
    counts = counts_seen(run, n_tasks)
    em = [r for r in run.releases if r.phase == "em"]
    k = int(options.get("min_answers", 3))
    targets = np.intersect1d(np.flatnonzero(counts == k), em[0].rows)
    if targets.size == 0:
        return {"tasks": 0, "groups": 0, "pure_groups_of_2_or_more": 0, "tasks_in_those": 0}
    key = np.round(
        np.concatenate([r.sums[np.searchsorted(r.rows, targets)] for r in em], axis=1), 6
    )
    _, group = np.unique(key, axis=0, return_inverse=True)
    group = group.ravel()
    # The truth: each task's sorted (worker, label) pairs.
    held = split_by_worker(answers)
    who: dict[int, list[tuple[int, int]]] = {}
    for w, (tasks, values) in held.items():
        for t, v in zip(tasks.tolist(), np.asarray(values).tolist(), strict=True):
            who.setdefault(t, []).append((w, int(v)))
    signature = [tuple(sorted(who[t])) for t in targets.tolist()]
    pure, covered = 0, 0
    for g in range(int(group.max()) + 1):
        members = np.flatnonzero(group == g)
        if members.size >= 2 and len({signature[m] for m in members}) == 1:
            pure += 1
            covered += members.size
    sets = {tuple(w for w, _ in sig) for sig in signature}
    return {
        "tasks": int(targets.size),
        "worker_sets": len(sets),
        "groups": int(group.max()) + 1,
        "pure_groups_of_2_or_more": pure,
        "tasks_in_those": covered,
    }


def scenario(seed: int = 0) -> Any:
    """A sparse crowd: 20 workers, 600 tasks, each answered by each worker with probability
    0.1 (about 2 answers per task, a quarter of the tasks answered once)."""
    answers, _ = binary_crowd(20, 600, 0.1, np.random.default_rng(seed))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-answers", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    answers = scenario(args.seed)
    options = {} if args.min_answers is None else {"min_answers": args.min_answers}
    print(f"{answers.n_workers} workers, {answers.n_tasks} tasks, {answers.n_answers} answers")
    print(attack(answers, **options).line())
    left = residual(answers, **options)
    k = options.get("min_answers", 3)
    print(
        f"left with min_answers={k}: {left['tasks']} tasks have exactly {k} answers "
        f"({left.get('worker_sets', 0)} distinct sets of workers); their sums fall into "
        f"{left['groups']} trajectories, {left['pure_groups_of_2_or_more']} of them shared by "
        f"2 or more tasks with the same workers and labels ({left['tasks_in_those']} tasks)"
    )


if __name__ == "__main__":
    main()
