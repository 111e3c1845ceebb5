"""``privtd reproduce``: the papers' experiments."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("reproduce")
@click.argument(
    "experiment", type=click.Choice(["kdd18", "icdcs20", "bigdata18", "ladp", "dmkd14", "all"])
)
@click.option(
    "--dataset",
    default="duchenne",
    show_default=True,
    help="kdd18: a bundled binary dataset ('sentiment' stands in for Peer Grading).",
)
@click.option(
    "--trials", type=int, help="Trials per setting (default: 100; icdcs20 50; bigdata18 5)."
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the trials.")
@click.option("--jobs", type=int, help="kdd18: worker processes (default: every core).")
@click.option(
    "--label-order",
    type=click.Choice(["given", "reversed"]),
    default="given",
    show_default=True,
    help="kdd18: code the labels as given or reversed (ties go to the first label; same "
    "releases either way).",
)
@click.option(
    "--size",
    type=click.Choice(["small", "large"]),
    default="small",
    show_default=True,
    help="bigdata18: 2,000 x 200 (Figs 2-3) or 10,000 x 1,000 (Fig 4, sparsity sweep only).",
)
@click.option("--mf-dim", type=int, default=10, show_default=True, help="bigdata18: MF's d.")
@click.option(
    "--aware-estimate",
    type=click.Choice(["map", "variational"]),
    default="map",
    show_default=True,
    help="bigdata18: how the NULL-aware columns fit each task (AwareNull's estimate).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for table.csv, table.md, run.json, checks.md and PNG figures ('all': one "
    "each). Figures need matplotlib: pip install 'privtd[plot]'.",
)
def reproduce(
    experiment: str,
    dataset: str,
    trials: int | None,
    seed: int,
    jobs: int | None,
    label_order: str,
    size: str,
    mf_dim: int,
    aware_estimate: str,
    out_dir: str,
) -> None:
    """Run one of the papers' experiments (or all, with the fidelity report) and write its
    tables, figures, checks and run record (docs/reproduction.md). The PNG figures need the plot
    extra (pip install 'privtd[plot]'); without it the tables are written and a note says so."""
    from ..experiments import report, runner

    out = Path(out_dir)
    if not report.have_matplotlib():
        # Said once, before the run: the tables still come, the PNGs the help promises do not.
        click.echo(f"privtd: note: no PNG figures: {report.PLOT_HINT}", err=True)
    if experiment == "all":
        outcomes, path = runner.run_all(
            out,
            seed=seed,
            progress=lambda name, done, total: click.echo(
                f"\r{name}: {done}/{total}", nl=False, err=True
            ),
        )
        click.echo("", err=True)
        for o in outcomes:
            verdicts = ", ".join(c["verdict"] for c in o.checks)
            click.echo(f"{o.experiment}: {o.facts.get('seconds')} s; checks: {verdicts}")
        click.echo(f"wrote {path}")
        return
    large = size == "large"
    n_trials = runner.DEFAULT_TRIALS[experiment] if trials is None else trials
    with click.progressbar(
        length=runner.steps(experiment, n_trials, large), label=experiment, file=sys.stderr
    ) as bar:
        outcome = runner.run(
            experiment,
            out,
            dataset=dataset,
            trials=trials,
            seed=seed,
            jobs=jobs,
            label_order=label_order,
            large=large,
            mf_dim=mf_dim,
            aware_estimate=aware_estimate,
            progress=bar.update,
        )
    click.echo(report.markdown_table(outcome.shown))
    for title, table in outcome.more:
        click.echo(f"{title}:\n")
        click.echo(report.markdown_table(table))
    for check in outcome.checks:
        click.echo(f"[{check['verdict']}] {check['claim']}: {check['ours']}")
    written = ", ".join(dict.fromkeys(str(p) for p in outcome.written))
    click.echo(f"{outcome.facts['seconds']} s; wrote {written}")
