"""Decryption-oracle attack on the Paillier backend: the key holder decrypts whatever it is sent.

The requester is meant to send the key holder only blinded sums over every worker. The key
holder cannot tell a blinded sum from one worker's blinded ciphertexts (both are uniform to it),
so a malicious requester that does not collude with the key holder can combine the target's
ciphertexts alone, blind them, have them decrypted and unblind: it reads the target's
contribution in clear. From the count round: which tasks it answered; from any EM round: its
label on each (the binary model's two terms tell the labels apart).

docs/secure.md puts a deviating requester out of scope; this script measures what that costs.

    python benchmarks/attacks/attack_paillier_oracle.py
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
    fixed_point,
    split_by_worker,
)

SHORT = {"key_bits": 512, "test_only_short_keys": True}  # the attack does not use the key size


class OracleRequester(Requester):
    """Runs honestly, but also has the target's own ciphertexts decrypted in each round."""

    def __init__(self, *args: Any, target: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = target
        self.alone: dict[str, np.ndarray] = {}

    def _secure_sums(self, round_: int, phase: str, state: np.ndarray | None) -> np.ndarray:
        honest_combine = self.aggregator.combine

        def combine(replies: dict[int, Any], n_values: int, decrypt: Any) -> np.ndarray:
            mine = honest_combine({self.target: replies[self.target]}, n_values, decrypt)
            self.alone[phase] = fixed_point.decode(mine, self.fraction_bits)
            return honest_combine(replies, n_values, decrypt)

        self.aggregator.combine = combine  # type: ignore[method-assign]
        try:
            return super()._secure_sums(round_, phase, state)
        finally:
            self.aggregator.combine = honest_combine  # type: ignore[method-assign]


def attack(answers: Any, target: int = 1, max_iter: int = 2) -> dict[str, float]:
    held = split_by_worker(answers)
    workers = [Worker(w, t, v, test_only_short_keys=True) for w, (t, v) in held.items()]
    spec = SecureEM().spec_for(answers)
    requester = OracleRequester(
        spec,
        InProcessTransport(workers),
        "paillier",
        max_iter=max_iter,
        target=target,
        min_answers=2,
        **SHORT,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        requester.run()
    tasks, values = held[target]
    answered = np.rint(requester.alone["count"]).astype(int) == 1
    em = requester.alone["em"].reshape(-1, 2)
    rows = np.asarray(requester.kept_tasks)
    # Label 1 contributes (log a, log(1 - b)), label 0 (log(1 - a), log b): for a worker better
    # than chance the first term is the larger for label 1.
    nonzero = np.abs(em).max(axis=1) > 0
    read = em[nonzero, 0] > em[nonzero, 1]
    label = dict(zip(np.asarray(tasks).tolist(), np.asarray(values).tolist(), strict=True))
    right = [int(r) == label[t] for t, r in zip(rows[nonzero].tolist(), read, strict=True)]
    truth = np.zeros(answers.n_tasks, dtype=bool)
    truth[tasks] = True
    return {
        "answered_right": float(np.mean(answered == truth)),
        "labels_right": float(np.mean(right)),
        "labels": len(right),
    }


def main() -> None:
    answers, _ = binary_crowd(6, 60, 0.5, np.random.default_rng(0))
    out = attack(answers)
    print(
        f"{answers.n_workers} workers, {answers.n_tasks} tasks, paillier: target worker 1: which "
        f"tasks answered {out['answered_right']:.3f}; labels read right "
        f"{out['labels_right']:.3f} of {out['labels']} (on the kept tasks)"
    )


if __name__ == "__main__":
    main()
