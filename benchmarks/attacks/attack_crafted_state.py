"""Crafted-state attack on the secure EM: a malicious requester sends every worker the same
crafted posteriors.

Binding each round's masks to the request stops a requester that sends different workers
different posteriors (``attack_split_state.py``); it does not stop one that sends *all* of them
the same crafted state. After the honest start round the requester knows each kept task's
vote count ``n1[i]``. It picks a task ``i0`` with exactly one 1-vote and broadcasts the state
``1`` at ``i0`` and ``0`` elsewhere. The lone voter ``v``'s M-step gives it sensitivity
``1 - eta`` (clipped), every other worker's gives ``eta``, so every term of a task's first sum
is ``log eta`` or about 0, and ``round(log_a[i] / log eta) - n1[i]`` is ``0`` where ``v`` gave
no answer, ``-1`` where it answered 1 and ``+1`` where it answered 0: ``v``'s whole answer
vector, from one round. The next crafted round takes a task that ``v`` did not answer, so
another worker is read; then the run goes on honestly and ends normally.

Where the workers compute the posteriors themselves from sums they verify (masking), the
requester can no longer hand them a state: it can only send the crafted state anyway
(``--mode state``, refused) or forge the sums they verify, by altering one worker's forwarded
contribution so that the sums give the crafted state (``--mode forge``, refused: the
contribution no longer carries its sender's tag). Paillier workers cannot verify their
sums; with Paillier the attack still works (docs/secure.md, "Known limits").

    python benchmarks/attacks/attack_crafted_state.py
    python benchmarks/attacks/attack_crafted_state.py --min-answers 5 --tasks 3000 --p-answer 0.3
    python benchmarks/attacks/attack_crafted_state.py --backend paillier --workers 8 --tasks 200
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_crafted_state.py   # before
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import binary_crowd, supported, worker_supported  # noqa: E402

import privtd  # noqa: E402
from privtd.secure import (  # noqa: E402
    InProcessTransport,
    Requester,
    SecureEM,
    Worker,
    fixed_point,
    messages,
    split_by_worker,
)

SHORT = {"key_bits": 512, "test_only_short_keys": True}  # the attack does not use the key size


@dataclass
class Read:
    """One crafted round: the task it pivoted on and the answer vector it read (by kept-task
    position: -1 not answered, else the label)."""

    pivot: int
    vector: np.ndarray


@dataclass
class Outcome:
    reads: list[Read] = field(default_factory=list)
    refused: str | None = None
    finished: bool = False


class CraftedStateRequester(Requester):
    """Runs the count and start rounds honestly, then ``n_crafted`` crafted rounds before the
    first EM round, then the rest of the run honestly."""

    def __init__(self, *args: Any, n_crafted: int, mode: str = "state", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.n_crafted, self.mode = n_crafted, mode
        self.outcome = Outcome()
        self.votes: np.ndarray | None = None

    def _secure_sums(self, round_: int, phase: str, state: np.ndarray | None) -> np.ndarray:
        if phase == "em" and round_ == 1 and self.votes is not None:
            self._craft()
        sums = super()._secure_sums(round_, phase, state)
        if phase == "start":
            self.votes = sums.copy()  # per kept task: the sum of the labels, the count
        return sums

    def _craft(self) -> None:
        assert self.votes is not None
        n1 = np.rint(self.votes[:, 0]).astype(np.int64)
        candidates = list(np.flatnonzero(n1 == 1))
        explained = np.zeros(len(n1), dtype=bool)  # tasks whose lone 1-voter has been read
        log_eta = np.log(self.spec.eta)
        for k in range(self.n_crafted):
            fresh = [i for i in candidates if not explained[i]]
            if not fresh:
                break
            pivot = int(fresh[0])
            crafted = np.zeros(len(n1))
            crafted[pivot] = 1.0
            try:
                # Forged sums must pass for the real next round; a crafted state goes in a
                # round of its own (fresh masks).
                sums = self._crafted_round(1 + k if self.mode == "forge" else 10_000 + k, crafted)
            except privtd.errors.ProtocolError as exc:
                self.outcome.refused = str(exc)
                raise
            delta = np.rint(sums[:, 0] / log_eta).astype(np.int64) - n1
            vector = np.where(delta == 0, -1, np.where(delta < 0, 1, 0))
            self.outcome.reads.append(Read(pivot, vector))
            # Every 1-vote of the worker just read is explained: pivot elsewhere next time.
            explained |= vector == 1

    def _crafted_round(self, round_: int, crafted: np.ndarray) -> np.ndarray:
        """One round in which every worker computes on ``crafted``; its first sums."""
        n_values = self.kept_spec.n_tasks * self.kept_spec.n_sums
        message: messages.Message = {
            "type": "round",
            "round": round_,
            "attempt": 0,
            "phase": "em",
            "participants": self.active,
        }
        if self.mode == "forge":
            message.update(self._forged_forward(crafted))
        else:
            message["state"] = crafted
        frame = messages.encode(message)
        replies = {
            w: self._reply(w, f, "contribution")
            for w, f in self.transport.call({w: frame for w in self.active}).items()
            if f is not None
        }
        codes = self.aggregator.combine(replies, n_values, self._decrypt)
        return fixed_point.decode(codes, self.fraction_bits).reshape(-1, self.kept_spec.n_sums)

    def _forged_forward(self, crafted: np.ndarray) -> messages.Message:
        """The last round's contributions as forwarded to the workers, the last worker's
        altered so that the sums they verify give ``crafted`` as the next posteriors."""
        forward = getattr(self.aggregator, "forward", None)
        if forward is None:
            raise privtd.errors.ProtocolError("this version forwards no contributions to forge")
        fields = dict(forward())
        masked = np.array(fields["forward_masked"])
        # The sums the workers verify are the start round's, (sum of labels, count) per task,
        # and the next state is their ratio: forge the label sums to the count at the pivot
        # and to 0 elsewhere.
        true = fixed_point.decode(masked.sum(axis=0, dtype=np.uint64), self.fraction_bits)
        counts = true[1::2]
        target = np.column_stack([crafted * counts, counts]).ravel()
        delta = fixed_point.encode(target - true, self.fraction_bits, 1e12)
        masked[-1] = masked[-1] + delta
        fields["forward_masked"] = masked
        return fields


def attack(
    answers: Any,
    *,
    n_crafted: int | None = None,
    mode: str = "state",
    backend: str = "masking",
    **options: Any,
) -> dict[str, Any]:
    """Run the attack; score what it read against the workers' true answers."""
    held = split_by_worker(answers)
    worker_options = worker_supported(options)
    workers = [Worker(w, t, v, **worker_options) for w, (t, v) in held.items()]
    spec = SecureEM().spec_for(answers)
    requester = CraftedStateRequester(
        spec,
        InProcessTransport(workers),
        backend,
        max_iter=200,
        n_crafted=len(held) if n_crafted is None else n_crafted,
        mode=mode,
        **supported(options),
    )
    outcome = requester.outcome
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        try:
            requester.run()
            outcome.finished = True
        except privtd.errors.PrivtdError as exc:
            outcome.refused = outcome.refused or str(exc)
    kept = np.asarray(requester.kept_tasks)
    truth = {}
    for w, (t, v) in held.items():
        vector = np.full(len(kept), -1)
        position = np.searchsorted(kept, t)
        inside = (position < len(kept)) & (kept[np.minimum(position, len(kept) - 1)] == t)
        vector[position[inside]] = np.asarray(v)[inside]
        truth[w] = vector
    workers_read: set[int] = set()
    labels = right = 0
    for read in outcome.reads:
        answered = read.vector >= 0
        # The worker read is the one whose answered tasks these are (ties: the best match).
        owner = max(truth, key=lambda w: int(((truth[w] >= 0) == answered).sum()))
        workers_read.add(owner)
        mine = truth[owner] >= 0
        labels += int(mine.sum())
        right += int((read.vector[mine] == truth[owner][mine]).sum())
    return {
        "workers": len(held),
        "crafted_rounds": len(outcome.reads),
        "workers_read": len(workers_read),
        "labels": labels,
        "labels_right": right / labels if labels else float("nan"),
        "refused": outcome.refused,
        "finished": outcome.finished,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--p-answer", type=float, default=0.2)
    parser.add_argument("--min-answers", type=int, default=None)
    parser.add_argument("--backend", choices=["masking", "paillier"], default="masking")
    parser.add_argument("--mode", choices=["state", "forge", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    answers, _ = binary_crowd(
        args.workers, args.tasks, args.p_answer, np.random.default_rng(args.seed)
    )
    options: dict[str, Any] = {} if args.min_answers is None else {"min_answers": args.min_answers}
    if args.backend == "paillier":
        options.update(SHORT)
    print(
        f"{answers.n_workers} workers, {answers.n_tasks} tasks, {answers.n_answers} answers; "
        f"{args.backend}"
    )
    for mode in ("state", "forge") if args.mode == "both" else (args.mode,):
        out = attack(answers, mode=mode, backend=args.backend, **options)
        line = (
            f"mode {mode}: {out['crafted_rounds']} crafted round(s), {out['workers_read']} of "
            f"{out['workers']} workers' answer vectors read ({out['labels']:,} labels, "
            f"{out['labels_right']:.3f} right); the run "
            + ("finished normally" if out["finished"] else "stopped")
        )
        if out["refused"]:
            line += f"; refused: {out['refused']}"
        print(line)


if __name__ == "__main__":
    main()
