"""P3 (BigData 2018, Section VI): MAE change of truth inference (Algorithm 1) when
workers perturb sparse answers with LP, RR, MF or the two-layer adaptation.

MAE change = MAE of the truths inferred from perturbed answers minus that from the original
answers, both against the ground truth.

The epsilon axis is P3's: each mechanism calibrated per cell, two-layer by its mean budget. Every
row also states what a worker's row of cells gets under two-layer, whose cells share one private
budget (docs/privacy.md): ``two_layer_marginal`` (one cell alone, the budget marginalised),
``two_layer_given_others`` (one cell given the row's other cells), ``two_layer_release`` (the
whole row) and ``two_layer_composed`` (the row by sequential composition of the marginal).
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
from ..inference import AwareNull, WeightedAverage
from ..mechanisms import KRRNull, LaplaceNull, MFPerturbation, TwoLayerNull, task_profiles
from ..mechanisms._base import Mechanism

EPSILONS = (0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)
SPARSITIES = (0.1, 0.3, 0.5, 0.7, 0.9)
MECHANISMS = ("lp", "rr", "mf", "two_layer")
#: privtd's NULL-aware deconvolution (AwareNull) on the RR and two-layer releases: the same
#: perturbed answers as those columns, told the mechanism.
AWARE = ("aware_rr", "aware_two_layer")
COLUMNS = MECHANISMS + AWARE


def synthetic(
    n_workers: int, n_tasks: int, sparsity: float, rng: np.random.Generator
) -> tuple[Answers, np.ndarray]:
    """P3 Sec. VI: truths N(0, 1); half the workers have error sd 1, half 5; answers rounded and
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
        # P3's calibration, scale |Gamma| / eps (its figures' noise); exactly
        # (|Gamma| - 1) / |Gamma| of eps on the integer grid.
        return LaplaceNull((high - low + 1) / eps, low, high)
    if name == "rr":
        return KRRNull.from_epsilon(eps, low, high)
    if name == "two_layer":
        return TwoLayerNull.from_epsilon(eps, low, high)
    return MFPerturbation.from_epsilon(eps, task_profiles(n_tasks, d, rng=0), low, high)


def _two_layer_figures(eps: float, low: int, high: int, cells: int) -> dict[str, float]:
    """Two-layer's figures at stated ``eps`` for a worker's row of ``cells`` cells (every worker
    releases a cell per task, NULL or not, so every row has the same length)."""
    mech = TwoLayerNull.from_epsilon(eps, low, high)
    return {
        "two_layer_marginal": mech.epsilon,
        "two_layer_given_others": mech.answer_epsilon(cells),
        "two_layer_release": mech.release_epsilon(cells),
        "two_layer_composed": cells * mech.epsilon,
    }


def _infer(
    answers: Answers,
    gold: np.ndarray,
    mechanism: Mechanism | None = None,
    estimate: str = "map",
) -> np.ndarray:
    """P3's Algorithm 1, or with ``mechanism`` the NULL-aware deconvolution of its release."""
    estimator = WeightedAverage() if mechanism is None else AwareNull(mechanism, estimate=estimate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(answers).truths_.to_numpy(dtype=float)[gold]


def _changes(
    answers: Answers,
    gold: np.ndarray,
    truth: np.ndarray,
    eps: float,
    low: int,
    high: int,
    d: int,
    rng: np.random.Generator,
    means: bool = False,
    estimate: str = "map",
) -> dict[str, float]:
    """MAE changes; with ``means``, also the mean inferred truth (P3 Sec. VI's fifth trend)."""
    inferred = _infer(answers, gold)
    base = float(np.abs(inferred - truth).mean())
    out = {"mae_original": base}
    if means:
        out["mean_original"] = float(inferred.mean())
    for name in MECHANISMS:
        mech = _mechanism(name, eps, low, high, answers.n_tasks, d)
        released = mech.perturb(answers, rng=rng)
        inferred = _infer(released, gold)
        out[name] = float(np.abs(inferred - truth).mean()) - base
        if means:
            out[f"mean_{name}"] = float(inferred.mean())
        if f"aware_{name}" in AWARE:
            inferred = _infer(released, gold, mech, estimate)
            out[f"aware_{name}"] = float(np.abs(inferred - truth).mean()) - base
    return out


def run(
    trials: int = 5,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
    sparsities: tuple[float, ...] = SPARSITIES,
    size: tuple[int, int] = (2000, 200),
    d: int = 10,
    progress: Callable[[int], None] | None = None,
    figures: tuple[str, ...] = ("vs_epsilon", "vs_sparsity"),
    aware_estimate: str = "map",
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Figs 2-3 on synthetic data (``size`` workers x tasks): MAE change against epsilon at
    sparsity 0.9 and 0.5, and against sparsity at epsilon 0.1 and 1. P3's Fig 4 is the second
    at 10,000 x 1,000: ``size=(10_000, 1000), figures=("vs_sparsity",)``. ``aware_estimate``:
    AwareNull's ``estimate`` for the aware columns."""
    if not isinstance(trials, int) or trials < 2:
        raise ValidationError(f"trials must be an int >= 2. Got {trials!r}.")
    start = time.perf_counter()
    cells = []
    if "vs_epsilon" in figures:
        cells += [("vs_epsilon", s, e) for s in (0.9, 0.5) for e in epsilons]
    if "vs_sparsity" in figures:
        cells += [("vs_sparsity", s, e) for e in (0.1, 1.0) for s in sparsities]
    rows = []
    root = np.random.SeedSequence(seed)
    for (figure, sparsity, eps), cell_seed in zip(cells, root.spawn(len(cells)), strict=True):
        results = []
        for s in cell_seed.spawn(trials):
            rng = np.random.default_rng(s)
            answers, mu = synthetic(size[0], size[1], sparsity, rng)
            results.append(
                _changes(
                    answers, np.arange(size[1]), mu, eps, 0, 9, d, rng, estimate=aware_estimate
                )
            )
        frame = pd.DataFrame(results)
        row: dict[str, Any] = {
            "figure": figure,
            "workers": size[0],
            "tasks": size[1],
            "sparsity": sparsity,
            "epsilon": eps,
            **_two_layer_figures(eps, 0, 9, size[1]),
        }
        for col in frame.columns:
            row[col] = float(frame[col].mean())
            if col in COLUMNS:
                row[f"{col}_se"] = float(frame[col].std(ddof=1) / math.sqrt(trials))
        rows.append(row)
        if progress is not None:
            progress(trials)
    facts = {
        "trials": trials,
        "seed": seed,
        "size": list(size),
        "d": d,
        "inference": f"P3 Algorithm 1 (method 'sigma'); aware_*: AwareNull "
        f"(estimate={aware_estimate})",
        "cells_per_worker": {"median": size[1], "largest": size[1]},
        "privacy": "epsilon is the paper's axis: per cell, two-layer by its mean budget; "
        "two_layer_marginal is one cell alone (budget marginalised), two_layer_given_others "
        "one cell given the worker's other cells and two_layer_release its whole row, under one "
        "budget draw; two_layer_composed is the row by composition (docs/privacy.md)",
        "seconds": round(time.perf_counter() - start, 2),
    }
    return pd.DataFrame(rows), facts


def real(
    names: tuple[str, ...] = ("web", "adult_content"),
    trials: int = 5,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
    d: int = 10,
    aware_estimate: str = "map",
) -> pd.DataFrame:
    """Figs 4-5 stand-ins on the bundled Web and AdultContent (their score domains: 1..5 and
    0..3); answers are treated as numbers, as P3 does. The two-layer figures are those of a
    worker's row over all of the dataset's tasks. ``baseline_mae``: the MAE against the truth of
    one number for every task, the median of the original answers (the trivial baseline; a
    method does no better than it where ``mae_original`` plus its change exceeds it)."""
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
            _changes(
                answers,
                gold,
                truth,
                eps,
                low,
                high,
                d,
                np.random.default_rng(s),
                True,
                aware_estimate,
            )
            for s in cell_seed.spawn(trials)
        ]
        frame = pd.DataFrame(results)
        row = {
            "dataset": name,
            "epsilon": eps,
            "domain_mid": (low + high) / 2,
            **_two_layer_figures(eps, low, high, answers.n_tasks),
        }
        for col in frame.columns:
            row[col] = float(frame[col].mean())
            if col in COLUMNS:
                row[f"{col}_se"] = float(frame[col].std(ddof=1) / math.sqrt(trials))
        row["baseline_mae"] = float(np.abs(np.median(values) - truth).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def figures(
    out: Any, table: pd.DataFrame, real_table: pd.DataFrame | None, setting: str = ""
) -> list[Any]:
    """P3's Figs 2-3 (MAE change against epsilon, and against sparsity; Fig 4 is the second at
    10,000 x 1,000) and the real-data figure, as PNGs in ``out`` (needs the ``plot`` extra; an
    empty list without it). ``setting`` (trials, seed) ends each figure's title."""
    from .report import plot_panels

    cols = list(COLUMNS)
    large = table.get("workers", pd.Series([0])).max() > 2000
    made = []
    size = "10,000 workers x 1,000 tasks" if large else "2,000 workers x 200 tasks"
    for figure, panel, x, name, what in (
        ("vs_epsilon", "sparsity", "epsilon", "fig2_vs_epsilon.png", "P3 Fig 2"),
        (
            "vs_sparsity",
            "epsilon",
            "sparsity",
            "fig4_vs_sparsity.png" if large else "fig3_vs_sparsity.png",
            "P3 Fig 4" if large else "P3 Fig 3",
        ),
    ):
        part = table[table.figure == figure]
        if len(part):
            title = f"{what}: synthetic sparse answers, {size} ({setting})"
            made.append(plot_panels(out, part, [panel], x, cols, "MAE change", name, title))
    if real_table is not None:
        made.append(
            plot_panels(
                out,
                real_table,
                ["dataset"],
                "epsilon",
                cols,
                "MAE change",
                "real.png",
                f"P3's mechanisms on real sparse answers ({setting})",
            )
        )
    return [p for p in made if p is not None]
