"""P2 (DMKD 2014): does the secure protocol cost accuracy, and what does it cost in time and bytes?

P2's experiments (from the slides' outline; the tables themselves are not in our copy)
check (a) that the approximation inside the secure computation, our fixed-point encoding, does
not hurt accuracy, and (b) that the cryptographic overhead is practical. ``accuracy`` runs the
secure EM and the plain EM on bundled datasets of each model; ``cost`` measures one EM iteration
on synthetic crowds of growing size.

Beside P2's metric each row gives the trivial baseline, scored by :func:`privtd.evaluate`: for
labels, balanced accuracy (the mean of the per-class recalls) and the majority class's accuracy
and balanced accuracy; for numbers, the MAE of the median of the answers.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .. import datasets
from ..errors import ConvergenceWarning
from ..evaluation import evaluate
from ..inference import DawidSkene, LatentClass, Raykar

#: dataset -> (model, public answer range or None)
DATASETS: dict[str, tuple[str, tuple[float, float] | None]] = {
    "duchenne": ("binary", None),
    "sentiment": ("binary", None),
    "dog": ("multiclass", None),
    "emotion": ("real", (-100.0, 100.0)),
}
GAMMA = 1e4


def _plain(model: str, value_range: tuple[float, float] | None) -> Any:
    if model == "binary":
        return LatentClass()
    if model == "multiclass":
        return DawidSkene()
    assert value_range is not None
    return Raykar(gamma=GAMMA / (value_range[1] - value_range[0]) ** 2, init="mean")


def _score(truths: pd.Series, gold: pd.Series, model: str) -> float:
    if model == "real":
        return float(np.abs(truths[gold.index].to_numpy() - gold.to_numpy()).mean())
    return float((truths[gold.index].to_numpy() == gold.to_numpy()).mean())


def _beside(plain: Any, secure: Any, gold: pd.Series, answers: Any, model: str) -> dict[str, Any]:
    """Balanced accuracy of both fits and the baseline's score, for the row beside P2's metric:
    the majority class (accuracy, balanced accuracy), or the median of the answers (MAE)."""
    if model == "real":
        m = evaluate(plain.truths_, gold, kind="numeric", answers=answers)
        nan = float("nan")
        return {
            "plain_bacc": nan,
            "secure_bacc": nan,
            "baseline": m["baseline_mae"],
            "baseline_bacc": nan,
        }
    m = evaluate(plain.truths_, gold, kind="categorical")
    s = evaluate(secure.truths_, gold, kind="categorical")
    return {
        "plain_bacc": m["balanced_accuracy"],
        "secure_bacc": s["balanced_accuracy"],
        "baseline": m["baseline_accuracy"],
        "baseline_bacc": m["baseline_balanced_accuracy"],
    }


def agreement(secure: Any, plain: Any, model: str) -> tuple[float, float]:
    """Share of tasks with the same truth (within 1e-6 for real answers), and the largest
    difference of a posterior (a truth, for real answers) between a secure and a plain fit."""
    if model == "real":
        gap = np.abs(secure.truths_.to_numpy() - plain.truths_.to_numpy())
        return float(np.mean(gap < 1e-6)), float(gap.max())
    same = float((secure.truths_ == plain.truths_).mean())
    return same, float(np.abs(secure.probas_.to_numpy() - plain.probas_.to_numpy()).max())


def accuracy(
    names: tuple[str, ...] | None = None,
    backend: str = "masking",
    progress: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Plain against secure EM per dataset: score against gold (accuracy, or MAE for the real
    model), balanced accuracy and the trivial baseline's score (``baseline``: the majority
    class's accuracy, or the MAE of the median of the answers; ``baseline_bacc``), agreement,
    largest posterior (or truth) difference, iterations, time, bytes."""
    from ..secure import SecureEM

    rows = []
    for name in tuple(DATASETS) if names is None else names:
        model, value_range = DATASETS[name]
        answers, gold = datasets.load(name)
        started = time.perf_counter()
        plain = _plain(model, value_range).fit(answers)
        plain_seconds = time.perf_counter() - started
        started = time.perf_counter()
        secure = SecureEM(model, backend, value_range=value_range, gamma=GAMMA).fit(answers)
        secure_seconds = time.perf_counter() - started
        same, diff = agreement(secure, plain, model)
        em = secure.rounds_[secure.rounds_.phase == "em"]
        rows.append(
            {
                "dataset": name,
                "model": model,
                "backend": backend,
                "workers": answers.n_workers,
                "tasks": answers.n_tasks,
                "answers": answers.n_answers,
                "metric": "mae" if model == "real" else "accuracy",
                "plain": _score(plain.truths_, gold, model),
                "secure": _score(secure.truths_, gold, model),
                **_beside(plain, secure, gold, answers, model),
                "same_truths": same,
                "max_difference": diff,
                "iterations_plain": plain.n_iter_,
                "iterations_secure": secure.n_iter_,
                "seconds_plain": round(plain_seconds, 3),
                "seconds_secure": round(secure_seconds, 2),
                "seconds_per_iteration": float(em.seconds.mean()),
                "kb_per_worker_per_iteration": float(em.worker_bytes_sent.mean())
                / answers.n_workers
                / 1e3,
            }
        )
        if progress is not None:
            progress(1)
    return pd.DataFrame(rows)


def cost(
    settings: tuple[tuple[str, int, int], ...],
    iterations: int = 2,
    seed: int = 0,
    key_bits: int = 2048,
    progress: Callable[[int], None] | None = None,
    test_only_short_keys: bool = False,
) -> pd.DataFrame:
    """Per EM iteration, on synthetic binary crowds (5 answers per task): wall time, the
    requester's and the slowest worker's compute time, and bytes each way, for each
    ``(backend, workers, tasks)``. Paillier keys under 2048 bits need ``test_only_short_keys``
    (they measure cost, and protect nothing)."""
    from ..secure import SecureEM

    rng = np.random.default_rng(seed)
    rows = []
    for backend, n_workers, n_tasks in settings:
        answers, _, _ = datasets.make_categorical(
            n_tasks, n_workers, 2, answers_per_task=min(5, n_workers), rng=rng
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = SecureEM(
                "binary",
                backend,
                max_iter=iterations,
                key_bits=key_bits,
                test_only_short_keys=test_only_short_keys,
            ).fit(answers)
        em = fit.rounds_[fit.rounds_.phase == "em"]
        rows.append(
            {
                "backend": backend,
                "workers": n_workers,
                "tasks": n_tasks,
                "seconds": float(em.seconds.mean()),
                "requester_seconds": float(em.requester_seconds.mean()),
                "worker_seconds_max": float(em.worker_seconds_max.mean()),
                "worker_seconds_total": float(em.worker_seconds_total.mean()),
                "requester_mb": float(em.requester_bytes_sent.mean()) / 1e6,
                "workers_mb": float(em.worker_bytes_sent.mean()) / 1e6,
            }
        )
        if progress is not None:
            progress(1)
    return pd.DataFrame(rows)


#: The default cost grid: masking from 16 to 256 workers and 1,000 to 10,000 tasks, and Paillier
#: (2048-bit) at the smallest settings; ``benchmarks/bench_secure.py scale`` goes further.
COST_SETTINGS: tuple[tuple[str, int, int], ...] = (
    ("masking", 16, 1000),
    ("masking", 64, 1000),
    ("masking", 256, 1000),
    ("masking", 64, 10_000),
    ("paillier", 16, 1000),
    ("paillier", 32, 1000),
)


def run(
    seed: int = 0, progress: Callable[[int], None] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Both tables and the run record."""
    start = time.perf_counter()
    table = accuracy(progress=progress)
    costs = cost(COST_SETTINGS, seed=seed, progress=progress)
    facts = {
        "seed": seed,
        "datasets": list(DATASETS),
        "cost_settings_note": "per EM iteration, synthetic binary crowds, 5 answers per task",
        "fraction_bits": 40,
        "paillier_key_bits": 2048,
        "cost_settings": [list(s) for s in COST_SETTINGS],
        "seconds": round(time.perf_counter() - start, 2),
    }
    return table, costs, facts


def figures(out: Any, costs: pd.DataFrame, setting: str = "") -> list[Any]:
    """Time per EM iteration against the number of workers (1,000 tasks), one panel per
    backend: the workers' summed compute, the slowest worker, and the requester."""
    from .report import plot_panels

    names = {
        "seconds": "workers, summed",
        "worker_seconds_max": "slowest worker",
        "requester_seconds": "requester",
    }
    part = costs[costs.tasks == 1000].rename(columns=names)
    path = plot_panels(
        out,
        part,
        ["backend"],
        "workers",
        list(names.values()),
        "seconds per iteration",
        "cost_vs_workers.png",
        f"P2: secure latent class EM, cost per iteration at 1,000 tasks ({setting})",
        logy=True,
        logx=True,
    )
    return [path] if path is not None else []
