"""Memory the exact worker-level figures take for one large release.

Two-layer's and two-layer-null's figures for a worker who releases ``k`` answers under one draw
integrate ``k + 1`` moments (``privtd.mechanisms._shared_draw``); ``perturb`` and
``worker_totals`` compute them for every release size a dataset has. This prints the traced
peak memory (``tracemalloc``) and the time of one release of ``--answers`` answers: held all at
once, the quadrature nodes grew linearly with ``k`` (hundreds of MiB at 20,000, gigabytes at
10^5); in chunks the peak stays flat.

    python benchmarks/attacks/shared_draw_memory.py --answers 20000       # this tree
    PYTHONPATH=/work/main/src python benchmarks/attacks/shared_draw_memory.py   # another
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from privtd.mechanisms import TwoLayerNull, TwoLayerRR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--answers", type=int, default=20_000, help="answers of the one worker")
    args = parser.parse_args()
    k = args.answers
    for name, mech in (
        ("two-layer, stated 1", TwoLayerRR.from_epsilon(1.0)),
        ("two-layer-null, stated 1, scores 1..4", TwoLayerNull.from_epsilon(1.0, 1, 4)),
    ):
        tracemalloc.start()
        start = time.perf_counter()
        one, whole = mech.answer_epsilon(k), mech.release_epsilon(k)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        print(
            f"{name}: k = {k}: one answer given the others {one:.4g}, whole release "
            f"{whole:.6g}; peak {peak:.0f} MiB, {seconds:.1f} s"
        )


if __name__ == "__main__":
    main()
