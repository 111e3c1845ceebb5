"""Two-layer's epsilon, as a worker who releases k answers under one flip probability gets it.

P0's two-layer mechanism draws one ``f_u ~ U(a, b)`` per worker and flips every answer of the
worker with it. Its stated epsilon is the loss of one answer *alone*. The requester sees all of a
worker's answers, and they tell it ``f_u``: a worker whose k reports all match its answers has a
small ``f_u``, and then one more answer is nearly given away.

This script simulates ``--workers`` workers through ``TwoLayerRR.perturb`` (one draw per worker,
as the batch run, the client and the page draw it), each answering label 0 on ``--answers`` tasks,
and measures the realised loss from the simulated reports alone. By exchangeability a report that
keeps ``m`` of the k answers has probability ``L(m) = freq(k - m flips) / C(k, m)``, and
neighbouring answer vectors move ``m``:

- one answer given the other k - 1 (answers differing in one place): ``max |ln L(m) / L(m-1)|``;
- the whole release (answers differing anywhere): ``max ln L - min ln L``;

each over the ``m`` seen at least 100 times, so the figures are what this sample can show (below
the exact ones, which need the rare reports too). Beside them: what privtd prints per answer and
bills per worker (``worker_totals``) for the same mechanism.

    python benchmarks/attacks/attack_two_layer_release.py            # this tree
    PYTHONPATH=/work/main/src python benchmarks/attacks/attack_two_layer_release.py   # another
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from privtd import mechanisms
from privtd.answers import Answers
from privtd.mechanisms import TwoLayerRR, worker_totals


def realised(mech: TwoLayerRR, k: int, workers: int, seed: int) -> tuple[float, float]:
    """(one answer given the others, whole release), measured from simulated reports."""
    answers = Answers(
        task=np.tile(np.arange(k, dtype=np.int32), workers),
        worker=np.repeat(np.arange(workers, dtype=np.int32), k),
        value=np.zeros(workers * k, dtype=np.int8),
        tasks=pd.RangeIndex(k),
        workers=pd.RangeIndex(workers),
        labels=pd.RangeIndex(2),
    )
    out = mech.perturb(answers, rng=seed)
    flips = np.bincount(out.worker, weights=out.value != 0, minlength=workers).astype(np.int64)
    freq = np.bincount(k - flips, minlength=k + 1)  # by reports kept, m = 0..k
    seen = freq >= 100
    log_choose = np.array(
        [math.lgamma(k + 1) - math.lgamma(m + 1) - math.lgamma(k - m + 1) for m in range(k + 1)]
    )
    with np.errstate(divide="ignore"):
        ell = np.log(freq / workers) - log_choose
    steps = [abs(ell[m] - ell[m - 1]) for m in range(1, k + 1) if seen[m] and seen[m - 1]]
    return max(steps, default=0.0), float(ell[seen].max() - ell[seen].min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=20, help="answers per worker (k)")
    parser.add_argument("--workers", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    k = args.answers
    print(f"two-layer, a = 0, {args.workers:,} simulated workers of k = {k} answers, one draw each")
    header = (
        f"{'stated':>6} | {'printed/answer':>14} {'realised':>8} | {'billed/worker':>13} "
        f"{'realised':>8} | exact: answer, release"
    )
    print(header)
    print("-" * len(header))
    for eps in (1.0, 0.1):
        mech = TwoLayerRR.from_epsilon(eps, 2)
        one_answer = Answers(
            task=np.arange(k, dtype=np.int32),
            worker=np.zeros(k, dtype=np.int32),
            value=np.zeros(k, dtype=np.int8),
            tasks=pd.RangeIndex(k),
            workers=pd.RangeIndex(1),
            labels=pd.RangeIndex(2),
        )
        billed = float(worker_totals(one_answer, mech)["epsilon_total"].iloc[0])
        # What this tree prints per answer for such a worker: one answer given the others
        # where it prints that figure, else the marginal alone.
        printed = (
            mechanisms.release_figures(mech, k)["answer_given_others"]["epsilon"]
            if hasattr(mechanisms, "release_figures")
            else mech.epsilon
        )
        one, whole = realised(mech, k, args.workers, args.seed)
        print(
            f"{eps:>6g} | {printed:>14.3f} {one:>8.3f} | {billed:>13.3f} {whole:>8.3f} | "
            f"{mech.answer_epsilon(k):>7.3f} {mech.release_epsilon(k):>7.3f}"
        )
    print(
        "realised above printed/answer or billed/worker: privtd understates what a worker loses "
        "(sampling error of 'realised': about 0.1)."
    )


if __name__ == "__main__":
    main()
