"""``privtd infer`` end to end against a crowd-kit script, each in a fresh process.

One CSV of 1e6 answers (K = 2, 200,000 tasks, 1,000 workers, 5 answers per task, from
``privtd.datasets.make_categorical``) is written once. Then, alternating so that both see the
same machine load:

- ``privtd infer FILE --method ds -o out.csv`` (the whole command: start-up, imports, reading,
  coding, fit, writing), once per ``--privtd`` interpreter given (the default install has
  numba and reads the CSV with pandas; ``privtd[fast]`` adds pyarrow's reader);
- the first of them again with ``PRIVTD_BACKEND=numpy`` (numpy's kernels, no numba set-up);
- a reference script that reads the CSV with pandas, runs crowd-kit's ``DawidSkene()``
  (default ``n_iter``) and writes the labels;

and the start-up costs: ``privtd --help``, ``import privtd`` and ``import numpy, pandas``. Every
figure is the median of ``--runs`` fresh processes after one untimed run (which also fills
numba's cache). A last process times the stages of ``privtd infer`` in-process.

    python benchmarks/bench_cli.py --privtd /tmp/fc/bin/python --privtd "$PWD/../venv/bin/python"

Results go to benchmarks/results/cli_e2e.txt (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CROWDKIT = """
import sys
import pandas as pd
from crowdkit.aggregation import DawidSkene
frame = pd.read_csv(sys.argv[1]).rename(columns={"answer": "label"})
labels = DawidSkene().fit_predict(frame)
labels.rename("truth").rename_axis("task").reset_index().to_csv(sys.argv[2], index=False)
"""

# The stages of `privtd infer FILE -m ds -o OUT`, as the command runs them.
STAGES = """
import sys, time
t0 = time.perf_counter()
import numpy, pandas
t1 = time.perf_counter()
from privtd.answers import Answers
from privtd.inference import DawidSkene, make_estimator
from privtd import _csv
t2 = time.perf_counter()
frame = _csv.read_csv(sys.argv[1], ["task", "worker"])
t3 = time.perf_counter()
data = Answers.from_frame(frame)
t4 = time.perf_counter()
est = make_estimator("ds").fit(data)
t5 = time.perf_counter()
est = make_estimator("ds").fit(data)
t6 = time.perf_counter()
text = est.truths_.rename_axis("task").reset_index().to_csv(index=False)
open(sys.argv[2], "w").write(text)
t7 = time.perf_counter()
reader = "pyarrow" if _csv._read_pyarrow(sys.argv[1], ["task", "worker"]) is not None else "pandas"
print(f"import numpy+pandas {t1 - t0:.3f} | import privtd's reader and ds {t2 - t1:.3f} | "
      f"read CSV ({reader}) {t3 - t2:.3f} | code ids {t4 - t3:.3f} | "
      f"fit, first in process {t5 - t4:.3f} | fit again {t6 - t5:.3f} | write {t7 - t6:.3f}")
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--privtd",
        action="append",
        help="A Python with privtd installed (repeatable; default: this one).",
    )
    parser.add_argument("--crowdkit-python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, help="Working folder (default: a temporary one).")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "cli_e2e.txt"
    )
    args = parser.parse_args()
    pythons = args.privtd or [sys.executable]
    work = args.dir or Path(tempfile.mkdtemp(prefix="privtd-cli-"))
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "answers.csv"
    if not csv.exists():
        from privtd import datasets

        answers, _, _ = datasets.make_categorical(200_000, 1_000, 2, answers_per_task=5, rng=0)
        answers.to_frame().to_csv(csv, index=False)
    script = work / "crowdkit_ds.py"
    script.write_text(CROWDKIT)

    def infer(py: str) -> list[str]:
        return [py, "-m", "privtd.cli", "infer", str(csv), "-m", "ds", "-o", str(work / "p.csv")]

    lines = [f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores"]
    lines.append(f"# data: {csv} (1e6 answers, K = 2, 200,000 tasks, 1,000 workers)")
    lines.append(f"# before: {load()}")
    for py in pythons:  # untimed: fills numba's cache, warms the file cache
        timed(infer(py))
    timed([args.crowdkit_python, str(script), str(csv), str(work / "c.csv")])

    # The same command on numpy's kernels: no numba set-up in the process (docs/scale.md).
    numpy_env = {**os.environ, "PRIVTD_BACKEND": "numpy"}
    times: dict[str, list[float]] = {}
    for _ in range(args.runs):
        for py in pythons:
            times.setdefault(f"privtd infer -m ds ({py})", []).append(timed(infer(py)))
        times.setdefault(f"privtd infer -m ds, PRIVTD_BACKEND=numpy ({pythons[0]})", []).append(
            timed(infer(pythons[0]), env=numpy_env)
        )
        times.setdefault("crowd-kit DawidSkene script", []).append(
            timed([args.crowdkit_python, str(script), str(csv), str(work / "c.csv")])
        )
    for _ in range(max(args.runs, 5)):
        for py in pythons:
            times.setdefault(f"privtd --help ({py})", []).append(
                timed([py, "-m", "privtd.cli", "--help"])
            )
            times.setdefault(f"import privtd ({py})", []).append(timed([py, "-c", "import privtd"]))
            times.setdefault(f"import numpy, pandas ({py})", []).append(
                timed([py, "-c", "import numpy, pandas"])
            )
    lines.append(f"# after: {load()}")
    lines.append(f"# median of {args.runs} (start-up: of {max(args.runs, 5)}) fresh processes")
    medians = {k: statistics.median(v) for k, v in times.items()}
    for key, value in medians.items():
        runs = " ".join(f"{t:.2f}" for t in times[key])
        lines.append(f"{key:<72} {value:7.3f} s   [{runs}]")
    reference = medians["crowd-kit DawidSkene script"]
    for py in pythons:
        ours = medians[f"privtd infer -m ds ({py})"]
        overhead = medians[f"import privtd ({py})"] - medians[f"import numpy, pandas ({py})"]
        lines.append(f"ratio crowd-kit / privtd infer ({py}): {reference / ours:.1f}x")
        lines.append(f"import privtd - import numpy, pandas ({py}): {overhead:+.3f} s")
    import pandas as pd

    ours_labels = pd.read_csv(work / "p.csv").set_index("task")["truth"]
    theirs = pd.read_csv(work / "c.csv").set_index("task")["truth"]
    same = (ours_labels.reindex(theirs.index) == theirs).mean()
    lines.append(f"same labels as crowd-kit: {same:.4%}")
    for py in pythons:
        out = subprocess.run(
            [py, "-c", STAGES, str(csv), str(work / "s.csv")],
            check=True,
            capture_output=True,
            text=True,
        )
        lines.append(f"stages ({py}): {out.stdout.strip()}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
