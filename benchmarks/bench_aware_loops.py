"""AwareGaussian's and AwareNull's fits: exact outputs and times on one kernel backend.

    PRIVTD_BACKEND=numba PYTHONPATH=src python benchmarks/bench_aware_loops.py dump OUT.npz
    PRIVTD_BACKEND=numba PYTHONPATH=src python benchmarks/bench_aware_loops.py same A.npz B.npz
    PRIVTD_BACKEND=numba PYTHONPATH=src python benchmarks/bench_aware_loops.py time

``dump`` records every fitted array of a set of small fits (with and without the mechanism,
gold, a warm start; AwareNull's mechanisms, estimates, locations and starts, and 2,500 tasks)
and of the timed ones; ``same`` says whether two records are equal bit for bit (run one tree's
dump against another's: a refactor of the loops must change no bit on either backend).
``time``: the best of ``--repeats`` fits of mid-size crowds: AwareGaussian on 20,000 tasks x
2,000 workers with 20 answers a task (400,000 answers, P1's noise at level 1), AwareNull on
P3's synthetic design (2,000 workers x 200 tasks, sparsity 0.5, epsilon 1) under both of its
estimates, and on 1,000 workers x 3,000 tasks (epsilon 0.5, variational).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

import privtd
from privtd.experiments import bigdata18
from privtd.inference import AwareGaussian, AwareNull
from privtd.mechanisms import ExpGaussian, KRRNull, TwoLayerNull

Fit = Callable[[], Any]


def numeric(tasks: int, workers: int, per_task: int | None, seed: int) -> tuple[Any, Any, Any]:
    answers, truth, _ = privtd.datasets.make_numeric(
        tasks, workers, answers_per_task=per_task, error_rate=1.0, rng=seed
    )
    mech = ExpGaussian(1.0, float(answers.value.min()), float(answers.value.max()))
    return mech.perturb(answers, rng=seed + 1), truth, mech


def p3(sparsity: float, mech_class: Any, eps: float, seed: int) -> tuple[Any, Any]:
    answers, _ = bigdata18.synthetic(2000, 200, sparsity, np.random.default_rng(seed))
    mech = mech_class.from_epsilon(eps, 0, 9)
    return mech.perturb(answers, rng=seed + 1), mech


def timed_cases() -> Iterator[tuple[str, Fit]]:
    noisy, _, mech = numeric(20_000, 2_000, 20, 3)
    yield "gaussian/mid", lambda: AwareGaussian(mech).fit(noisy)
    yield "gaussian/mid-plain", lambda: AwareGaussian(None).fit(noisy)
    released, null_mech = p3(0.5, KRRNull, 1.0, 5)
    yield "null/mid-map", lambda: AwareNull(null_mech).fit(released)
    yield "null/mid-variational", lambda: AwareNull(null_mech, estimate="variational").fit(released)
    answers, _ = bigdata18.synthetic(1000, 3000, 0.5, np.random.default_rng(7))
    big_mech = KRRNull.from_epsilon(0.5, 0, 9)
    big = big_mech.perturb(answers, rng=8)
    yield "null/big-variational", lambda: AwareNull(big_mech, estimate="variational").fit(big)


def small_cases() -> Iterator[tuple[str, Fit]]:
    noisy, truth, mech = numeric(300, 60, None, 1)
    gold = truth.iloc[:7]
    yield "gaussian/told", lambda: AwareGaussian(mech).fit(noisy)
    yield "gaussian/plain", lambda: AwareGaussian(None).fit(noisy)
    yield "gaussian/gold", lambda: AwareGaussian(mech).fit(noisy, gold=gold)
    yield "gaussian/short", lambda: AwareGaussian(mech, max_iter=2, grid=30).fit(noisy)

    def warm() -> Any:
        first = AwareGaussian(mech).fit(noisy.subset(noisy.task < 200))
        return AwareGaussian(mech).fit(noisy, warm_start=first)

    yield "gaussian/warm", warm
    for mech_class in (KRRNull, TwoLayerNull):
        for eps in (0.5, 2.0):
            released, null_mech = p3(0.7, mech_class, eps, 2)
            key = f"null/{mech_class.__name__}@{eps}"
            for estimate in ("map", "variational"):
                yield (
                    f"{key}/{estimate}",
                    lambda m=null_mech, r=released, e=estimate: AwareNull(m, estimate=e).fit(r),
                )
            yield (
                f"{key}/mean",
                lambda m=null_mech, r=released: AwareNull(m, location="mean").fit(r),
            )
            yield (
                f"{key}/deconvolved",
                lambda m=null_mech, r=released: AwareNull(
                    m, start="deconvolved", estimate="variational", strength=1.0
                ).fit(r),
            )
            yield f"{key}/short", lambda m=null_mech, r=released: AwareNull(m, max_iter=3).fit(r)
    released, null_mech = p3(0.5, KRRNull, 1.0, 4)
    many, _ = bigdata18.synthetic(200, 2500, 0.5, np.random.default_rng(6))
    many_mech = KRRNull.from_epsilon(0.5, 0, 9)
    many = many_mech.perturb(many, rng=7)
    yield "null/many-tasks", lambda: AwareNull(many_mech, estimate="variational").fit(many)
    null_gold = pd.Series(4.0, index=released.tasks[::9])
    yield "null/gold", lambda: AwareNull(null_mech).fit(released, gold=null_gold)


def record(est: Any) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name in sorted(vars(est)):
        if not name.endswith("_") or name.startswith("_"):
            continue
        value = getattr(est, name)
        if hasattr(value, "to_numpy") and hasattr(value, "columns"):
            for column in value.columns:
                if "time" not in str(column):
                    out[f"{name}.{column}"] = np.asarray(value[column].to_numpy())
        elif hasattr(value, "to_numpy"):
            out[name] = np.asarray(value.to_numpy())
        elif isinstance(value, (int, float, bool, list, tuple, np.ndarray)):
            out[name] = np.asarray(value)
    return out


def dump(path: str) -> None:
    arrays: dict[str, np.ndarray] = {}
    for case, fit in (*small_cases(), *timed_cases()):
        for key, value in record(fit()).items():
            arrays[f"{case}|{key}"] = value
    np.savez(path, backend=np.asarray(privtd.inference._kernels.get_backend()), **arrays)
    print(f"{len(arrays)} arrays to {path}")


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (numbers), or equal (strings, objects)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "biufc":
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(a, b))


def same(before: str, after: str) -> None:
    a, b = np.load(before, allow_pickle=True), np.load(after, allow_pickle=True)
    differ = [k for k in a.files if k not in b.files or not identical(a[k], b[k])]
    differ += [k for k in b.files if k not in a.files]
    for key in differ:
        print("differs:", key)
    print(f"{len(a.files)} arrays, {len(differ)} differ")
    raise SystemExit(1 if differ else 0)


def timing(repeats: int, only: str) -> None:
    """Best wall and best CPU time of each case (the CPU time, summed over threads, is the
    steadier on a loaded machine)."""
    print(f"backend {privtd.inference._kernels.get_backend()}")
    for case, fit in timed_cases():
        if only not in case:
            continue
        fit()  # numba's kernels load once per process
        wall, cpu = np.inf, np.inf
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            est = fit()
            wall = min(wall, time.perf_counter() - start)
            cpu = min(cpu, time.process_time() - start_cpu)
        print(
            f"{case:22s} {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms cpu "
            f"{est.n_iter_:4d} iterations",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dump").add_argument("out")
    both = sub.add_parser("same")
    both.add_argument("before")
    both.add_argument("after")
    timed = sub.add_parser("time")
    timed.add_argument("--repeats", type=int, default=5)
    timed.add_argument("--only", default="", help="the cases whose name holds this")
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out)
    elif args.command == "same":
        same(args.before, args.after)
    else:
        timing(args.repeats, args.only)


if __name__ == "__main__":
    main()
