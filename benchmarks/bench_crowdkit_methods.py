"""privtd against crowd-kit 1.4.2 on Wawa, ZeroBasedSkill, KOS and MMSR (and MV, DS, one-coin DS
for the table): label agreement, accuracy against the expert truths, and fit time.

Also writes crowd-kit's labels for tests/test_crowdkit_methods.py into
tests/reference/crowdkit/ckit2_<dataset>.csv.gz, and its MMSR skills into
ckit2_<dataset>_mmsr_skills.csv.gz (the tests cannot import crowd-kit).

    PYTHONPATH=src python benchmarks/bench_crowdkit_methods.py [--synthetic-tasks 8000]
    PYTHONPATH=src python benchmarks/bench_crowdkit_methods.py --synthetic-only   # speed only

``--synthetic-only`` runs only the synthetic speed section and appends it to the results file
(the full run rewrites the file and the reference labels).

crowd-kit 1.4.2's Wawa and ZeroBasedSkill call scikit-learn's ``check_is_fitted``, which fails
on their attrs classes with scikit-learn >= 1.6; the check guards only ``predict`` after
``fit`` and this script always fits first, so it is switched off here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crowdkit
import crowdkit.aggregation as ck
import crowdkit.aggregation.classification.wawa as ck_wawa
import crowdkit.aggregation.classification.zero_based_skill as ck_zbs
import numpy as np
import pandas as pd

from privtd import Answers, datasets
from privtd.datasets import make_categorical
from privtd.errors import ConvergenceWarning
from privtd.inference import (
    KOS,
    MMSR,
    DawidSkene,
    MajorityVote,
    OneCoinDawidSkene,
    Wawa,
    ZeroBasedSkill,
)
from privtd.inference._skill_vote import skill_votes

ck_wawa.check_is_fitted = lambda *a, **k: None  # type: ignore[attr-defined]
ck_zbs.check_is_fitted = lambda *a, **k: None  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "tests" / "reference" / "crowdkit"
RESULT = ROOT / "benchmarks" / "results" / "crowdkit_methods.txt"
CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]

# name -> (privtd factory, crowd-kit factory, binary only)
PAIRS: dict[str, tuple[Callable[[], Any], Callable[[], Any], bool]] = {
    "mv": (MajorityVote, ck.MajorityVote, False),
    "ds": (DawidSkene, lambda: ck.DawidSkene(n_iter=100, tol=1e-5), False),
    "one-coin-ds": (OneCoinDawidSkene, lambda: ck.OneCoinDawidSkene(n_iter=100, tol=1e-5), False),
    "wawa": (Wawa, ck.Wawa, False),
    "zbs": (ZeroBasedSkill, ck.ZeroBasedSkill, False),
    "kos": (KOS, ck.KOS, True),
    "mmsr": (MMSR, ck.MMSR, False),
}


class CrowdKitConventionsMMSR(MMSR):
    """MMSR with crowd-kit 1.4.2's two departures from the authors' code put back: the pairs with
    no common task (and the diagonal) read as covariance -1/(K-1) in the sign graph
    (``ck_covariance``), and the label is the arg-max of the weighted votes divided by their sum
    (``ck_vote``). With both, at crowd-kit's step count, the skills agree to 1e-10 on every
    bundled dataset (crowd-kit's third one, F = -1 when a worker has at most one co-worker, does
    not arise there: the fewest co-workers is 2). One at a time, they show what each does to
    accuracy; ``all_positive`` signs every worker +1 instead of using the sign graph."""

    def __init__(
        self,
        *,
        ck_covariance: bool = True,
        ck_vote: bool = True,
        all_positive: bool = False,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        self.ck_covariance = ck_covariance
        self.ck_vote = ck_vote
        self.all_positive = all_positive

    def _fit(self, answers: Any, gold: Any) -> None:
        self._k = answers.n_labels
        super()._fit(answers, gold)
        if not self.ck_vote:
            return
        scores = skill_votes(answers, self.weights_["weight"].to_numpy())
        with np.errstate(divide="ignore", invalid="ignore"):
            share = scores / scores.sum(axis=1, keepdims=True)
        self.truths_ = pd.Series(answers.labels.take(share.argmax(axis=1)), index=answers.tasks)

    def signs(self, cov: np.ndarray, common: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.ck_covariance:
            cov = np.where(common > 0, cov, -1.0 / (self._k - 1))
        out = super().signs(cov, common, rng)
        return np.abs(out) if self.all_positive else out


def rank_one_fit(est: MMSR, answers: Answers) -> tuple[float, float, np.ndarray]:
    """How well the fitted ``s`` (from ``p_u``, after the clip) explains the observed covariance,
    the fit the authors' method aims at: ``||C - s s^T||_F`` over the pairs with a common task,
    the share of those with ``C_uv != 0`` whose sign ``s_u s_v`` has, and ``s`` itself."""
    k = answers.n_labels
    cov, common = MMSR.covariance(answers)
    rows, cols = np.nonzero(common)
    s = (est.weights_["accuracy"].to_numpy() - 1.0 / k) * k / (k - 1)
    c, prod = cov[rows, cols], s[rows] * s[cols]
    signed = c != 0
    return (
        float(np.linalg.norm(c - prod)),
        float((np.sign(prod[signed]) == np.sign(c[signed])).mean()),
        s,
    )


def truth_accuracy(answers: Answers, truth: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per worker, the share of answers equal to the expert truth and how many it answered."""
    known = truth.reindex(answers.tasks)
    truth_code = np.full(answers.n_tasks, -1)
    truth_code[known.notna().to_numpy()] = answers.labels.get_indexer(known.dropna())
    has = truth_code[answers.task] >= 0
    right = has & (answers.value == truth_code[answers.task])
    n = np.bincount(answers.worker[has], minlength=answers.n_workers)
    hits = np.bincount(answers.worker[right], minlength=answers.n_workers)
    return hits / np.maximum(n, 1), n


def mmsr_departures(lines: list[str]) -> None:
    """crowd-kit's two departures put back one at a time (its labels: the stored references)."""
    lines.append("")
    lines.append(
        "mmsr with crowd-kit's departures put back one at a time (each at its own default stop; "
        "fit = ||C - s s^T||_F over the pairs with a common task, signs = share of those with "
        "C != 0 whose sign s_u s_v has, negative = workers with s < 0; of those with >= 3 "
        "truths: how many, how many answer the truth more often than 1/K, their median share)"
    )
    lines.append(
        "dataset        variant              accuracy  agree   fit       signs   negative  "
        ">=3 truths  above 1/K  median"
    )
    variants = {
        "authors (privtd)": {"ck_covariance": False, "ck_vote": False},
        "+ck covariance": {"ck_covariance": True, "ck_vote": False},
        "+ck vote/sum": {"ck_covariance": False, "ck_vote": True},
        "+both (crowd-kit)": {"ck_covariance": True, "ck_vote": True},
        "all signs +1": {"ck_covariance": False, "ck_vote": False, "all_positive": True},
    }
    for name in CATEGORICAL:
        data = datasets.load(name)
        answers = data.answers
        ref = pd.read_csv(REFERENCE / f"ckit2_{name}.csv.gz", dtype={"task": str})
        ck_labels = ref.set_index("task")["mmsr"].reindex(answers.tasks.astype(str))
        ck_labels.index = answers.tasks
        share, n_truths = truth_accuracy(answers, data.truth)
        _, common = MMSR.covariance(answers)
        pairs = common[np.triu_indices(answers.n_workers, 1)]
        shared = pairs[pairs > 0]
        lines.append(
            f"{name:14s} worker pairs with a common task {len(shared) / len(pairs):.3f}; of those, "
            f"median common tasks {np.median(shared):.0f}, share with 1 or 2 "
            f"{(shared <= 2).mean():.3f}"
        )
        for label, params in variants.items():
            est = CrowdKitConventionsMMSR(**params).fit(answers)
            fit, signs, s = rank_one_fit(est, answers)
            checked = (s < 0) & (n_truths >= 3)
            median = float(np.median(share[checked])) if checked.any() else float("nan")
            lines.append(
                f"{name:14s} {label:19s} {accuracy(est.truths_, data.truth):8.4f}  "
                f"{same(est.truths_, ck_labels):6.4f}  {fit:8.3f}  {signs:6.4f}  "
                f"{int((s < 0).sum()):8d}  {int(checked.sum()):10d}  "
                f"{int((checked & (share > 1 / answers.n_labels)).sum()):9d}  {median:6.3f}"
            )
            print(lines[-1], flush=True)


def in_order(answers: Answers, order: list[Any]) -> Answers:
    """The same answers with the labels recoded so that sorted order is ``order``: our "first"
    tie-break then picks what crowd-kit's ``idxmax`` picks (its columns come in value_counts
    order, not sorted)."""
    rank = {label: i for i, label in enumerate(order)}
    codes = np.array([rank[label] for label in answers.labels])
    return Answers(
        task=answers.task,
        worker=answers.worker,
        value=codes[answers.value],
        tasks=answers.tasks,
        workers=answers.workers,
        labels=pd.Index(range(len(order))),
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def same(a: pd.Series, b: pd.Series) -> float:
    b = b.reindex(a.index)
    return float((a.astype(str).to_numpy() == b.astype(str).to_numpy()).mean())


def accuracy(labels: pd.Series, truth: pd.Series) -> float:
    return same(truth, labels)


def tie_orders() -> dict[str, list[Any]]:
    """Per dataset, the label order crowd-kit's MajorityVote breaks ties in (its columns)."""
    orders = {}
    for name in CATEGORICAL:
        frame = datasets.load(name).answers.to_frame().rename(columns={"answer": "label"})
        orders[name] = [
            label.item() if hasattr(label, "item") else label
            for label in ck.MajorityVote().fit(frame).probas_.columns
        ]
    return orders


def real(lines: list[str]) -> None:
    lines.append(
        "dataset        method       agree  agree@steps  acc_privtd  acc_crowdkit  "
        "t_privtd  t_crowdkit"
    )
    for name in CATEGORICAL:
        data = datasets.load(name)
        answers = data.answers
        frame = answers.to_frame().rename(columns={"answer": "label"})
        stored: dict[str, Any] = {}
        for method, (ours_cls, theirs_cls, binary) in PAIRS.items():
            if binary and answers.n_labels != 2:
                continue
            theirs = theirs_cls()
            ck_labels, t_ck = timed(lambda theirs=theirs, f=frame: theirs.fit_predict(f))
            ours, t_ours = timed(lambda cls=ours_cls, a=answers: cls().fit(a))
            at_steps = float("nan")
            if method in ("mv", "wawa"):  # the same tie order as crowd-kit's
                order = list(ck.MajorityVote().fit(frame).probas_.columns)
                aligned = ours_cls().fit(in_order(answers, order))
                named = np.array(order, dtype=object)[aligned._truth_codes]
                at_steps = same(pd.Series(named, index=answers.tasks), ck_labels)
            elif method == "zbs":  # crowd-kit always runs its 100 steps
                steps = ZeroBasedSkill(tol=0.0).fit(answers)
                at_steps = same(steps.truths_, ck_labels)
            elif method == "mmsr":
                n = len(theirs.loss_history_)
                stored["mmsr_n_iter"] = n
                skills = theirs.skills_.reindex(answers.workers).rename("skill")
                skills.rename_axis("worker").to_csv(
                    REFERENCE / f"ckit2_{name}_mmsr_skills.csv.gz",
                    compression={"method": "gzip", "mtime": 0},
                )
                steps = CrowdKitConventionsMMSR(max_iter=n, tol=0.0).fit(answers)
                at_steps = same(steps.truths_, ck_labels)
            if method in ("wawa", "zbs", "kos", "mmsr"):
                stored[method] = ck_labels.reindex(answers.tasks)
            lines.append(
                f"{name:14s} {method:11s} {same(ours.truths_, ck_labels):6.4f}  "
                f"{at_steps:11.4f}  {accuracy(ours.truths_, data.truth):10.4f}  "
                f"{accuracy(ck_labels, data.truth):12.4f}  {t_ours:8.3f}  {t_ck:10.3f}"
            )
            print(lines[-1], flush=True)
        table = pd.DataFrame(stored, index=answers.tasks).rename_axis("task")
        table.to_csv(REFERENCE / f"ckit2_{name}.csv.gz", compression={"method": "gzip", "mtime": 0})


def synthetic(lines: list[str], n_tasks: int) -> None:
    answers, truth, _ = make_categorical(n_tasks, 100, 2, answers_per_task=5, rng=11)
    frame = answers.to_frame().rename(columns={"answer": "label"})
    # crowd-kit runs on one core; so does privtd here (as in bench_crowdkit_glad_mace.py): on
    # the shared 2-core machine numba's threads, contending with other jobs, made fits erratic.
    import numba

    numba.set_num_threads(1)
    lines.append("")
    lines.append(
        f"synthetic: {n_tasks} tasks, 100 workers, 2 labels, 5 answers per task "
        "(make_categorical rng=11); best of 7 privtd fits (numba on one thread), 1 crowd-kit fit; "
        "PRIVTD_BACKEND="
        f"{os.environ.get('PRIVTD_BACKEND', '(unset: chosen per fit)')}; backend = the kernels "
        "privtd's last fit ran; t_first = its first fit (numba's set-up, where it runs, included)"
    )
    lines.append(
        "method       t_privtd  t_crowdkit  ratio  agree  acc_privtd  acc_crowdkit  "
        "backend  t_first"
    )
    for method, (ours_cls, theirs_cls, _) in PAIRS.items():
        ck_labels, t_ck = timed(lambda theirs_cls=theirs_cls: theirs_cls().fit_predict(frame))
        runs = [timed(lambda cls=ours_cls: cls().fit(answers)) for _ in range(7)]
        best, first, ours = min(t for _, t in runs), runs[0][1], runs[-1][0]
        lines.append(
            f"{method:11s} {best:9.4f}  {t_ck:10.3f}  {t_ck / best:5.0f}  "
            f"{same(ours.truths_, ck_labels):5.4f}  {accuracy(ours.truths_, truth):10.4f}  "
            f"{accuracy(ck_labels, truth):12.4f}  {ours._kernel_backend:7s}  {first:7.4f}"
        )
        print(lines[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic-tasks", type=int, default=8000)
    parser.add_argument(
        "--synthetic-only", action="store_true", help="only the speed section; appended"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    warnings.simplefilter("ignore", FutureWarning)
    if args.synthetic_only:
        lines = [f"\n# crowd-kit {crowdkit.__version__}; load {os.getloadavg()[0]:.2f} at start"]
        synthetic(lines, args.synthetic_tasks)
        lines.append(f"# load {os.getloadavg()[0]:.2f} at end")
        print("\n".join(lines))
        with RESULT.open("a") as handle:
            handle.write("\n".join(lines) + "\n")
        return
    lines = [
        f"crowd-kit {crowdkit.__version__}; load {os.getloadavg()[0]:.2f} at start; "
        "agree = same label as crowd-kit at each tool's default stopping point; agree@steps = "
        "the same steps and ties as crowd-kit (mv, wawa: labels recoded to crowd-kit's tie order; "
        "zbs: tol=0, all 100 steps; mmsr: crowd-kit's step count with its two departures from "
        "the authors' code put back, see CrowdKitConventionsMMSR)"
    ]
    (REFERENCE / "ckit2_tie_order.json").write_text(json.dumps(tie_orders(), indent=1) + "\n")
    real(lines)
    mmsr_departures(lines)
    synthetic(lines, args.synthetic_tasks)
    lines.append(f"load {os.getloadavg()[0]:.2f} at end")
    RESULT.write_text("\n".join(lines) + "\n")
    (REFERENCE / "VERSION_ckit2").write_text(f"crowd-kit {crowdkit.__version__}\n")


if __name__ == "__main__":
    main()
