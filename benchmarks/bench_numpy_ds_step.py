"""numpy's Dawid-Skene pass: the label-major version in privtd against the row-major one it
replaced (kept here as the reference), per pass and for whole fits.

The row-major pass gathered ``(answers, K)`` rows, handed ``np.bincount`` their strided
columns and reduced along the K-wide axis; the label-major one (``_kernels._numpy._ds_step_np``)
takes from and sums into contiguous ``(K, n)`` rows. Both give the same sums in the same order
(checked here to 1e-12). Fits: privtd's DawidSkene and MACE on numpy's kernels, the pass
swapped for the reference one to time "before".

    PYTHONPATH=src python benchmarks/bench_numpy_ds_step.py
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np

from privtd import datasets
from privtd.errors import ConvergenceWarning
from privtd.inference import MACE, DawidSkene, _kernels
from privtd.inference._kernels import _numpy


def row_major_step(t, start, wx, log_conf, log_prior, gold):
    """The pass as it was: rows of (task, label), bincount per strided column."""

    def gather_scatter(dst, src, table, n_out):
        rows = table[src]
        out = np.empty((n_out, table.shape[1]))
        for k in range(table.shape[1]):
            out[:, k] = np.bincount(dst, weights=rows[:, k], minlength=n_out)
        return out

    n_t = start.shape[0] - 1
    log_rho = gather_scatter(t, wx, log_conf, n_t) + log_prior
    top = log_rho.max(axis=1, keepdims=True)
    log_rho -= top
    np.exp(log_rho, out=log_rho)
    total = log_rho.sum(axis=1, keepdims=True)
    log_rho /= total
    loglik = float((np.log(total) + top).sum())
    fixed = gold >= 0
    if fixed.any():
        log_rho[fixed] = 0.0
        log_rho[fixed, gold[fixed]] = 1.0
    counts = gather_scatter(wx, t, log_rho, log_conf.shape[0])
    return log_rho, counts, log_rho.sum(axis=0), loglik


def best(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    warnings.simplefilter("ignore", ConvergenceWarning)
    _kernels.set_backend("numpy")
    label_major = _numpy.KERNELS["ds_step"]
    print(f"# load {os.getloadavg()[0]:.2f} at start; best of 7 (fits: best of 2 for MACE)")
    for k in (2, 4):
        answers = datasets.make_categorical(8000, 100, k, answers_per_task=5, rng=11)[0]
        layout = _kernels.TaskLayout(answers.task, answers.worker, answers.value, answers.n_tasks)
        wx = (layout.worker.astype(np.int64) * k + layout.value).astype(np.int32)
        rng = np.random.default_rng(0)
        log_conf = np.log(rng.dirichlet(np.ones(k), size=answers.n_workers * k))
        args = (
            layout.task,
            layout.start,
            wx,
            log_conf,
            np.full(k, -np.log(k)),
            -np.ones(8000, int),
        )
        new, old = label_major(*args), row_major_step(*args)
        for a, b in zip(new, old, strict=True):
            assert np.allclose(a, b, rtol=1e-12, atol=1e-12)
        t_new, t_old = (
            best(lambda a=args: label_major(*a), 7),
            best(lambda a=args: row_major_step(*a), 7),
        )
        print(
            f"pass, K={k}, {answers.n_answers} answers: row-major {t_old * 1e3:.2f} ms, "
            f"label-major {t_new * 1e3:.2f} ms ({t_old / t_new:.1f}x)"
        )
        fits = [
            (
                "DawidSkene(max_iter=50, tol=0)",
                lambda a=answers: DawidSkene(max_iter=50, tol=0.0).fit(a),
                7,
            )
        ]
        if k == 4:
            fits.append(
                (
                    "MACE(max_iter=50, tol=0), 10 restarts",
                    lambda a=answers: MACE(max_iter=50, tol=0.0).fit(a),
                    2,
                )
            )
        for name, fit, repeat in fits:
            t_new = best(fit, repeat)
            _numpy.KERNELS["ds_step"] = row_major_step
            try:
                t_old = best(fit, repeat)
            finally:
                _numpy.KERNELS["ds_step"] = label_major
            print(f"  {name}: before {t_old:.3f} s, after {t_new:.3f} s ({t_old / t_new:.1f}x)")
    print(f"# load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
