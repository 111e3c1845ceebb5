"""P0's experiment (KDD 2018, Section 7, Tables 2-3): error-rate change of majority voting and
truth discovery under the one-layer and two-layer mechanisms, against epsilon.

"TD" is the signed log-odds weighted vote (docs/algorithms.md#td-means-the-signed-weighted-vote);
CRH-categorical is reported beside it, and privtd's perturbation-aware models told the mechanism:
one-coin (``aware``) and Dawid-Skene (``aware_ds``). The error-rate change of a method is its error
on perturbed answers minus its own error on the original answers, on the tasks with an expert truth,
averaged over trials; ``aware_vs_td`` and ``aware_ds_vs_td`` are an aware model's error on perturbed
answers minus TD's on the original ones, which compares it with TD on the perturbed answers alone,
and ``aware_minus_td`` and ``aware_ds_minus_td`` its error minus TD's on the same release, whose
standard error is the paired one: it says whether the two differ beyond the trials' noise.

An error rate on skewed classes can look good by labelling most tasks the majority class, so
beside the paper's metric each method's balanced accuracy (the mean of the per-class recalls)
on the perturbed answers (``{mechanism}_{method}_bacc``) and on the original ones
(``clean_{method}_bacc``) is reported, with the majority-class baseline: the error and the
balanced accuracy of labelling every task the gold's majority class (``majority_error``,
``majority_bacc``).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from .. import datasets
from ..answers import Answers
from ..errors import ConvergenceWarning, ValidationError
from ..evaluation import balanced_accuracy, confusions
from ..inference import (
    CRH,
    AwareDawidSkene,
    AwareOneCoin,
    Estimator,
    MajorityVote,
    WeightedVote,
)
from ..mechanisms import OneLayerRR, TwoLayerRR

EPSILONS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.01, 0.001, 0.0)
METHODS: dict[str, Callable[[], Estimator]] = {
    "mv": MajorityVote,
    "td": WeightedVote,
    "crh": CRH,
}
MECHANISMS: dict[str, type[OneLayerRR] | type[TwoLayerRR]] = {
    "one_layer": OneLayerRR,
    "two_layer": TwoLayerRR,
}

# P0 Table 3 (Duchenne Smile): epsilon -> 1-layer MV, TD, 2-layer MV, TD.
PAPER_TABLE3 = {
    1.0: (0.1228, 0.0735, 0.1240, 0.0560),
    0.9: (0.1296, 0.0870, 0.1337, 0.0629),
    0.8: (0.1438, 0.1104, 0.1447, 0.0709),
    0.7: (0.1459, 0.1157, 0.1564, 0.0821),
    0.6: (0.1699, 0.1321, 0.1701, 0.0906),
    0.5: (0.1784, 0.1562, 0.1738, 0.0962),
    0.4: (0.1917, 0.1769, 0.1903, 0.1081),
    0.3: (0.2126, 0.1930, 0.2133, 0.1271),
    0.2: (0.2218, 0.2016, 0.2160, 0.1379),
    0.1: (0.2335, 0.2086, 0.2248, 0.1511),
    0.01: (0.2406, 0.2150, 0.2362, 0.1742),
    0.001: (0.2414, 0.2178, 0.2426, 0.1774),
    0.0: (0.2516, 0.2277, 0.2447, 0.1793),
}


def _error(est: Estimator, gold_index: np.ndarray, gold_codes: np.ndarray) -> float:
    # Code-level comparison: no pandas inside the trial loop.
    return float((est._truth_codes[gold_index] != gold_codes).mean())


def _bacc(codes: np.ndarray, gold_codes: np.ndarray, n_labels: int = 2) -> np.ndarray:
    """Balanced accuracy of each row of inferred codes (one per trial) against the gold codes,
    with privtd.evaluate's definition, from one bincount over every trial."""
    return balanced_accuracy(confusions(codes, gold_codes, n_labels))


def majority_baseline(gold_codes: np.ndarray, n_labels: int = 2) -> dict[str, Any]:
    """Error and balanced accuracy of labelling every gold task the gold's majority class (the
    first such code on a tie): what an estimator that ignores the answers scores."""
    majority = int(np.argmax(np.bincount(gold_codes, minlength=n_labels)))
    constant = np.full(gold_codes.shape, majority)
    return {
        "code": majority,
        "error": float((constant != gold_codes).mean()),
        "balanced_accuracy": float(_bacc(constant, gold_codes, n_labels)),
    }


def _reversed(answers: Answers) -> Answers:
    """The same binary answers with the label codes swapped (label 1 first). Every method here
    gives a tie, or an all-uninformative release, to the first label, so on a dataset whose
    majority class comes first that tie-break is a prior the answers did not supply; running
    both orders shows how much of a column it is."""
    assert answers.labels is not None  # run() admits binary categorical answers only
    return Answers(
        answers.task,
        answers.worker,
        (1 - answers.value).astype(answers.value.dtype),
        answers.tasks,
        answers.workers,
        answers.labels[::-1],
        answers.value_range,
        answers.notes,
    )


def _stack(answers: Answers, trials: int) -> Answers:
    """``trials`` disjoint copies of the answers (copy k's tasks and workers offset by k), so
    one perturbation serves every trial, and one majority vote too (it treats blocks apart)."""
    n_t, n_w = answers.n_tasks, answers.n_workers
    offsets = np.arange(trials, dtype=np.int64)
    return Answers(
        task=(answers.task[None, :] + offsets[:, None] * n_t).ravel().astype(np.int32),
        worker=(answers.worker[None, :] + offsets[:, None] * n_w).ravel().astype(np.int32),
        value=np.tile(answers.value, trials),
        tasks=pd.RangeIndex(n_t * trials),
        workers=pd.RangeIndex(n_w * trials),
        labels=answers.labels,
    )


def _cell(
    answers: Answers,
    stacked: Answers,
    mech_name: str,
    eps: float,
    trials: int,
    seed: np.random.SeedSequence,
    gold_index: np.ndarray,
    gold_codes: np.ndarray,
    clean: dict[str, float],
) -> dict[str, np.ndarray]:
    """Error-rate changes over the trials of one (epsilon, mechanism) cell of the table, and
    each method's balanced accuracy on the release (``{method}_bacc``)."""
    # P0's Table 3 has an epsilon-0 row, where one-layer's answers are pure noise: on purpose.
    mech = MECHANISMS[mech_name].from_epsilon(eps, allow_uninformative=True)
    perturbed = mech.perturb(stacked, rng=np.random.default_rng(seed))
    n, n_t = answers.n_answers, answers.n_tasks
    block_gold = (np.arange(trials)[:, None] * n_t + gold_index[None, :]).ravel()
    codes = MajorityVote().fit(perturbed)._truth_codes[block_gold].reshape(trials, -1)
    changes = {"mv": (codes != gold_codes[None, :]).mean(axis=1) - clean["mv"]}
    changes["mv_bacc"] = _bacc(codes, gold_codes)
    # The weighted vote iterates to a fixed point and CRH normalises weights globally, so each
    # trial is fitted on its own (a stacked fit would run every block as long as the slowest).
    makers: dict[str, Callable[[], Estimator]] = {
        "td": METHODS["td"],
        "crh": METHODS["crh"],
        # Read by MAP, as the papers' error rate is: the balanced decision is for skewed classes.
        "aware": lambda: AwareOneCoin(mech, decision="map"),
        "aware_ds": lambda: AwareDawidSkene(mech, decision="map"),
    }
    errors_of: dict[str, np.ndarray] = {}
    for name, make in makers.items():
        with warnings.catch_warnings():
            # Near epsilon 0 two-layer reports barely fix the labels' orientation and EM can
            # creep for its 100 iterations; the trial's answer is what it reached by then.
            warnings.simplefilter("ignore", ConvergenceWarning)
            codes = np.stack(
                [
                    make()
                    .fit(answers.with_values(perturbed.value[k * n : (k + 1) * n]))
                    ._truth_codes[gold_index]
                    for k in range(trials)
                ]
            )
        errors = (codes != gold_codes[None, :]).mean(axis=1)
        errors_of[name] = errors
        changes[name] = errors - clean[name]
        changes[f"{name}_bacc"] = _bacc(codes, gold_codes)
        if name.startswith("aware"):
            changes[f"{name}_vs_td"] = errors - clean["td"]
            changes[f"{name}_minus_td"] = errors - errors_of["td"]
    return changes


_SHARED: tuple[Any, ...] = ()


def _init(*shared: Any) -> None:
    """Give a worker process (or this one) the coded answers once, not once per cell."""
    global _SHARED
    _SHARED = shared


def _init_child(*shared: Any) -> None:
    """A pool process: the cells are the parallel unit, so its compiled kernels run on one
    thread (two processes each spinning up a thread per core slowed the table down fivefold)."""
    try:
        import numba

        numba.set_num_threads(1)
    except ImportError:  # pragma: no cover - numba is an optional extra
        pass
    _init(*shared)


def _run_cell(cell: tuple[float, str], seed: np.random.SeedSequence) -> dict[str, np.ndarray]:
    answers, stacked, trials, gold_index, gold_codes, clean = _SHARED
    eps, mech = cell
    return _cell(answers, stacked, mech, eps, trials, seed, gold_index, gold_codes, clean)


def run(
    dataset: str = "duchenne",
    trials: int = 100,
    seed: int = 0,
    epsilons: tuple[float, ...] = EPSILONS,
    progress: Callable[[int], None] | None = None,
    jobs: int | None = None,
    label_order: str = "given",
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The table: one row per epsilon; per mechanism and method the mean error-rate change and
    its standard error over trials. Also returns the clean error rates and run facts.

    ``label_order="reversed"`` codes the labels the other way round (the dataset's second label
    first). With the same seed the releases are the same, answer for answer (each report is the
    other code of the same flip), so the two tables differ only by where ties go."""
    if not isinstance(trials, int) or trials < 2:
        raise ValidationError(f"trials must be an int >= 2 (for standard errors). Got {trials!r}.")
    if label_order not in ("given", "reversed"):
        raise ValidationError(f"label_order must be 'given' or 'reversed'. Got {label_order!r}.")
    data = datasets.load(dataset)
    answers, truth = data.answers, data.truth
    if answers.labels is None or answers.n_labels != 2:
        raise ValidationError(f"kdd18 needs a binary dataset; {dataset!r} is not one.")
    labels = [str(label) for label in answers.labels]
    if label_order == "reversed":
        answers = _reversed(answers)
        labels.reverse()
    gold_index = answers.encode_tasks(truth.index, "truth")
    gold_codes = answers.encode_labels(pd.Index(truth.to_numpy()), "truth")
    clean_fits: dict[str, Estimator] = {name: make().fit(answers) for name, make in METHODS.items()}
    clean_fits["aware"] = AwareOneCoin().fit(answers)
    clean_fits["aware_ds"] = AwareDawidSkene().fit(answers)
    clean = {name: _error(est, gold_index, gold_codes) for name, est in clean_fits.items()}
    clean_bacc = {
        name: float(_bacc(est._truth_codes[gold_index], gold_codes))
        for name, est in clean_fits.items()
    }
    majority = majority_baseline(gold_codes)
    start = time.perf_counter()
    stacked = _stack(answers, trials)  # coded once; every trial is a block of it
    cells = [(eps, mech) for eps in epsilons for mech in MECHANISMS]
    seeds = np.random.SeedSequence(seed).spawn(len(cells))
    results: dict[tuple[float, str], dict[str, np.ndarray]] = {}
    shared = (answers, stacked, trials, gold_index, gold_codes, clean)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(cells)))
    if jobs == 1:
        _init(*shared)
        outputs = map(_run_cell, cells, seeds)
        for cell, out in zip(cells, outputs, strict=True):
            results[cell] = out
            if progress is not None:
                progress(trials)
    else:
        # Cells are independent and seeded apart, so the table is the same for any job count.
        # Forkserver, not fork: this process may already run compiled kernels' OpenMP threads,
        # and forking a process that has them aborts the child.
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_init_child, initargs=shared
        ) as pool:
            for cell, out in zip(cells, pool.map(_run_cell, cells, seeds), strict=True):
                results[cell] = out
                if progress is not None:
                    progress(trials)
    # The paper's axis is the per-answer epsilon of one answer alone. What a worker of this
    # dataset gets under each setting, with its answers under one draw: one answer given its
    # other answers, and its whole release, at the median and the largest answer count.
    counts = answers.worker_counts()
    k_median, k_largest = int(np.median(counts)), int(counts.max())
    rows = []
    for eps in epsilons:
        row: dict[str, float] = {"epsilon": eps}
        # The same in every row, so that table.csv alone says what the columns are up against.
        row["majority_error"] = majority["error"]
        row["majority_bacc"] = majority["balanced_accuracy"]
        row |= {f"clean_{name}_bacc": value for name, value in clean_bacc.items()}
        for mech in MECHANISMS:
            for name, values in results[(eps, mech)].items():
                row[f"{mech}_{name}"] = float(values.mean())
                row[f"{mech}_{name}_se"] = float(values.std(ddof=1) / np.sqrt(trials))
            calibrated = MECHANISMS[mech].from_epsilon(eps, allow_uninformative=True)
            row[f"{mech}_given_others"] = calibrated.answer_epsilon(k_median)
            row[f"{mech}_release"] = calibrated.release_epsilon(k_median)
            row[f"{mech}_release_largest"] = calibrated.release_epsilon(k_largest)
        rows.append(row)
    facts = {
        "dataset": dataset,
        "trials": trials,
        "seed": seed,
        "label_order": label_order,
        "labels": labels,
        "epsilons": list(epsilons),
        "answers_per_worker": {"median": k_median, "largest": k_largest},
        "privacy": "epsilon is the paper's axis: one answer alone (for two-layer, marginal over "
        "the worker's f_u); given_others is one answer given the median worker's other answers "
        "and release that worker's whole release (release_largest: the largest worker's), per "
        "worker, under one draw (docs/privacy.md)",
        "clean_error": clean,
        "clean_balanced_accuracy": clean_bacc,
        "majority_baseline": {
            "label": labels[int(majority["code"])],
            "error": majority["error"],
            "balanced_accuracy": majority["balanced_accuracy"],
        },
        "n_truths": int(gold_index.size),
        "seconds": round(time.perf_counter() - start, 2),
        "jobs": jobs,
        "td": "signed log-odds weighted vote (docs/algorithms.md#weighted-vote); crh is "
        "CRH-categorical (docs/algorithms.md#crh); "
        "aware is AwareOneCoin and aware_ds AwareDawidSkene told the mechanism (clean: the same "
        "model without one)",
    }
    return pd.DataFrame(rows), facts


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """The table as printed by ``privtd reproduce kdd18``: one row per mechanism and epsilon,
    each method's mean error-rate change, the aware models on TD's footing (their error less
    TD's clean error, as in the figure), and what the median worker gets (one answer given its
    other answers, per answer; its whole release, per worker). ``table.md`` keeps every column
    and standard error; this one stays within 100 columns."""
    methods = ("mv", "td", "crh", "aware_vs_td", "aware_ds_vs_td")
    parts = [
        pd.DataFrame(
            {
                "mechanism": mech.replace("_", "-"),
                "epsilon": table["epsilon"],
                **{name: table[f"{mech}_{name}"] for name in methods},
                # The true figures of the setting (the median worker, one draw).
                **(
                    {
                        "given_others": table[f"{mech}_given_others"],
                        "release": table[f"{mech}_release"],
                    }
                    if f"{mech}_release" in table
                    else {}
                ),
            }
        )
        for mech in MECHANISMS
    ]
    return pd.concat(parts, ignore_index=True)


BACC_METHODS = ("mv", "td", "crh", "aware", "aware_ds")


def balanced_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Beside :func:`summary`, as ``privtd reproduce kdd18`` prints it: each method's balanced
    accuracy on the original answers (the ``clean`` row) and on the releases (mean over trials),
    and the majority-class baseline's, whose error is ``majority_error`` in ``table.csv``. A
    method whose error looks good but whose balanced accuracy sits near the baseline is
    labelling most tasks the majority class."""
    first = table.iloc[0]
    clean = pd.DataFrame(
        {
            "mechanism": ["none (clean)"],
            "epsilon": [""],
            **{name: [first[f"clean_{name}_bacc"]] for name in BACC_METHODS},
            "majority": [first["majority_bacc"]],
        }
    )
    parts = [clean] + [
        pd.DataFrame(
            {
                "mechanism": mech.replace("_", "-"),
                "epsilon": table["epsilon"],
                **{name: table[f"{mech}_{name}_bacc"] for name in BACC_METHODS},
                "majority": table["majority_bacc"],
            }
        )
        for mech in MECHANISMS
    ]
    return pd.concat(parts, ignore_index=True)


def compare_with_paper(table: pd.DataFrame) -> pd.DataFrame:
    """Our Duchenne figures beside P0's Table 3, with the difference per cell."""
    cols = ("one_layer_mv", "one_layer_td", "two_layer_mv", "two_layer_td")
    rows = []
    for _, r in table.iterrows():
        paper = PAPER_TABLE3.get(float(r["epsilon"]))
        if paper is None:
            continue
        row = {"epsilon": r["epsilon"]}
        for col, p in zip(cols, paper, strict=True):
            row[f"{col}_ours"] = r[col]
            row[f"{col}_paper"] = p
            row[f"{col}_diff"] = r[col] - p
        rows.append(row)
    return pd.DataFrame(rows)


def weights_before_after(
    dataset: str = "duchenne", epsilon: float = 0.5, seed: int = 0, n_workers: int = 5
) -> pd.DataFrame:
    """P0 Figure 2: truth-discovery weights of the most active workers on the original answers
    and after two-layer perturbation, with the flip probability each drew (known only to the
    simulation). A worker who drew a large ``f_u`` should lose weight.

    Beyond the paper, the same for AwareDawidSkene: each worker's observed accuracy (the share
    of its reports that match the truth, the quantity its votes are weighed by) fitted on the
    original answers (``aware_before``, no mechanism) and on the release told the mechanism
    (``aware_after``), against ``aware_expected``: the accuracy before composed with the flip
    the worker drew, ``a (1 - f_u) + (1 - a) f_u``, what the release's accuracy should be.
    ``aware_flip`` is the fit's posterior mean of the worker's flip. One worker's reports fix
    only that composition: a worse worker behind a smaller flip explains them as well."""
    answers = datasets.load(dataset).answers
    mech = TwoLayerRR.from_epsilon(epsilon)
    perturbed = mech.perturb(answers, rng=seed)
    before = WeightedVote().fit(answers).weights_
    after = WeightedVote().fit(perturbed).weights_
    aware_before = AwareDawidSkene().fit(answers).weights_["observed_accuracy"].to_numpy()
    aware = AwareDawidSkene(mech).fit(perturbed).weights_
    flips = mech.flips_for(answers, rng=seed)
    top = np.argsort(-answers.worker_counts(), kind="stable")[:n_workers]
    accuracy, f = aware_before[top], flips[top]
    return pd.DataFrame(
        {
            "worker": answers.workers[top].astype(str),
            "n_answers": answers.worker_counts()[top],
            "f_u": f,
            "weight_before": before["weight"].to_numpy()[top],
            "weight_after": after["weight"].to_numpy()[top],
            "aware_before": accuracy,
            "aware_after": aware["observed_accuracy"].to_numpy()[top],
            "aware_expected": accuracy * (1 - f) + (1 - accuracy) * f,
            "aware_flip": aware["flip"].to_numpy()[top],
        }
    )


def error_change_distribution(
    bs: tuple[float, ...] = (0.25, 0.5, 1.0),
    ns: tuple[int, ...] = (2, 3, 5),
    samples: int = 200_000,
    seed: int = 0,
) -> pd.DataFrame:
    """P0 Sec. 6.2 (docs/algorithms.md#two-layer-utility-analysis): the dominant error-change
    term ``A = prod_{u in U_imp} f_u`` with ``f_u ~ U(0, b)`` iid (two-layer) against
    one-layer's ``(b / 2)^n``. Its mean equals the one-layer value while its median is far
    smaller: a small change is likely (P0 Figure 1)."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in bs:
        for n in ns:
            a = np.prod(rng.uniform(0.0, b, size=(samples, n)), axis=1)
            rows.append(
                {
                    "b": b,
                    "n": n,
                    "one_layer": (b / 2) ** n,
                    "mean": float(a.mean()),
                    "median": float(np.median(a)),
                    "p10": float(np.quantile(a, 0.1)),
                    "p90": float(np.quantile(a, 0.9)),
                    "share_below_one_layer": float((a < (b / 2) ** n).mean()),
                }
            )
    return pd.DataFrame(rows)


def product_density(a: np.ndarray, b: float, n: int) -> np.ndarray:
    """``f_A(A) = (1 / b^n) (ln(b^n / A))^(n-1) / (n-1)!`` on ``(0, b^n]`` (P0 Sec. 6.2)."""
    a = np.asarray(a, dtype=float)
    inside = (a > 0) & (a <= b**n)
    out = np.zeros_like(a)
    out[inside] = np.log(b**n / a[inside]) ** (n - 1) / (math.factorial(n - 1) * b**n)
    return out


def figures(
    out: Any,
    table: pd.DataFrame,
    fig2: pd.DataFrame,
    dist: pd.DataFrame,
    dataset: str = "duchenne",
    setting: str = "",
) -> list[Any]:
    """Table 3 as one panel per mechanism (the aware models on TD's footing: their error on
    perturbed answers less TD's clean error), P0's Figure 2 as bars (each worker's weight before and
    after perturbation, with the flip probability it drew; beside it AwareDawidSkene's observed
    accuracies) and P0 Sec. 6.2's error-change term against the number of workers. ``dataset``
    and ``setting`` (trials, seed) go into the titles. An empty list without matplotlib."""
    from .report import have_matplotlib, save, use_agg

    if not have_matplotlib():
        return []
    use_agg()
    return [
        save(figure, out, name)
        for name, figure in figure_set(table, fig2, dist, dataset, setting).items()
    ]


def figure_set(
    table: pd.DataFrame,
    fig2: pd.DataFrame,
    dist: pd.DataFrame,
    dataset: str = "duchenne",
    setting: str = "",
) -> dict[str, Any]:
    """The figures of :func:`figures` as matplotlib Figures, by file name (needs the ``plot``
    extra)."""
    from .report import panels_figure, pyplot

    plt = pyplot()
    # On TD's footing an aware model's change compares with TD's on the release alone; on its
    # own it would also carry the gap between the two clean errors (docs/reproduction.md).
    methods = {"mv": "mv", "td": "td", "crh": "crh"}
    methods |= {"aware_vs_td": "aware-one-coin", "aware_ds_vs_td": "aware-ds"}
    panels = []
    for prefix in ("one_layer", "two_layer"):
        panel = pd.DataFrame({"mechanism": prefix.replace("_", "-"), "epsilon": table["epsilon"]})
        for col, name in methods.items():
            panel[name] = table[f"{prefix}_{col}"]
            panel[f"{name}_se"] = table[f"{prefix}_{col}_se"]
        panels.append(panel)
    made = {
        "table.png": panels_figure(
            pd.concat(panels),
            ["mechanism"],
            "epsilon",
            list(methods.values()),
            "error-rate change",
            f"P0 Table 3 on {dataset}: error-rate change under randomized response; the aware "
            f"models against TD's clean error ({setting})",
        )
    }
    if "one_layer_mv_bacc" in table:
        shown = {"mv": "mv", "td": "td", "crh": "crh", "aware": "aware-one-coin"}
        shown["aware_ds"] = "aware-ds"
        panels.clear()
        for prefix in MECHANISMS:
            panel = pd.DataFrame(
                {"mechanism": prefix.replace("_", "-"), "epsilon": table["epsilon"]}
            )
            for col, name in shown.items():
                panel[name] = table[f"{prefix}_{col}_bacc"]
                panel[f"{name}_se"] = table[f"{prefix}_{col}_bacc_se"]
            panel["majority class"] = table["majority_bacc"]
            panels.append(panel)
        made["balanced_accuracy.png"] = panels_figure(
            pd.concat(panels),
            ["mechanism"],
            "epsilon",
            [*shown.values(), "majority class"],
            "balanced accuracy",
            f"Beside P0 Table 3 on {dataset}: balanced accuracy on the releases, against "
            f"labelling every task the majority class ({setting})",
        )

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
    x = np.arange(len(fig2))
    names = [f"{w[:6]}\nf_u={f:.2f}" for w, f in zip(fig2.worker, fig2.f_u, strict=True)]
    axes[0].bar(x - 0.2, fig2.weight_before, 0.4, label="before")
    axes[0].bar(x + 0.2, fig2.weight_after, 0.4, label="after (two-layer)")
    axes[0].set_ylabel("truth-discovery weight")
    axes[0].set_title("weighted vote (TD)", fontsize=9)
    axes[0].axhline(0, color="grey", lw=0.8)
    axes[1].bar(x - 0.27, fig2.aware_before, 0.27, label="before")
    axes[1].bar(x, fig2.aware_after, 0.27, label="after, told the mechanism")
    axes[1].bar(x + 0.27, fig2.aware_expected, 0.27, label="before composed with f_u")
    axes[1].set_ylabel("observed accuracy")
    axes[1].set_title("AwareDawidSkene", fontsize=9)
    axes[1].axhline(0.5, color="grey", lw=0.8)
    axes[1].set_ylim(0.3, 1.0)
    for ax in axes:
        ax.set_xticks(x, names)
        ax.set_xlabel("worker (the busiest), with the flip probability f_u it drew")
        ax.legend(fontsize=7)
    fig.suptitle(
        f"P0 Figure 2 on {dataset}: weights before and after two-layer perturbation, "
        f"epsilon 0.5 (one release, seed in run.json)",
        fontsize=10,
    )
    fig.tight_layout()
    made["figure2.png"] = fig
    made["error_change.png"] = panels_figure(
        dist,
        ["b"],
        "n",
        ["one_layer", "mean", "median"],
        "error-change term",
        "P0 Sec. 6.2: error-change term A = prod f_u over n = |U_imp| workers, f_u ~ U(0, b); "
        "one-layer: (b/2)^n",
        logy=True,
    )
    return made
