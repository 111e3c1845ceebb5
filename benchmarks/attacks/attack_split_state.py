"""Split-state attack on the secure EM: a malicious requester sends one worker other posteriors.

Workers cannot check that every worker got the same broadcast. After EM round ``r`` (state
``S`` to everyone), the requester sends round ``r + 1`` with ``S`` again to every worker but the
target, and ``1 - S`` to the target. The others' M-steps are functions of the state, so their
contributions repeat exactly; the difference of the two sums is the target's contribution under
``1 - S`` minus under ``S``: zero on the tasks it did not answer, and one of two fixed vectors
on the tasks it did, one per label. The requester reads which tasks the target answered and,
choosing the labelling that agrees best with ``S``, its labels. One extra round, no drop-out,
every participant present: nothing the workers check is violated.

docs/secure.md puts a requester that "sends crafted posteriors to one worker" out of scope; this
script measures what that costs.

    python benchmarks/attacks/attack_split_state.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import binary_crowd, worker_supported  # noqa: E402

import privtd  # noqa: E402
from privtd.secure import (  # noqa: E402  # noqa: E402
    InProcessTransport,
    Requester,
    SecureEM,
    Worker,
    fixed_point,
    messages,
    split_by_worker,
)


class SplitStateRequester(Requester):
    """Runs the protocol honestly until EM round ``at``, then repeats it with the target's
    state flipped, keeps both sums and stops."""

    def __init__(
        self, *args: Any, target: int, at: int = 5, mode: str = "state", **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.target, self.at, self.mode = target, at, mode
        self.pair: tuple[np.ndarray, np.ndarray] | None = None
        self.state_seen: np.ndarray | None = None
        self.other_kept: np.ndarray | None = None
        self.refused: str | None = None

    def _secure_sums(self, round_: int, phase: str, state: np.ndarray | None) -> np.ndarray:
        sums = super()._secure_sums(round_, phase, state)
        if phase == "em" and round_ == self.at and state is not None:
            if self.mode == "keep":
                # The target alone gets another kept-task list of the same size; every worker
                # then gets the very same round request.
                rng = np.random.default_rng(1)
                self.other_kept = np.sort(
                    rng.choice(self.spec.n_tasks, self.kept_spec.n_tasks, replace=False)
                ).astype(np.int64)
                frame = messages.encode({"type": "keep", "tasks": self.other_kept})
                reply = messages.decode(self.transport.call({self.target: frame})[self.target])
                if reply.get("type") != "ok":
                    self.refused = str(reply.get("reason"))
                    return sums
            crafted = {}
            for w in self.active:
                message: messages.Message = {
                    "type": "round",
                    "round": round_ + 1000,  # a fresh (round, attempt): fresh masks
                    "attempt": 0,
                    "phase": phase,
                    "participants": self.active,
                    "state": 1.0 - state if w == self.target and self.mode == "state" else state,
                }
                crafted[w] = messages.encode(message)
            try:
                replies = {
                    w: self._reply(w, f, "contribution")
                    for w, f in self.transport.call(crafted).items()
                    if f is not None
                }
            except privtd.errors.ProtocolError as exc:
                # Workers that compute their posteriors themselves refuse a state sent to them.
                self.refused = str(exc)
                return sums
            n_values = self.kept_spec.n_tasks * self.kept_spec.n_sums
            codes = self.aggregator.combine(replies, n_values, self._decrypt)

            other = fixed_point.decode(codes, self.fraction_bits).reshape(sums.shape)
            self.pair = (sums.copy(), other)
            self.state_seen = state.copy()
        return sums


def attack_keep(answers: Any, target: int = 0, at: int = 5) -> dict[str, Any]:
    """The variant through the kept-task list: the target alone is told another list of the
    same size, then every worker gets the same round request. The difference with the honest
    round is the target's alone, and covers tasks outside the real kept list too (tasks with
    fewer than ``min_answers`` answers among them)."""
    held = split_by_worker(answers)
    workers = [Worker(w, t, v) for w, (t, v) in held.items()]
    spec = SecureEM().spec_for(answers)
    requester = SplitStateRequester(
        spec,
        InProcessTransport(workers),
        "masking",
        max_iter=at + 1,
        target=target,
        at=at,
        mode="keep",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        requester.run()
    if requester.refused is not None or requester.pair is None:
        return {"refused": requester.refused, "in_range": False, "explained": 0.0, "changed": 0}
    honest, crafted = requester.pair
    bound = len(workers) * spec.max_abs + 1e-6
    in_range = bool(((crafted >= -bound) & (crafted <= 1e-9)).all())
    changed = np.flatnonzero(np.abs(crafted - honest).max(axis=1) > 1e-6)
    mine = set(np.asarray(held[target][0]).tolist())
    kept = np.asarray(requester.kept_tasks)
    other = requester.other_kept
    assert other is not None
    explained = [int(kept[p]) in mine or int(other[p]) in mine for p in changed.tolist()]
    return {
        "refused": None,
        "in_range": in_range,
        "explained": float(np.mean(explained)) if explained else 0.0,
        "changed": int(changed.size),
    }


def attack(answers: Any, target: int = 0, at: int = 5, **options: Any) -> dict[str, Any]:
    held = split_by_worker(answers)
    workers = [Worker(w, t, v, **worker_supported(options)) for w, (t, v) in held.items()]
    spec = SecureEM().spec_for(answers)
    requester = SplitStateRequester(
        spec, InProcessTransport(workers), "masking", max_iter=at + 1, target=target, at=at
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        requester.run()
    if requester.pair is None or requester.state_seen is None:
        return {
            "refused": requester.refused,
            "crafted_sum_in_range": False,
            "answered_right": float("nan"),
            "distinct_vectors": 0,
            "labels_right": 0.0,
            "labels": int(len(held[target][0])),
        }
    honest, crafted = requester.pair
    # A sum of honest binary contributions lies in [-J max, 0]; a sum whose masks did not
    # cancel is uniform modulo 2^64 and almost surely does not.
    bound = len(workers) * spec.max_abs + 1e-6
    in_range = bool(((crafted >= -bound) & (crafted <= 1e-9)).all())
    diff = crafted - honest
    rows = np.asarray(requester.kept_tasks)
    answered = np.abs(diff).max(axis=1) > 1e-6
    # Two distinct non-zero vectors, one per label: split on the first component's sign
    # pattern, then pick the labelling that agrees best with the posteriors.
    key = np.round(diff[answered], 6)
    _, group = np.unique(key, axis=0, return_inverse=True)
    group = group.ravel()
    post = np.asarray(requester.state_seen)[answered] > 0.5
    read = group == 0
    if np.mean(read == post) < 0.5:
        read = ~read
    tasks, values = held[target]
    truth_answered = np.isin(rows, tasks)
    label = dict(zip(np.asarray(tasks).tolist(), np.asarray(values).tolist(), strict=True))
    right = [int(r) == label.get(t, -1) for t, r in zip(rows[answered].tolist(), read, strict=True)]
    return {
        "refused": None,
        "crafted_sum_in_range": in_range,
        "answered_right": float(np.mean(answered == truth_answered)),
        "distinct_vectors": int(group.max() + 1) if group.size else 0,
        "labels_right": float(np.mean(right)) if right else 0.0,
        "labels": int(truth_answered.sum()),
    }


def main() -> None:
    answers, _ = binary_crowd(12, 300, 0.5, np.random.default_rng(0))
    out = attack(answers)
    if out["refused"]:
        print(f"every worker refused the crafted round: {out['refused']}")
        return
    print(
        f"{answers.n_workers} workers, {answers.n_tasks} tasks; crafted round's sum in the "
        f"model's range: {out['crafted_sum_in_range']}; target worker 0: which tasks "
        f"answered {out['answered_right']:.3f}; {out['distinct_vectors']} distinct differences; "
        f"labels read right {out['labels_right']:.3f} of {out['labels']}"
    )


def main_keep() -> None:
    answers, _ = binary_crowd(12, 300, 0.5, np.random.default_rng(0))
    out = attack_keep(answers)
    if out["refused"]:
        print(f"kept-list variant: the target refused the second list: {out['refused']}")
    else:
        print(
            f"kept-list variant: crafted sum in range: {out['in_range']}; {out['changed']} task "
            f"sums changed, {out['explained']:.3f} of them explained by the target's answers "
            "alone"
        )


if __name__ == "__main__":
    main_keep()
    main()
