"""What one curious worker learns from the secure EM's broadcasts about the other workers.

Every worker receives the posteriors of every round. The first EM round's posteriors are the
start state: for the binary model, each kept task's share of 1-votes, ``(x_W + S) / c`` with
``S`` the other answerers' labels summed. A worker ``W`` that answered a task therefore learns,
with nobody's help, whether all the others gave its own label (a share of 0 or 1) and, more
generally, their vote sum whenever the share pins it down. (Later posteriors give it the sum
of the others' log-odds terms too: the posterior's logit minus the prior's minus its own.)

    python benchmarks/attacks/attack_worker_view.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secure_common import binary_crowd  # noqa: E402

import privtd  # noqa: E402
from privtd.secure import (  # noqa: E402
    InProcessTransport,
    Requester,
    SecureEM,
    Worker,
    messages,
    split_by_worker,
)


class CuriousWorker(Worker):
    """Follows the protocol and keeps every state it is sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.states: list[np.ndarray] = []
        self.kept: np.ndarray | None = None

    def handle(self, frame: bytes) -> bytes:
        message = messages.decode(frame)
        reply = super().handle(frame)
        if message.get("type") == "round" and "state" in message:
            self.states.append(np.array(message["state"]))
        elif message.get("type") == "round" and getattr(self, "_state", None) is not None:
            # Workers that compute the posteriors themselves (masking) see the same states.
            if not self.states or not np.array_equal(self.states[-1], self._state):
                self.states.append(np.array(self._state))
        if message.get("type") == "keep":
            kept = message["tasks"] if "tasks" in message else getattr(self, "kept_tasks", None)
            self.kept = np.array(kept)
        return reply


def attack(answers: Any, curious: int = 0, **options: Any) -> dict[str, float]:
    held = split_by_worker(answers)
    workers = [
        CuriousWorker(w, t, v) if w == curious else Worker(w, t, v) for w, (t, v) in held.items()
    ]
    spec = SecureEM().spec_for(answers)
    requester = Requester(spec, InProcessTransport(workers), "masking", max_iter=3, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        requester.run()
    spy = workers[[w.worker_id for w in workers].index(curious)]
    assert isinstance(spy, CuriousWorker) and spy.kept is not None
    share = spy.states[0]  # the start state, by kept-task position
    tasks, values = held[curious]
    position = {int(t): i for i, t in enumerate(spy.kept.tolist())}
    mine = [(int(t), int(v)) for t, v in zip(tasks, values, strict=True) if int(t) in position]
    unanimous = [(t, v) for t, v in mine if share[position[t]] in (0.0, 1.0)]
    # Check against the truth: on those tasks, every other answerer gave W's label.
    others = 0
    for w, (ts, vs) in held.items():
        if w == curious:
            continue
        lookup = dict(unanimous)
        for t, v in zip(np.asarray(ts).tolist(), np.asarray(vs).tolist(), strict=True):
            if t in lookup:
                assert v == lookup[t]
                others += 1
    return {
        "tasks_answered_kept": len(mine),
        "unanimous_tasks": len(unanimous),
        "others_labels_learned": others,
    }


def main() -> None:
    answers, _ = binary_crowd(20, 2000, 0.2, np.random.default_rng(0))
    for k in (3, 5):
        out = attack(answers, min_answers=k)
        print(
            f"min_answers={k}: worker 0 answered {out['tasks_answered_kept']} kept tasks; on "
            f"{out['unanimous_tasks']} the start posterior (vote share) was 0 or 1, so it "
            f"learned the labels of the {out['others_labels_learned']} other answers there "
            "(all equal to its own, checked on the truth)"
        )


if __name__ == "__main__":
    main()
