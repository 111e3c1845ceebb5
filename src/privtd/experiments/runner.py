"""Running an experiment end to end: its tables, figures, run record and checks in one folder;
and every experiment at once, with the fidelity report assembled from them (``privtd reproduce``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .._files import atomic_write_text
from . import bigdata18, checks, dmkd14, icdcs20, kdd18, ladp, report

EXPERIMENTS = ("kdd18", "icdcs20", "bigdata18", "ladp", "dmkd14")
DEFAULT_TRIALS = {"kdd18": 100, "icdcs20": 50, "bigdata18": 5, "ladp": 100, "dmkd14": 1}
TITLES = {
    "kdd18": "P0 (KDD 2018): two-layer randomized response and truth discovery",
    "icdcs20": "P1 (ICDCS 2020): Gaussian noise with exponential variance, CRH and GTM",
    "bigdata18": "P3 (BigData 2018): sparse answers with private NULLs",
    "ladp": "P4 (Wang and Xu): private Dawid-Skene",
    "dmkd14": "P2 (DMKD 2014): worker-private latent class EM over a secure sum",
}


@dataclass
class Outcome:
    """What one experiment wrote and found."""

    experiment: str
    facts: dict[str, Any]
    shown: pd.DataFrame
    written: list[Path] = field(default_factory=list)
    checks: list[checks.Check] = field(default_factory=list)
    #: Tables printed after ``shown``, each under its title (balanced accuracy beside the
    #: paper's error metric, where the main table has no room for it).
    more: list[tuple[str, pd.DataFrame]] = field(default_factory=list)


def _note_figures(facts: dict[str, Any]) -> None:
    """Say in run.json when the PNGs were skipped, so a folder without them explains itself."""
    if not report.have_matplotlib():
        facts["figures"] = f"not drawn: {report.PLOT_HINT}"


def steps(experiment: str, trials: int, large: bool = False) -> int:
    """Units of progress an experiment reports (trials, or datasets and settings)."""
    if experiment == "kdd18":
        return len(kdd18.EPSILONS) * len(kdd18.MECHANISMS) * trials
    if experiment == "icdcs20":
        return 7 * len(icdcs20.NOISE_LEVELS) * trials
    if experiment == "bigdata18":
        cells = (0 if large else 2 * len(bigdata18.EPSILONS)) + 2 * len(bigdata18.SPARSITIES)
        return cells * trials
    if experiment == "ladp":
        return 2 * 2 * len(ladp.EPSILONS) * trials
    return len(dmkd14.DATASETS) + len(dmkd14.COST_SETTINGS)


def run(
    experiment: str,
    out: Path,
    *,
    dataset: str = "duchenne",
    trials: int | None = None,
    seed: int = 0,
    jobs: int | None = None,
    label_order: str = "given",
    large: bool = False,
    mf_dim: int = 10,
    aware_estimate: str = "map",
    progress: Callable[[int], None] | None = None,
) -> Outcome:
    """Run ``experiment`` and write ``table.csv``, ``table.md``, ``run.json``, its other tables
    and PNG figures (with the ``plot`` extra) into ``out``."""
    trials = DEFAULT_TRIALS[experiment] if trials is None else trials
    if experiment == "dmkd14":
        table, costs, facts = dmkd14.run(seed=seed, progress=progress)
        facts["experiment"] = experiment
        _note_figures(facts)
        written = report.write(out, table, facts, "dmkd14: secure against plain EM")
        written += report.write(out, costs, facts, "dmkd14: cost per EM iteration", "cost")
        written += dmkd14.figures(out, costs, f"seed {seed}")
        shown = table.drop(columns=["backend", "answers"])
        verdicts = checks.dmkd14(table)
        atomic_write_text(out / "checks.md", "# dmkd14: checks\n\n" + checks.markdown(verdicts))
        written.append(out / "checks.md")
        return Outcome(experiment, facts, shown, list(dict.fromkeys(written)), verdicts)
    if experiment == "kdd18":
        table, facts = kdd18.run(
            dataset,
            trials=trials,
            seed=seed,
            progress=progress,
            jobs=jobs,
            label_order=label_order,
        )
    elif experiment == "icdcs20":
        table, facts = icdcs20.run(trials=trials, seed=seed, progress=progress)
    elif experiment == "bigdata18":
        table, facts = bigdata18.run(
            trials=trials,
            seed=seed,
            progress=progress,
            size=(10_000, 1000) if large else (2000, 200),
            d=mf_dim,
            figures=("vs_sparsity",) if large else ("vs_epsilon", "vs_sparsity"),
            aware_estimate=aware_estimate,
        )
    else:
        table, facts = ladp.run(trials=trials, seed=seed, progress=progress)
    facts["experiment"] = experiment
    _note_figures(facts)
    subject = dataset if experiment == "kdd18" else "synthetic"
    if experiment == "kdd18" and label_order == "reversed":
        subject += ", labels reversed"
    written = report.write(out, table, facts, f"{experiment}: {subject}")
    setting = f"{trials} trials, seed {seed}"
    found: list[checks.Check] = []
    more: list[tuple[str, pd.DataFrame]] = []
    if experiment == "kdd18":
        vs_paper = kdd18.compare_with_paper(table) if dataset == "duchenne" else None
        if vs_paper is not None:
            written += report.write(out, vs_paper, facts, "Ours against P0 Table 3", "vs_paper")
        fig2 = kdd18.weights_before_after(dataset, epsilon=0.5, seed=seed)
        title = "P0 Figure 2: weights before and after two-layer perturbation (epsilon 0.5)"
        written += report.write(out, fig2, facts, title, "figure2")
        dist = kdd18.error_change_distribution(seed=seed)
        written += report.write(
            out, dist, facts, "P0 Sec. 6.2: error-change term prod f_u", "error_change"
        )
        written += kdd18.figures(out, table, fig2, dist, dataset=subject, setting=setting)
        shown = kdd18.summary(table)
        balanced = kdd18.balanced_summary(table)
        majority = facts["majority_baseline"]
        title = (
            f"Balanced accuracy (majority-class baseline: label {majority['label']}, error "
            f"{majority['error']:.4f}, balanced accuracy {majority['balanced_accuracy']:.4f})"
        )
        written += report.write(out, balanced, facts, title, "balanced")
        more.append((title, balanced))
        found = checks.kdd18(table, vs_paper)
    elif experiment == "bigdata18":
        real = (
            None
            if large
            else bigdata18.real(trials=trials, seed=seed, d=mf_dim, aware_estimate=aware_estimate)
        )
        if real is not None:
            written += report.write(out, real, facts, "bigdata18: Web and AdultContent", "real")
        written += bigdata18.figures(out, table, real, setting)
        shown = table.drop(columns=[c for c in table.columns if c.endswith("_se")])
        found = checks.bigdata18(table, real)
    elif experiment == "icdcs20":
        real = icdcs20.real(trials=max(2, trials // 5), seed=seed)
        written += report.write(out, real, facts, "icdcs20: emotion (numeric)", "real")
        written += icdcs20.figures(out, table, setting)
        shown = icdcs20.summary(table)
        found = checks.icdcs20(table)
    else:
        real = ladp.real(trials=max(2, trials // 5), seed=seed)
        written += report.write(out, real, facts, "ladp: binary real datasets", "real")
        written += ladp.figures(out, table, setting)
        shown = table.drop(columns=[c for c in table.columns if c.endswith("_se")])
        found = checks.ladp(table, ladp.THEOREM4_EPSILON)
    if found:
        atomic_write_text(out / "checks.md", f"# {experiment}: checks\n\n" + checks.markdown(found))
        written.append(out / "checks.md")
    return Outcome(experiment, facts, shown, list(dict.fromkeys(written)), found, more)


def run_all(
    out: Path, seed: int = 0, progress: Callable[[str, int, int], None] | None = None
) -> tuple[list[Outcome], Path]:
    """Every experiment with its defaults, each in ``out/<experiment>``, then ``out/report.md``:
    per experiment its run record, its checks and links to its tables and figures."""
    started = time.perf_counter()
    outcomes = []
    for experiment in EXPERIMENTS:
        total = steps(experiment, DEFAULT_TRIALS[experiment])
        tick = None
        if progress is not None:
            done = [0]

            def tick(
                n: int, experiment: str = experiment, total: int = total, done: list[int] = done
            ) -> None:
                done[0] += n
                assert progress is not None
                progress(experiment, done[0], total)

        outcomes.append(run(experiment, out / experiment, seed=seed, progress=tick))
    path = out / "report.md"
    atomic_write_text(path, _report(outcomes, out, time.perf_counter() - started))
    return outcomes, path


def _report(outcomes: list[Outcome], out: Path, seconds: float) -> str:
    verdicts = checks.summary({o.experiment: o.checks for o in outcomes})
    lines = [
        "# Fidelity report (generated by `privtd reproduce all`)",
        "",
        f"Every experiment at its defaults, seed 0, in {seconds:.0f} s. Verdicts: "
        + checks.summary_sentence(verdicts)
        + ". The discussion of each difference is in docs/reproduction.md.",
        "",
    ]
    for o in outcomes:
        lines += [f"## {o.experiment}: {TITLES[o.experiment]}", ""]
        lines += [
            f"Run time {o.facts.get('seconds', '?')} s; files: "
            + ", ".join(f"[{p.name}]({p.relative_to(out)})" for p in o.written),
            "",
        ]
        if o.checks:
            lines += [checks.markdown(o.checks)]
        lines += [report.markdown_table(o.shown)]
        for title, table in o.more:
            lines += [f"{title}:", "", report.markdown_table(table)]
    return "\n".join(lines) + "\n"
