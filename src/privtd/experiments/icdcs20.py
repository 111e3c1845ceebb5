"""P1 (ICDCS 2020), the synthetic study (Section 5): each user draws a noise variance from an
exponential with rate lambda2 = lambda1 / c and adds Gaussian noise of that variance to every
claim; truth discovery runs on the perturbed claims. Utility is the MAE between the aggregates
on original and on perturbed claims (not against ground truth), as in the paper.

Every row also states what a user gets under one variance draw: ``epsilon_report`` is P1's axis,
one report alone; ``given_others`` is one report given the user's other reports and ``release``
its whole release (docs/privacy.md), at the row's per-report epsilon.

Every row also fits :class:`~privtd.inference.AwareGaussian`, told the mechanism, on the same
perturbed claims: its MAE against the ground truth (``mae_truth_aware``, next to the paper's
method's ``mae_truth``) and the paper's metric for it (its aggregate on perturbed claims against
its own aggregate on the original ones, ``mae_aware``).
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from .. import datasets
from ..errors import ConvergenceWarning, ValidationError
from ..inference import CRH, GTM, AwareGaussian, Estimator
from ..mechanisms import ExpGaussian

NOISE_LEVELS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


def lemma47_sensitivity(error_rate: float, beta1: float = 0.05, beta2: float = 0.05) -> float:
    """P1's Lemma 4.7, derived (docs/algorithms.md#exp-gaussian-derived-results): with
    probability (1 - beta1)(1 - beta2) two claims of a user differ by at most
    ``2 sqrt(ln(1/beta1) ln(2/beta2) / lambda1)``."""
    return 2 * math.sqrt(math.log(1 / beta1) * math.log(2 / beta2) / error_rate)


@functools.lru_cache(maxsize=64)
def _user_figures(epsilon: float, k: int) -> tuple[float, float]:
    """(one report given the other ``k - 1``, the whole release of ``k``) of the exp-Gaussian
    mechanism whose exact per-report epsilon is ``epsilon``, on privtd's default grid of 1,024
    steps across the sensitivity. The figures depend on the epsilon, the grid's resolution and
    ``k`` alone (not the range's units), so one computation serves every lambda1 of a noise
    level; finer grids give larger figures (docs/privacy.md)."""
    mech = ExpGaussian.from_epsilon(epsilon, 0.0, 1.0)
    return mech.answer_epsilon(k), mech.release_epsilon(k)


def _fit(make: Callable[[], Estimator], answers: Any) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return np.asarray(make().fit(answers).truths_.to_numpy(), dtype=float)


def _setting(
    users: int,
    objects: int,
    error_rate: float,
    noise_level: float,
    trials: int,
    seed: np.random.SeedSequence,
    method: Callable[[], Estimator],
) -> dict[str, float]:
    rate = error_rate / noise_level
    mae, noise, seconds = np.empty(trials), np.empty(trials), np.empty(trials)
    seconds_original = np.empty(trials)
    mae_truth, mae_truth_aware, mae_aware = np.empty(trials), np.empty(trials), np.empty(trials)
    seconds_aware = np.empty(trials)
    for k, s in enumerate(seed.spawn(trials)):
        rng = np.random.default_rng(s)
        answers, truth, _ = datasets.make_numeric(objects, users, error_rate=error_rate, rng=rng)
        # The declared range only has to contain the claims; the epsilon reported below uses
        # P1's own sensitivity (Lemma 4.7-D), not this range.
        mech = ExpGaussian(rate, float(answers.value.min()), float(answers.value.max()))
        perturbed = mech.perturb(answers, rng=rng)
        start = time.perf_counter()
        after = _fit(method, perturbed)
        seconds[k] = time.perf_counter() - start
        start = time.perf_counter()
        before = _fit(method, answers)
        seconds_original[k] = time.perf_counter() - start
        start = time.perf_counter()
        aware = _fit(partial(AwareGaussian, mech), perturbed)
        seconds_aware[k] = time.perf_counter() - start
        aware_before = _fit(AwareGaussian, answers)
        mae[k] = np.abs(after - before).mean()
        mae_truth[k] = np.abs(after - truth.to_numpy()).mean()
        mae_truth_aware[k] = np.abs(aware - truth.to_numpy()).mean()
        mae_aware[k] = np.abs(aware - aware_before).mean()
        noise[k] = np.abs(perturbed.value - answers.value).mean()
    delta = lemma47_sensitivity(error_rate)
    g = (noise_level - 1) / math.log(noise_level) if noise_level != 1 else 1.0
    epsilon = delta * math.sqrt(2 * rate)
    # Every user reports on every object under its one variance draw. The epsilon is rounded
    # so that the lambda1 settings of a noise level, equal but for float error, share a cache.
    counts = answers.worker_counts()
    given_others, release = _user_figures(round(epsilon, 9), int(np.median(counts)))
    return {
        "users": users,
        "error_rate": error_rate,
        "noise_level": noise_level,
        "noise_rate": rate,
        "epsilon_report": epsilon,
        "given_others": given_others,
        "release": release,
        "release_largest": _user_figures(round(epsilon, 9), int(counts.max()))[1],
        "avg_noise": float(noise.mean()),
        "avg_noise_theory": 1 / math.sqrt(2 * rate),
        "mae": float(mae.mean()),
        "mae_se": float(mae.std(ddof=1) / math.sqrt(trials)),
        "mae_theory": math.sqrt(2 * g / (math.pi * users * error_rate)),
        "mae_aware": float(mae_aware.mean()),
        "mae_truth": float(mae_truth.mean()),
        "mae_truth_aware": float(mae_truth_aware.mean()),
        "mae_truth_gain_se": float((mae_truth - mae_truth_aware).std(ddof=1) / math.sqrt(trials)),
        "seconds_per_fit": float(seconds.mean()),
        "seconds_original": float(seconds_original.mean()),
        "seconds_aware": float(seconds_aware.mean()),
    }


def run(
    trials: int = 50,
    seed: int = 0,
    noise_levels: tuple[float, ...] = NOISE_LEVELS,
    objects: int = 30,
    progress: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Figures 2-5: MAE and average noise against the noise level with CRH (S = 150, lambda1 =
    1), the effect of lambda1 (0.5, 1, 2), of the number of users (50, 100, 150, 300), and GTM in
    place of CRH. ``epsilon_report`` is the exact per-report epsilon ``Delta sqrt(2 lambda2)``
    with Delta from Lemma 4.7-D, privtd's replacement for P1's Lemma 4.7 (both derived:
    docs/algorithms.md#exp-gaussian-derived-results)."""
    if not isinstance(trials, int) or trials < 2:
        raise ValidationError(f"trials must be an int >= 2. Got {trials!r}.")
    start = time.perf_counter()
    plan: list[tuple[str, int, float, Callable[[], Estimator]]] = []
    plan += [("fig2_crh", 150, 1.0, CRH)]
    plan += [("fig3_lambda1", 150, lam, CRH) for lam in (0.5, 2.0)]
    plan += [("fig4_users", s, 1.0, CRH) for s in (50, 100, 300)]
    plan += [("fig5_gtm", 150, 1.0, GTM)]
    # Load every compiled kernel before the clock runs, so Fig. 8 times fits, not loading.
    warm, _, _ = datasets.make_numeric(5, 5, rng=0)
    for make in (CRH, GTM, AwareGaussian):
        _fit(make, warm)
    root = np.random.SeedSequence(seed)
    rows = []
    cells = [(p, c) for p in plan for c in noise_levels]
    for ((figure, users, lam, method), c), cell_seed in zip(
        cells, root.spawn(len(cells)), strict=True
    ):
        row = _setting(users, objects, lam, c, trials, cell_seed, method)
        rows.append({"figure": figure, **row})
        if progress is not None:
            progress(trials)
    facts = {
        "trials": trials,
        "seed": seed,
        "objects": objects,
        "truths": "U(0, 10)",
        "noise_levels": list(noise_levels),
        "epsilon": "per report, Delta sqrt(2 lambda2), Delta from Lemma 4.7-D "
        "(beta1 = beta2 = 0.05); derived",
        "reports_per_user": {"median": objects, "largest": objects},
        "privacy": "epsilon_report is the paper's axis: one report alone, the user's variance "
        "marginalised; given_others is one report given the user's other reports and release "
        "the user's whole release (release_largest: the largest user's), per user, under one "
        "variance draw, exact at epsilon_report on a 1,024-step grid across Delta "
        "(docs/privacy.md)",
        "seconds": round(time.perf_counter() - start, 2),
    }
    return pd.DataFrame(rows), facts


def real(
    dataset: str = "emotion",
    epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0),
    trials: int = 20,
    seed: int = 0,
) -> pd.DataFrame:
    """The same trade-off on a bundled numeric dataset (standing in for P1's private floor-plan
    data): exact per-report epsilon over the declared answer range, average noise, and the MAE
    between CRH's aggregates on original and perturbed answers, and both against the truth; the
    perturbation-aware estimator's MAE against the truth on the same perturbed answers; and what
    a worker gets under one variance draw: one report given its other reports
    (``given_others``) and its whole release (``release``) at the median worker's report count,
    and the largest worker's release (``release_largest``). Beside the MAEs against the truth,
    the trivial baseline's: one number for every task, the median of the original answers
    (``baseline_mae``) and of the perturbed ones (``baseline_mae_perturbed``), the guess a
    requester can make without any model."""
    data = datasets.load(dataset)
    answers = data.answers
    counts = answers.worker_counts()
    k_median, k_largest = int(np.median(counts)), int(counts.max())
    low, high = float(answers.value.min()), float(answers.value.max())
    gold = answers.encode_tasks(data.truth.index, "truth")
    truth = data.truth.to_numpy(dtype=float)
    before = _fit(CRH, answers)
    rows = []
    root = np.random.SeedSequence(seed)
    for eps, cell_seed in zip(epsilons, root.spawn(len(epsilons)), strict=True):
        mech = ExpGaussian.from_epsilon(eps, low, high)
        mae, noise, mae_truth, mae_truth_aware, median_mae = [], [], [], [], []
        for s in cell_seed.spawn(trials):
            perturbed = mech.perturb(answers, rng=np.random.default_rng(s))
            after = _fit(CRH, perturbed)
            aware = _fit(partial(AwareGaussian, mech), perturbed)
            mae.append(np.abs(after - before).mean())
            noise.append(np.abs(perturbed.value - answers.value).mean())
            mae_truth.append(np.abs(after[gold] - truth).mean())
            mae_truth_aware.append(np.abs(aware[gold] - truth).mean())
            median_mae.append(np.abs(np.median(perturbed.value) - truth).mean())
        rows.append(
            {
                "dataset": dataset,
                "epsilon": eps,
                "given_others": mech.answer_epsilon(k_median),
                "release": mech.release_epsilon(k_median),
                "release_largest": mech.release_epsilon(k_largest),
                "noise_rate": mech.rate,
                "avg_noise": float(np.mean(noise)),
                "mae_vs_original": float(np.mean(mae)),
                "mae_vs_truth": float(np.mean(mae_truth)),
                "mae_vs_truth_se": float(np.std(mae_truth, ddof=1) / math.sqrt(len(mae_truth))),
                "mae_vs_truth_clean": float(np.abs(before[gold] - truth).mean()),
                "mae_vs_truth_aware": float(np.mean(mae_truth_aware)),
                "mae_vs_truth_aware_se": float(
                    np.std(mae_truth_aware, ddof=1) / math.sqrt(len(mae_truth_aware))
                ),
                "baseline_mae": float(np.abs(np.median(answers.value) - truth).mean()),
                "baseline_mae_perturbed": float(np.mean(median_mae)),
            }
        )
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """The table's printable view: the paper's axis and metric per setting, and what a user
    gets under one variance draw at the row's epsilon (one report given its other reports; its
    whole release). ``table.md`` keeps every column."""
    return table[
        [
            "figure",
            "users",
            "error_rate",
            "noise_level",
            "epsilon_report",
            "given_others",
            "release",
            "avg_noise",
            "mae",
            "mae_theory",
        ]
    ]


def figures(out: Any, table: pd.DataFrame, setting: str = "") -> list[Any]:
    """P1's Figs 2-5 (MAE against the noise level, one series per lambda1 or number of users),
    Fig 8 (running time on original and perturbed claims against the noise level), and, per
    setting, the paper's method and the perturbation-aware estimator against the truth.
    ``setting`` (trials, seed) ends each figure's title."""
    from .report import plot_panels

    wide = []
    for figure, part in table.groupby("figure", sort=False):
        if figure == "fig3_lambda1":
            series = part.error_rate.map(lambda v: f"lambda1={v:g}")
        elif figure == "fig4_users":
            series = part.users.map(lambda v: f"users={v}")
        else:
            series = pd.Series("mae", index=part.index)
        for label, rows in part.groupby(series, sort=False):
            for _, row in rows.iterrows():
                wide.append({"panel": figure, "noise_level": row.noise_level, str(label): row.mae})
    frame = pd.DataFrame(wide).groupby(["panel", "noise_level"], sort=False).first().reset_index()
    cols = [c for c in frame.columns if c not in ("panel", "noise_level")]
    timing = (
        table[table.figure == "fig2_crh"]
        .assign(panel="fig8_time")
        .rename(columns={"seconds_original": "original", "seconds_per_fit": "perturbed"})
    )
    made = [
        plot_panels(
            out,
            frame,
            ["panel"],
            "noise_level",
            cols,
            "MAE, perturbed against original aggregates",
            "figs2to5_mae.png",
            f"P1 Figs 2-5: CRH on synthetic claims with exp-Gaussian noise ({setting})",
        ),
        plot_panels(
            out,
            timing,
            ["panel"],
            "noise_level",
            ["original", "perturbed"],
            "seconds per CRH fit",
            "fig8_time.png",
            f"P1 Fig 8: CRH running time, synthetic claims, exp-Gaussian noise ({setting})",
        ),
    ]
    if "mae_truth_aware" in table:
        against = table.assign(
            panel=table.figure
            + " S="
            + table.users.astype(str)
            + " l1="
            + table.error_rate.map(str)
        )
        made.append(
            plot_panels(
                out,
                against,
                ["panel"],
                "noise_level",
                ["mae_truth", "mae_truth_aware"],
                "MAE against the truth",
                "aware_vs_truth.png",
                f"CRH/GTM and AwareGaussian against the ground truth, exp-Gaussian ({setting})",
            )
        )
    return [p for p in made if p is not None]
