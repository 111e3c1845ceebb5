"""P3 (BigData 2018, Section VI): MAE change of truth inference (Algorithm 1, SPEC A9) when
workers perturb sparse answers with LP, RR, MF or the two-layer adaptation (SPEC B3.6).

MAE change = MAE of the truths inferred from perturbed answers minus that from the original
answers, both against the ground truth.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .. import datasets
from ..answers import Answers
from ..errors import ConvergenceWarning, ValidationError
from ..inference import WeightedAverage
from ..mechanisms import KRRNull, LaplaceNull, MFPerturbation, TwoLayerNull, task_profiles
from ..mechanisms._base import Mechanism

EPSILONS = (0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)
SPARSITIES = (0.1, 0.3, 0.5, 0.7, 0.9)
MECHANISMS = ("lp", "rr", "mf", "two_layer")


def synthetic(
    n_workers: int, n_tasks: int, sparsity: float, rng: np.random.Generator
) -> tuple[Answers, np.ndarray]:
    """SPEC B3.6: truths N(0, 1); half the workers have error sd 1, half 5; answers rounded and
    clipped to 0..9; each worker leaves a random ``sparsity`` share of tasks NULL (>= 1 answer)."""
    mu = rng.standard_normal(n_tasks)
    sigma = np.where(rng.random(n_workers) < 0.5, 1.0, 5.0)
    answered = rng.random((n_workers, n_tasks)) >= sparsity
    answered[np.arange(n_workers), rng.integers(0, n_tasks, n_workers)] = True
    w, t = np.nonzero(answered)
    value = np.clip(np.rint(mu[t] + sigma[w] * rng.standard_normal(w.size)), 0, 9)
    answers = Answers(
        t.astype(np.int32),
        w.astype(np.int32),
        value,
        pd.RangeIndex(n_tasks),
        pd.RangeIndex(n_workers),
    )
    return answers, mu


def _mechanism(name: str, eps: float, low: int, high: int, n_tasks: int, d: int) -> Mechanism:
    if name == "lp":
        return LaplaceNull.from_epsilon(eps, low, high)
    if name == "rr":
        return KRRNull.from_epsilon(eps, low, high)
    if name == "two_layer":
        return TwoLayerNull.from_epsilon(eps, low, high)
    return MFPerturbation.from_epsilon(eps, task_profiles(n_tasks, d, rng=0), low, high)


def _mae(answers: Answers, gold: np.ndarray, truth: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        inferred = WeightedAverage().fit(answers).truths_.to_numpy(dtype=float)
    return float(np.abs(inferred[gold] - truth).mean())


def _changes(
    answers: Answers,
    gold: np.ndarray,
    truth: np.ndarray,
    eps: float,
    low: int,
    high: int,
    d: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    base = _mae(answers, gold, truth)
    out = {"mae_original": base}
    for name in MECHANISMS:
        mech = _mechanism(name, eps, low, high, answers.n_tasks, d)
        out[name] = _mae(mech.perturb(answers, rng=rng), gold, truth) - base
    return out


def run(
    trials: int = 5,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
    sparsities: tuple[float, ...] = SPARSITIES,
    size: tuple[int, int] = (2000, 200),
    d: int = 10,
    progress: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Figs 2-3 on synthetic data (``size`` workers x tasks): MAE change against epsilon at
    sparsity 0.9 and 0.5, and against sparsity at epsilon 0.1 and 1."""
    if not isinstance(trials, int) or trials < 2:
        raise ValidationError(f"trials must be an int >= 2. Got {trials!r}.")
    start = time.perf_counter()
    cells = [("vs_epsilon", s, e) for s in (0.9, 0.5) for e in epsilons]
    cells += [("vs_sparsity", s, e) for e in (0.1, 1.0) for s in sparsities]
    rows = []
    root = np.random.SeedSequence(seed)
    for (figure, sparsity, eps), cell_seed in zip(cells, root.spawn(len(cells)), strict=True):
        results = []
        for s in cell_seed.spawn(trials):
            rng = np.random.default_rng(s)
            answers, mu = synthetic(size[0], size[1], sparsity, rng)
            results.append(_changes(answers, np.arange(size[1]), mu, eps, 0, 9, d, rng))
        frame = pd.DataFrame(results)
        row: dict[str, Any] = {"figure": figure, "sparsity": sparsity, "epsilon": eps}
        for col in frame.columns:
            row[col] = float(frame[col].mean())
            if col in MECHANISMS:
                row[f"{col}_se"] = float(frame[col].std(ddof=1) / math.sqrt(trials))
        rows.append(row)
        if progress is not None:
            progress(trials)
    facts = {
        "trials": trials,
        "seed": seed,
        "size": list(size),
        "d": d,
        "inference": "P3 Algorithm 1 (SPEC A9, method 'sigma')",
        "seconds": round(time.perf_counter() - start, 2),
    }
    return pd.DataFrame(rows), facts


def real(
    names: tuple[str, ...] = ("web", "adult_content"),
    trials: int = 5,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
    d: int = 10,
) -> pd.DataFrame:
    """Figs 4-5 stand-ins on the bundled Web and AdultContent (their score domains: 1..5 and
    0..3); answers are treated as numbers, as P3 does."""
    rows = []
    root = np.random.SeedSequence(seed)
    cells = [(n, e) for n in names for e in epsilons]
    for (name, eps), cell_seed in zip(cells, root.spawn(len(cells)), strict=True):
        data = datasets.load(name)
        labels = data.answers.labels
        assert labels is not None
        values = np.asarray(labels, dtype=float)[data.answers.value]
        answers = Answers(
            data.answers.task,
            data.answers.worker,
            values,
            data.answers.tasks,
            data.answers.workers,
        )
        gold = answers.encode_tasks(data.truth.index, "truth")
        truth = data.truth.to_numpy(dtype=float)
        low, high = int(values.min()), int(values.max())
        results = [
            _changes(answers, gold, truth, eps, low, high, d, np.random.default_rng(s))
            for s in cell_seed.spawn(trials)
        ]
        frame = pd.DataFrame(results)
        rows.append({"dataset": name, "epsilon": eps, **frame.mean().to_dict()})
    return pd.DataFrame(rows)
