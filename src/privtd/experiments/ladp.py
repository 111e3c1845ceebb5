"""P4 (Wang & Xu, local attribute DP): private Dawid-Skene against private majority vote.

P4 has no experiments; these are synthetic tests of its theory plus the binary real
datasets: every user answers every task, perturbs each answer with binary randomized response
at epsilon, and the server runs private majority vote (ties count as 1, P4 Eq. 33) or private
Dawid-Skene (P4 Algorithm 1). Beside them, privtd's perturbation-aware models told the mechanism:
one-coin (``aware``) and Dawid-Skene (``aware_ds``).

Beside each error rate (P4's metric), the method's balanced accuracy (``{method}_bacc``: the mean
of the per-class recalls) and the majority-class baseline: the error and balanced accuracy of
labelling every task the truths' majority class (``majority_error``, ``majority_bacc``), which a
low error on skewed classes may owe more to than to the answers.
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
from ..evaluation import balanced_accuracy, confusions
from ..inference import AwareDawidSkene, AwareOneCoin, PrivateDawidSkene
from ..mechanisms import BinaryRR

EPSILONS = (0.5, 1.0, 2.0, 4.0)
THEOREM4_EPSILON = math.log(85 / 15)  # private MV provably worse above this (P4 Theorem 4)
#: The columns scored per trial, in order: each method's error and balanced accuracy.
METHODS = ("private_mv", "private_ds", "aware", "aware_ds")


def scores(codes: np.ndarray, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Error rate and balanced accuracy (privtd.evaluate's) of each row of binary codes against
    the true codes, and those of the majority-class baseline (labelling every task the truths'
    majority class, the first on a tie), from one bincount."""
    majority = int(np.argmax(np.bincount(truth, minlength=2)))
    rows = np.vstack([codes, np.full((1, truth.size), majority)])
    bacc = balanced_accuracy(confusions(rows, truth, 2))
    error = (rows != truth[None, :]).mean(axis=1)
    return {"error": error[:-1], "bacc": bacc[:-1], "majority": np.r_[error[-1], bacc[-1]]}


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


def _trial(abilities: np.ndarray, m: int, eps: float, seed: np.random.SeedSequence) -> np.ndarray:
    """Errors of private MV, private DS, private DS's ability error, the aware models' errors;
    then the four methods' balanced accuracies, and the majority class's error and balanced
    accuracy."""
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
    got = scores(np.vstack([private_majority(perturbed), pds._truth_codes, aware, aware_ds]), y)
    error = got["error"]
    return np.r_[error[:2], ability_error, error[2:], got["bacc"], got["majority"]]


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
                **{
                    key: value
                    for i, name in enumerate(METHODS)
                    for key, value in (
                        (f"{name}_bacc", out[:, 5 + i].mean()),
                        (f"{name}_bacc_se", se[5 + i]),
                    )
                },
                "majority_error": out[:, 9].mean(),
                "majority_bacc": out[:, 10].mean(),
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
    """Private MV, private DS and the aware models on the binary real datasets: error against
    the truth (P4's metric), and beside it balanced accuracy and the majority-class baseline."""
    rows = []
    root = np.random.SeedSequence(seed)
    cells = [(name, e) for name in names for e in epsilons]
    for (name, eps), cell_seed in zip(cells, root.spawn(len(cells)), strict=True):
        data = datasets.load(name)
        gold = data.answers.encode_tasks(data.truth.index, "truth")
        y = data.answers.encode_labels(pd.Index(data.truth.to_numpy()), "truth")
        mech = BinaryRR.from_epsilon(eps)
        codes = []  # per trial, one row of gold-task codes per method, in METHODS' order
        for s in cell_seed.spawn(trials):
            perturbed = mech.perturb(data.answers, rng=np.random.default_rng(s))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                ds = PrivateDawidSkene(epsilon=eps).fit(perturbed)._truth_codes
            aware, aware_ds = _aware_codes(mech, perturbed)
            codes.append(np.vstack([private_majority(perturbed), ds, aware, aware_ds])[:, gold])
        # trials x methods rows scored at once: row t * len(METHODS) + j is trial t, method j.
        got = scores(np.concatenate(codes), np.asarray(y))
        error = got["error"].reshape(trials, len(METHODS))
        bacc = got["bacc"].reshape(trials, len(METHODS))
        row: dict[str, Any] = {"dataset": name, "epsilon": eps}
        for j, method in enumerate(METHODS):
            row[method] = float(error[:, j].mean())
            row[f"{method}_se"] = float(error[:, j].std(ddof=1) / math.sqrt(trials))
        for j, method in enumerate(METHODS):
            row[f"{method}_bacc"] = float(bacc[:, j].mean())
            row[f"{method}_bacc_se"] = float(bacc[:, j].std(ddof=1) / math.sqrt(trials))
        row["majority_error"], row["majority_bacc"] = (float(v) for v in got["majority"])
        rows.append(row)
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
