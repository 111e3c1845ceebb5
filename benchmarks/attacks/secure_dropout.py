"""Drop-out attack on the secure EM: difference two sums over two sets.

A semi-honest requester keeps the secure sums of EM round ``r - 1`` (every worker) and of round
``r``, retried without a worker that dropped out (mode ``retry``), or the last sums of a run
and of a re-run without that worker (mode ``rerun``). The posteriors barely move from one to
the other, so the difference of the two sums is the missing worker's contribution: ``log a_i``
and ``log b_i`` per task, zero where it gave no answer. The attacker reads which tasks it
answered (a large difference) and each label (``x = 1`` gives ``log a > log(1 - b)``, i.e. the
first difference above the second, for a worker better than chance).

Modes ``fresh`` and ``substitute`` are a dishonest requester that keeps no record of its own:
it runs once with every worker, then starts a fresh run (a new campaign) without the victim
(``fresh``) or with a worker of its own, which answered one task, under the victim's code and name
(``substitute``), and differences the two runs' last sums. Only the other workers can stop it,
with their own record of the runs they took part in (``privtd.secure.WorkerHistory``).

    python benchmarks/attacks/secure_dropout.py                      # today's default
    python benchmarks/attacks/secure_dropout.py --allow-leaky-rerun  # the opt-in, as documented
    python benchmarks/attacks/secure_dropout.py --backend paillier
    python benchmarks/attacks/secure_dropout.py --modes fresh substitute   # the fresh-run attack

Figures: for each drop round (3, 10, the last), the share of tasks whose answered/not answered
status the attacker gets right (among the tasks it could difference) and the share of the
dropped worker's labels it recovers (out of all its labels: 0 when it holds no difference).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import Release, binary_crowd, run_recorded  # noqa: E402

from privtd.secure import split_by_worker  # noqa: E402


@dataclass
class DropoutResult:
    """What the attacker recovered about the missing worker."""

    mode: str
    drop_at: int
    error: str | None
    reduced_released: bool
    n_labels: int
    answered_accuracy: float | None
    labels_recovered: float

    def line(self) -> str:
        where = "end" if self.mode != "retry" else str(self.drop_at)
        answered = "-" if self.answered_accuracy is None else f"{self.answered_accuracy:.3f}"
        stopped = f"; run stopped: {self.error[:90]}..." if self.error else ""
        return (
            f"{self.mode:10s} at {where:>4s}: reduced-set sum released: "
            f"{'yes' if self.reduced_released else 'no '}; which tasks answered {answered}; "
            f"labels recovered {self.labels_recovered:.3f} of {self.n_labels}{stopped}"
        )


def difference(
    before: Release, after: Release, n_tasks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tasks both sums cover, difference of the first sum, of the second) between releases."""
    common, i, j = np.intersect1d(before.rows, after.rows, return_indices=True)
    d = before.sums[i] - after.sums[j]
    return common, d[:, 0], d[:, 1]


def read_contribution(
    tasks: np.ndarray, d_a: np.ndarray, d_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Tasks the missing worker answered and its labels there, from its contribution."""
    size = np.abs(d_a) + np.abs(d_b)
    # Two clusters, the drift of the others' parameters and the missing worker's terms: Otsu's
    # split of the magnitudes, which needs no knowledge of the worker's quality.
    order = np.sort(size)
    best, cut = np.inf, order[-1] + 1.0
    for k in range(1, len(order)):
        lo, hi = order[:k], order[k:]
        score = lo.var() * len(lo) + hi.var() * len(hi)
        if score < best:
            best, cut = score, (order[k - 1] + order[k]) / 2
    answered = size > cut
    return tasks[answered], (d_a > d_b)[answered].astype(int)


def attack(
    answers: Any,
    victim: int,
    *,
    mode: str = "retry",
    drop_at: int = 3,
    max_iter: int = 100,
    backend: str = "masking",
    **options: Any,
) -> DropoutResult:
    """Run the protocol as a recording requester and difference its sums over two sets.

    ``drop_at = -1`` drops the worker at the round after the last one a full run takes.
    """
    held = split_by_worker(answers)
    true_tasks, true_labels = held[victim]
    n_tasks = answers.n_tasks
    error: str | None = None
    if drop_at < 0:
        full = run_recorded(answers, max_iter=max_iter, backend=backend, **options)
        drop_at = sum(r.phase == "em" for r in full.releases)
    if mode == "retry":
        run = run_recorded(
            answers, drop=victim, drop_at=drop_at, max_iter=max_iter, backend=backend, **options
        )
        error = None if run.error is None else str(run.error)
        em = [r for r in run.releases if r.phase == "em"]
        pairs = [
            (a, b)
            for a, b in zip(em, em[1:], strict=False)
            if set(b.participants) < set(a.participants)
        ]
    elif mode in ("fresh", "substitute"):
        # A dishonest requester: a fresh run (no campaign record of its own) without the victim,
        # or with a worker of its own in the victim's place. The other workers' devices are the
        # same in both runs, and keep whatever record of earlier runs they keep.
        histories = device_histories(held)
        first = run_recorded(
            answers, max_iter=max_iter, backend=backend, histories=histories, **options
        )
        second = run_recorded(
            answers,
            leave_out=victim if mode == "fresh" else None,
            substitute=victim if mode == "substitute" else None,
            max_iter=max_iter,
            backend=backend,
            histories=histories,
            **options,
        )
        error = None if second.error is None else str(second.error)
        last_first = [r for r in first.releases if r.phase == "em"][-1:]
        last_second = [r for r in second.releases if r.phase == "em"][-1:]
        pairs = list(zip(last_first, last_second, strict=False))
    else:
        try:
            from privtd.secure import Campaign

            record: Any = Campaign()
        except ImportError:  # before the fix no campaign was recorded: every re-run went on
            record = None
        first = run_recorded(
            answers, max_iter=max_iter, backend=backend, campaign=record, **options
        )
        second = run_recorded(
            answers,
            leave_out=victim,
            max_iter=max_iter,
            backend=backend,
            campaign=record,
            **options,
        )
        error = None if second.error is None else str(second.error)
        last_first = [r for r in first.releases if r.phase == "em"][-1:]
        last_second = [r for r in second.releases if r.phase == "em"][-1:]
        pairs = list(zip(last_first, last_second, strict=False))
    if not pairs:
        return DropoutResult(mode, drop_at, error, False, len(true_tasks), None, 0.0)
    tasks, d_a, d_b = difference(*pairs[0], n_tasks)
    found, labels = read_contribution(tasks, d_a, d_b)
    truly = np.isin(tasks, true_tasks)
    answered_accuracy = float(np.mean(np.isin(tasks, found) == truly))
    truth_at = dict(zip(true_tasks.tolist(), np.asarray(true_labels).tolist(), strict=True))
    pairs_read = zip(found.tolist(), labels.tolist(), strict=True)
    correct = sum(truth_at.get(t) == lab for t, lab in pairs_read)
    return DropoutResult(
        mode, drop_at, error, True, len(true_tasks), answered_accuracy, correct / len(true_tasks)
    )


def device_histories(held: dict[int, Any]) -> dict[int, Any]:
    """Each worker's own record of its runs, as its device keeps it (empty before the first run).
    Before the worker-side record existed there is nothing to keep: an empty dict."""
    try:
        from privtd.secure import WorkerHistory
    except ImportError:
        return {}
    return {w: WorkerHistory() for w in held}


def scenario(seed: int = 0) -> tuple[Any, int]:
    """The reported crowd: 12 workers, 300 tasks, each answered by about half the workers."""
    answers, _ = binary_crowd(12, 300, 0.5, np.random.default_rng(seed))
    return answers, 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["masking", "paillier"], default="masking")
    parser.add_argument("--allow-leaky-rerun", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["retry", "rerun", "fresh", "substitute"],
        default=["retry", "rerun", "fresh", "substitute"],
    )
    args = parser.parse_args()
    answers, victim = scenario(args.seed)
    options: dict[str, Any] = {}
    if args.allow_leaky_rerun:
        options["allow_leaky_rerun"] = True
    if args.backend == "paillier":
        options["key_bits"] = args.key_bits
        options["test_only_short_keys"] = args.key_bits < 2048
    print(
        f"{answers.n_workers} workers, {answers.n_tasks} tasks, backend {args.backend}; "
        f"worker {answers.workers[victim]} drops out ({split_by_worker(answers)[victim][0].size} "
        "labels)"
    )
    max_iter = 30 if args.backend == "paillier" else 100
    for drop_at in (3, 10, -1) if "retry" in args.modes else ():
        result = attack(
            answers, victim, drop_at=drop_at, backend=args.backend, max_iter=max_iter, **options
        )
        print(result.line())
    for mode in [m for m in args.modes if m != "retry"]:
        result = attack(
            answers, victim, mode=mode, backend=args.backend, max_iter=max_iter, **options
        )
        print(result.line())


if __name__ == "__main__":
    main()
