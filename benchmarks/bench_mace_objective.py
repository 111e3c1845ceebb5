"""MACE's fit quality at each tool's defaults: the log marginal likelihood per answer at the
fitted parameters (uniform class prior), privtd against crowd-kit 1.4.2, EM and VB.

MACE draws random restarts and crowd-kit's parameters are not privtd's, so labels after the
same steps are compared from one shared start (bench_crowdkit_glad_mace.py); here each tool
runs as a user would, and the question is whether privtd's fit is at least as good by the
model's own measure. Writes benchmarks/results/mace_objective.txt.

    PYTHONPATH=src python benchmarks/bench_mace_objective.py [--datasets dog,sentiment]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_crowdkit_glad_mace import (  # noqa: E402
    CATEGORICAL,
    CkMACE,
    accuracy,
    ck_frame,
    ck_labels,
    ck_mace_params,
    mace_loglik,
    timed,
)

from privtd import datasets  # noqa: E402
from privtd.inference import MACE  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "mace_objective.txt"


def rows(name: str) -> list[str]:
    data = datasets.load(name)
    answers = data.answers
    frame, worker_of, label_of = ck_frame(answers)
    n_w, k = answers.n_workers, answers.n_labels
    out = []
    for method in ("vb", "em"):
        ck, t_ck = timed(lambda: CkMACE(method=method).fit(frame))  # noqa: B023
        ck_obj = mace_loglik(answers, *ck_mace_params(ck, worker_of, label_of, n_w, k))
        ours, t_ours = timed(lambda: MACE(method=method).fit(answers))  # noqa: B023
        ours_obj = mace_loglik(
            answers,
            ours.weights_["weight"].to_numpy(),
            ours.weights_["spam"].to_numpy(),
            ours.strategies_,
        )
        ck_acc = accuracy(ck_labels(ck.labels_, answers, label_of), data.truth)
        out.append(
            f"{name:14s} {method}: log-lik/answer privtd {ours_obj:.6f} ({ours.n_iter_} it of "
            f"the best restart) crowd-kit {ck_obj:.6f} (50 it), privtd - crowd-kit "
            f"{ours_obj - ck_obj:+.2e}; accuracy privtd {accuracy(ours.truths_, data.truth):.4f} "
            f"crowd-kit {ck_acc:.4f}; time {t_ours:.2f}s / {t_ck:.1f}s"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(CATEGORICAL))
    args = parser.parse_args()
    lines = [f"# MACE at each tool's defaults; load {os.getloadavg()[0]:.2f} at start"]
    for name in args.datasets.split(","):
        lines += rows(name)
        print(lines[-2], lines[-1], sep="\n", flush=True)
    lines.append(f"# load {os.getloadavg()[0]:.2f} at end")
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
