"""Tasks with one real answer, read back past ``min_answers``: by Sybil workers, or by a
requester that lowers ``min_answers`` after it was checked.

``min_answers`` keeps a task out of every secure sum unless it has enough answers; a task with
one answer would have that worker's own terms as its sums. Two ways round it:

- ``sybil``: the requester adds two workers of its own that answer every task (label 0). A task
  with one real answer now has three and is kept; its start sum (the sum of the labels) is the
  real answer, since the requester knows its own workers' votes. Nothing in the protocol can
  tell a Sybil from a worker: this stays open (docs/secure.md, "Known limits").
- ``lowered``: the requester sets ``min_answers`` to 1 on its own object after construction
  (past the constructor's check). Each single-answer task is then kept and its start sum is the
  lone label. The workers now refuse a run under their own floor (default 3).

The requester records only what it is handed (``secure_common.RecordingRequester``); the true
answers serve only to score it.

    python benchmarks/attacks/attack_sybil.py
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_sybil.py   # before
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import RecordingRequester, binary_crowd, run_recorded  # noqa: E402

import privtd  # noqa: E402
from privtd.secure import InProcessTransport, SecureEM, Worker, split_by_worker  # noqa: E402


def with_sybils(answers: privtd.Answers, n_sybils: int) -> privtd.Answers:
    """``answers`` plus ``n_sybils`` workers of the requester's that answer every task 0."""
    frame = answers.to_frame()
    extra = pd.DataFrame(
        [
            {"task": t, "worker": f"sybil{s}", "answer": 0}
            for s in range(n_sybils)
            for t in answers.tasks
        ]
    )
    return privtd.Answers.from_frame(pd.concat([frame[["task", "worker", "answer"]], extra]))


def read_singles(
    releases: list[Any], answers: privtd.Answers, known_votes: int, n_known: int
) -> tuple[int, float]:
    """From the count and start sums: the tasks with exactly one answer besides the ``n_known``
    answers the requester knows (whose labels sum to ``known_votes`` per task), and that one
    answer's label, scored against the truth. Returns (tasks read, share right)."""
    count = next(r for r in releases if r.phase == "count").sums[:, 0]
    start = next((r for r in releases if r.phase == "start"), None)
    if start is None:
        return 0, float("nan")
    counts = np.rint(count[start.rows]).astype(int)
    single = counts == n_known + 1
    read = np.rint(start.sums[single, 0]).astype(int) - known_votes
    tasks = start.rows[single]
    truth = {}
    for w, (t, v) in split_by_worker(answers).items():
        if not str(answers.workers[w]).startswith("sybil"):
            for task, value in zip(np.asarray(t).tolist(), np.asarray(v).tolist(), strict=True):
                truth[task] = int(answers.labels[value]) if answers.labels is not None else value
    right = [truth.get(int(t), -1) == int(r) for t, r in zip(tasks, read, strict=True)]
    return int(single.sum()), float(np.mean(right)) if right else float("nan")


def sybil(answers: privtd.Answers, n_sybils: int = 2, **options: Any) -> dict[str, Any]:
    crowd = with_sybils(answers, n_sybils)
    run = run_recorded(crowd, **options)
    singles = int((np.bincount(answers.task, minlength=answers.n_tasks) == 1).sum())
    n, right = read_singles(run.releases, crowd, 0, n_sybils)
    return {"singles": singles, "read": n, "right": right, "error": run.error}


def lowered(answers: privtd.Answers) -> dict[str, Any]:
    held = split_by_worker(answers)
    workers = [Worker(w, t, v) for w, (t, v) in held.items()]
    requester = RecordingRequester(
        SecureEM().spec_for(answers), InProcessTransport(workers), "masking", max_iter=3
    )
    requester.min_answers = 1  # past the constructor's check
    error = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        try:
            requester.run()
        except privtd.errors.PrivtdError as exc:
            error = exc
    singles = int((np.bincount(answers.task, minlength=answers.n_tasks) == 1).sum())
    n, right = read_singles(requester.releases, answers, 0, 0) if requester.releases else (0, 0.0)
    return {"singles": singles, "read": n, "right": right, "error": error}


def scenario(seed: int = 0) -> privtd.Answers:
    """20 workers and 600 tasks, each answered by each worker with probability 0.1: many tasks
    have a single answer."""
    answers, _ = binary_crowd(20, 600, 0.1, np.random.default_rng(seed))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sybils", type=int, default=2)
    args = parser.parse_args()
    answers = scenario(args.seed)
    print(f"{answers.n_workers} workers, {answers.n_tasks} tasks, {answers.n_answers} answers")
    for name, out in (
        (f"{args.sybils} Sybil workers answering every task", sybil(answers, args.sybils)),
        ("min_answers set to 1 after construction", lowered(answers)),
    ):
        line = (
            f"{name}: {out['read']} of the {out['singles']} single-real-answer tasks read, "
            f"labels {out['right']:.3f} right"
        )
        if out["error"] is not None:
            line += f"; the run stopped: {out['error']}"
        print(line)


if __name__ == "__main__":
    main()
