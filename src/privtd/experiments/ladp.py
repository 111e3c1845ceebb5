"""P4 (Wang & Xu, local attribute DP): private Dawid-Skene against private majority vote.

P4 has no experiments; these are synthetic tests of its theory plus the binary real
datasets: every user answers every task, perturbs each answer with binary randomized response
at epsilon, and the server runs private majority vote (ties count as 1, P4 Eq. 33) or private
Dawid-Skene (P4 Algorithm 1). Beside them, privtd's perturbation-aware models told the mechanism:
one-coin (``aware``) and Dawid-Skene (``aware_ds``).
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
from ..inference import AwareDawidSkene, AwareOneCoin, PrivateDawidSkene
from ..mechanisms import BinaryRR

EPSILONS = (0.5, 1.0, 2.0, 4.0)
THEOREM4_EPSILON = math.log(85 / 15)  # private MV provably worse above this (P4 Theorem 4)


def expert_spammer_abilities(n: int, delta: float = 0.4) -> np.ndarray:
    """P4 Theorem 4's instance: ``ceil(n^delta)`` experts (ability 1), the rest spammers (1/2)."""
    experts = math.ceil(n**delta)
    return np.r_[np.ones(experts), np.full(n - experts, 0.5)]


def private_majority(answers: Answers) -> np.ndarray:
    """``1(sum of perturbed answers >= n_q / 2)`` per task: ties go to 1 (P4 Eq. 33)."""
    ones = np.bincount(answers.task, weights=answers.value, minlength=answers.n_tasks)
    return (ones >= answers.task_counts() / 2).astype(np.int64)


def _aware_codes(mech: BinaryRR, perturbed: Answers) -> tuple[np.ndarray, np.ndarray]:
    """The truths of the aware one-coin and the aware Dawid-Skene model."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return (
            # By MAP, as the paper's error rate is read.
            AwareOneCoin(mech, decision="map").fit(perturbed)._truth_codes,
            AwareDawidSkene(mech, decision="map").fit(perturbed)._truth_codes,
        )


def _trial(
    abilities: np.ndarray, m: int, eps: float, seed: np.random.SeedSequence
) -> tuple[float, float, float, float, float]:
    rng = np.random.default_rng(seed)
    answers, truth, _ = datasets.make_categorical(
        m, abilities.size, 2, answers_per_task=None, accuracy=abilities, rng=rng
    )
    mech = BinaryRR.from_epsilon(eps)
    perturbed = mech.perturb(answers, rng=rng)
    y = truth.to_numpy()
    pds = PrivateDawidSkene(epsilon=eps)
    with warnings.catch_warnings():  # P4 runs a fixed T = 50 steps; not converging is expected
        warnings.simplefilter("ignore", ConvergenceWarning)
        pds.fit(perturbed)
    ability_error = float(np.abs(pds.weights_["ability_rescaled"].to_numpy() - abilities).max())
    aware, aware_ds = _aware_codes(mech, perturbed)
    return (
        float((private_majority(perturbed) != y).mean()),
        float((pds._truth_codes != y).mean()),
        ability_error,
        float((aware != y).mean()),
        float((aware_ds != y).mean()),
    )


def run(
    trials: int = 100,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
    users: tuple[int, ...] = (20, 50),
    tasks: int = 2000,
    progress: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Error of private MV and private DS, and private DS's ability error against P4 Theorem 3's
    bound ``6 sqrt(log m / (m eps^2))`` (stated for eps <= 1), per setting, n and epsilon."""
    if not isinstance(trials, int) or trials < 2:
        raise ValidationError(f"trials must be an int >= 2. Got {trials!r}.")
    start = time.perf_counter()
    root = np.random.SeedSequence(seed)
    rows = []
    settings = ("theorem4", "uniform")
    cells = [(s, n, e) for s in settings for n in users for e in epsilons]
    for (setting, n, eps), cell_seed in zip(cells, root.spawn(len(cells)), strict=True):
        ability_rng = np.random.default_rng(cell_seed.spawn(1)[0])
        if setting == "theorem4":
            abilities = expert_spammer_abilities(n)
        else:
            abilities = ability_rng.uniform(0.5, 1.0, n)
        out = np.array([_trial(abilities, tasks, eps, s) for s in cell_seed.spawn(trials)])
        se = out.std(axis=0, ddof=1) / math.sqrt(trials)
        rows.append(
            {
                "setting": setting,
                "n": n,
                "m": tasks,
                "epsilon": eps,
                "private_mv": out[:, 0].mean(),
                "private_mv_se": se[0],
                "private_ds": out[:, 1].mean(),
                "private_ds_se": se[1],
                "aware": out[:, 3].mean(),
                "aware_se": se[3],
                "aware_ds": out[:, 4].mean(),
                "aware_ds_se": se[4],
                "ability_error": out[:, 2].mean(),
                "theorem3_bound": 6 * math.sqrt(math.log(tasks) / (tasks * eps**2)),
            }
        )
        if progress is not None:
            progress(trials)
    facts = {
        "trials": trials,
        "seed": seed,
        "epsilons": list(epsilons),
        "users": list(users),
        "tasks": tasks,
        "theorem4_epsilon": THEOREM4_EPSILON,
        "seconds": round(time.perf_counter() - start, 2),
    }
    return pd.DataFrame(rows), facts


def real(
    names: tuple[str, ...] = ("duchenne", "sentiment"),
    trials: int = 20,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
) -> pd.DataFrame:
    """Private MV, private DS and the aware model on the binary real datasets (error against
    the truth)."""
    rows = []
    root = np.random.SeedSequence(seed)
    cells = [(name, e) for name in names for e in epsilons]
    for (name, eps), cell_seed in zip(cells, root.spawn(len(cells)), strict=True):
        data = datasets.load(name)
        gold = data.answers.encode_tasks(data.truth.index, "truth")
        y = data.answers.encode_labels(pd.Index(data.truth.to_numpy()), "truth")
        mv_err, ds_err, aware_err, aware_ds_err = [], [], [], []
        mech = BinaryRR.from_epsilon(eps)
        for s in cell_seed.spawn(trials):
            perturbed = mech.perturb(data.answers, rng=np.random.default_rng(s))
            mv_err.append((private_majority(perturbed)[gold] != y).mean())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                codes = PrivateDawidSkene(epsilon=eps).fit(perturbed)._truth_codes
            ds_err.append((codes[gold] != y).mean())
            aware, aware_ds = _aware_codes(mech, perturbed)
            aware_err.append((aware[gold] != y).mean())
            aware_ds_err.append((aware_ds[gold] != y).mean())
        rows.append(
            {
                "dataset": name,
                "epsilon": eps,
                "private_mv": float(np.mean(mv_err)),
                "private_mv_se": float(np.std(mv_err, ddof=1) / math.sqrt(trials)),
                "private_ds": float(np.mean(ds_err)),
                "private_ds_se": float(np.std(ds_err, ddof=1) / math.sqrt(trials)),
                "aware": float(np.mean(aware_err)),
                "aware_se": float(np.std(aware_err, ddof=1) / math.sqrt(trials)),
                "aware_ds": float(np.mean(aware_ds_err)),
                "aware_ds_se": float(np.std(aware_ds_err, ddof=1) / math.sqrt(trials)),
            }
        )
    return pd.DataFrame(rows)


def figures(out: Any, table: pd.DataFrame, setting: str = "") -> list[Any]:
    """Error of private MV, private DS and the aware models against epsilon, and private DS's
    ability error against Theorem 3's bound, one panel per (setting, n); ``setting`` (trials,
    seed) ends each figure's title."""
    from .report import plot_panels

    made = [
        plot_panels(
            out,
            table,
            ["setting", "n"],
            "epsilon",
            ["private_mv", "private_ds", "aware", "aware_ds"],
            "error rate",
            "error_vs_epsilon.png",
            f"P4: binary randomized response, synthetic users x tasks ({setting})",
        ),
        plot_panels(
            out,
            table,
            ["setting", "n"],
            "epsilon",
            ["ability_error", "theorem3_bound"],
            "ability error",
            "ability_vs_bound.png",
            f"P4 Theorem 3: private Dawid-Skene's ability error ({setting})",
        ),
    ]
    return [p for p in made if p is not None]
