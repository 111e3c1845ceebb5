"""``privtd infer``, ``evaluate``, ``datasets`` and ``demo``: truth inference."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..errors import ValidationError
from ._common import (
    ANSWER_KIND,
    ON_DUPLICATE,
    _atomic_csv,
    _note_pooled_interval,
    _parse_params,
    _progress,
    _read_truth_csv,
)
from ._names import MECHANISM_NAMES, METHOD_NAMES


@click.command()
@click.argument("answers", type=click.Path())
@click.option(
    "--method",
    "-m",
    type=click.Choice(METHOD_NAMES),
    help="Inference method (default with --mechanism: the perturbation-aware one).",
)
@click.option(
    "--mechanism",
    "-M",
    type=click.Choice(MECHANISM_NAMES),
    help="The local mechanism that perturbed ANSWERS; its channel enters the inference.",
)
@click.option("--epsilon", "-e", type=float, help="The mechanism's epsilon per answer.")
@click.option(
    "--mechanism-param",
    multiple=True,
    metavar="KEY=VALUE",
    help="The mechanism's public parameters, repeatable (e.g. --mechanism-param f=0.3).",
)
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    help="CSV to write: task,truth. With --engine dask, a name ending in .parquet is a folder "
    "the workers write, one Parquet file per shard (see docs/scale.md).",
)
@click.option(
    "--workers-output",
    type=click.Path(dir_okay=False),
    help="CSV to write per-worker weight, answer count and model columns.",
)
@click.option(
    "--probas-output",
    type=click.Path(dir_okay=False),
    help="CSV to write per-task label probabilities (models that have them).",
)
@ANSWER_KIND
@click.option("--task-col", default="task", show_default=True, help="Column holding task ids.")
@click.option(
    "--worker-col", default="worker", show_default=True, help="Column holding worker ids."
)
@click.option(
    "--answer-col",
    default="answer",
    show_default=True,
    help="Column holding answers ('label' is accepted when 'answer' is absent).",
)
@ON_DUPLICATE
@click.option(
    "--on-missing",
    type=click.Choice(["error", "drop"]),
    default="error",
    show_default=True,
    help="Rows with a missing task, worker or answer.",
)
@click.option(
    "--single-task",
    type=click.Choice(["keep", "drop", "error"]),
    default="keep",
    show_default=True,
    help="Tasks with exactly one answer.",
)
@click.option(
    "--single-worker",
    type=click.Choice(["keep", "drop", "error"]),
    default="keep",
    show_default=True,
    help="Workers with exactly one answer.",
)
@click.option(
    "--gold",
    type=click.Path(dir_okay=False),
    help="CSV task,truth of known truths, fixed during fitting.",
)
@click.option(
    "--param",
    "-p",
    multiple=True,
    metavar="KEY=VALUE",
    help="Estimator parameter, repeatable (e.g. -p max_iter=50 -p tol=1e-4).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show the iteration and the time elapsed on stderr (default: when stderr is a terminal).",
)
@click.option(
    "--engine",
    type=click.Choice(["memory", "dask"]),
    default="memory",
    show_default=True,
    help="'dask': fit on a Dask cluster (pip install 'privtd[dask]'); ANSWERS may then be a "
    "directory or a glob of Parquet/CSV files. See docs/scale.md.",
)
@click.option(
    "--scheduler",
    metavar="tcp://HOST:PORT",
    help="With --engine dask: a running `dask scheduler` (default: a cluster on this machine).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="With --engine dask and no --scheduler: worker processes to start (default: one per "
    "core).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="With --engine dask: number of shards (default: about 5e6 answers each).",
)
def infer(
    answers: str,
    method: str | None,
    mechanism: str | None,
    epsilon: float | None,
    mechanism_param: tuple[str, ...],
    output: str,
    workers_output: str | None,
    probas_output: str | None,
    kind: str,
    task_col: str,
    worker_col: str,
    answer_col: str,
    on_duplicate: str,
    on_missing: str,
    single_task: str,
    single_worker: str,
    gold: str | None,
    param: tuple[str, ...],
    progress: bool | None,
    engine: str,
    scheduler: str | None,
    workers: int | None,
    partitions: int | None,
) -> None:
    """Infer each task's truth and each worker's quality from ANSWERS (CSV or Parquet)."""
    from ..answers import Answers
    from ..inference import (
        AWARE_METHODS,
        NO_AWARE_METHOD,
        AwareNull,
        aware_method,
        make_estimator,
    )

    for path in (output, workers_output, probas_output):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValidationError(f"The folder of {path!r} does not exist. Create it first.")
    read: dict[str, Any] = dict(
        task=task_col,
        worker=worker_col,
        answer=answer_col,
        kind=kind,
        on_duplicate=on_duplicate,
        on_missing=on_missing,
        single_task=single_task,
        single_worker=single_worker,
    )
    parquet = output.lower().endswith((".parquet", ".pq"))
    if parquet:
        if engine != "dask":
            raise ValidationError(
                f"{output!r}: Parquet results are written by the Dask engine's workers. Add "
                "--engine dask, or name a .csv output."
            )
        if probas_output:
            raise ValidationError(
                "With a Parquet --output the probabilities are in its files (p_<label> "
                "columns); drop --probas-output."
            )
        if os.path.lexists(output):
            raise ValidationError(f"{output!r} exists. Remove it or pick another name.")
    data: Any
    if engine == "dask":
        from ..inference import distributed

        if method is not None and method not in distributed.DISTRIBUTED_METHODS:
            raise ValidationError(
                f"Method {method!r} does not run on a Dask cluster yet; these do: "
                f"{', '.join(distributed.DISTRIBUTED_METHODS)}. Leave out --engine dask."
            )
        files = distributed.resolve_files(answers)  # a wrong path fails before any cluster
        client = click.get_current_context().with_resource(
            distributed.connect(scheduler=scheduler, workers=workers)
        )
        data = distributed.ingest(files, client, partitions=partitions, **read)
    else:
        if scheduler or workers or partitions:
            raise ValidationError("--scheduler, --workers and --partitions need --engine dask.")
        if Path(answers).is_dir():
            raise ValidationError(
                f"{answers!r} is a directory. Pass a file, or --engine dask for a directory."
            )
        data = Answers.from_path(answers, **read)
    for note in data.notes:
        click.echo(f"privtd: note: {note}", err=True)
    params = _parse_params(param)
    if mechanism is not None:
        from ..mechanisms import make_mechanism

        mech = make_mechanism(mechanism, epsilon, **_parse_params(mechanism_param))
        if method is None:
            method = aware_method(mech)
            if method is None:
                why = NO_AWARE_METHOD.get(mechanism, "none is implemented")
                raise ValidationError(
                    f"No perturbation-aware estimator for the {mechanism} mechanism: {why}. "
                    "Pass --method to pick one (P3's aggregator: sigma)."
                )
        if method in AWARE_METHODS:
            params["mechanism"] = mech
        else:
            # The user asked for a plain estimator: run it, but say the channel goes unused.
            click.echo(
                f"privtd: note: {method} does not model the {mechanism} mechanism; leave out "
                f"--method for the perturbation-aware default ({aware_method(mech) or 'none'}).",
                err=True,
            )
    elif epsilon is not None or mechanism_param:
        raise ValidationError("--epsilon and --mechanism-param need --mechanism.")
    if method is None:
        raise ValidationError("Pass --method, or --mechanism to use the perturbation-aware one.")
    estimator = make_estimator(method, **params)
    gold_series = _read_truth_csv(gold) if gold else None
    show = sys.stderr.isatty() if progress is None else progress
    start = time.perf_counter()
    with _progress(show, f"{method}") as tick:
        estimator.progress = tick
        if engine == "dask":
            distributed.fit_distributed(
                estimator, data, gold=gold_series, output=output if parquet else None
            )
        else:
            estimator.fit(data, gold=gold_series)
    elapsed = time.perf_counter() - start
    # Check every requested output before writing any, so a failure leaves no partial set.
    if probas_output and estimator.probas_ is None:
        raise ValidationError(f"Method {method!r} gives no probabilities; drop --probas-output.")
    if not parquet:  # a Parquet output is written by then
        _atomic_csv(estimator.truths_.rename_axis("task").reset_index(), output, index=False)
    if workers_output:
        _atomic_csv(estimator.weights_.rename_axis("worker"), workers_output, index=True)
    if probas_output and estimator.probas_ is not None:
        _atomic_csv(estimator.probas_.rename_axis("task"), probas_output, index=True)
    status = "converged" if estimator.converged_ else "did not converge"
    click.echo(
        f"{method}: {data.n_tasks} tasks, {data.n_workers} workers, {data.n_answers} answers; "
        f"{estimator.n_iter_} iteration(s), {status}, {elapsed:.3f} s -> {output}",
        err=True,
    )
    if isinstance(estimator, AwareNull):
        _note_pooled_interval(*estimator.pooled_median_interval_)


@click.command("evaluate")
@click.argument("truths", type=click.Path(dir_okay=False))
@click.option(
    "--truth",
    "reference",
    required=True,
    type=click.Path(dir_okay=False),
    help="CSV task,truth with the known truths.",
)
@click.option(
    "--kind",
    type=click.Choice(["auto", "categorical", "numeric"]),
    default="auto",
    show_default=True,
    help="Compare as labels (accuracy) or numbers (MAE, RMSE).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def evaluate_cmd(truths: str, reference: str, kind: str, as_json: bool) -> None:
    """Score inferred TRUTHS (CSV task,truth) against known truths."""
    from ..evaluation import evaluate

    metrics = evaluate(_read_truth_csv(truths), _read_truth_csv(reference), kind=kind)
    if as_json:
        click.echo(json.dumps(metrics))
        return
    for key, value in metrics.items():
        shown = f"{int(value)}" if key.startswith("n_") else f"{value:.4f}"
        click.echo(f"{key:>12}: {shown}")


@click.group("datasets")
def datasets_group() -> None:
    """List or export the bundled real datasets."""


@datasets_group.command("list")
def datasets_list() -> None:
    """Name, type and description of each bundled dataset."""
    from .. import datasets as datasets_mod

    for name in datasets_mod.list_datasets():
        spec = datasets_mod.DATASETS[name]
        click.echo(f"{name:<14} {spec.kind:<12} {spec.description}")


@datasets_group.command("export")
@click.argument("name")
@click.option(
    "--output",
    "-o",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder to write answers.csv, truth.csv and SOURCE.md into.",
)
def datasets_export(name: str, output: str) -> None:
    """Write dataset NAME's raw files (answers, truths, provenance) to a folder."""
    from .. import datasets as datasets_mod

    for path in datasets_mod.export(name, output):
        click.echo(str(path))


DEMO_METHODS = ("mv", "wv", "crh", "catd", "ds", "one-coin-ds", "lc")


def _one_class_note(fits: list[tuple[str, Any]]) -> str:
    """A note when a fit gives (nearly) every task one label, so its accuracy is that class's
    share of the truths. The one-coin model does so on Duchenne, as crowd-kit's does: its
    workers are right little more than half the time, and EM's free class prior then runs to
    the fixed point where the prior alone explains the answers."""
    counts = {name: est.truths_.value_counts() for name, est in fits}
    which = [name for name, c in counts.items() if c.iloc[0] >= 0.99 * c.sum()]
    if not which:
        return ""
    est, count = dict(fits)[which[0]], counts[which[0]]
    label = count.index[0]
    prior = getattr(est, "priors_", None)
    why = (
        f", class prior {float(prior[label]):.3f}"
        if prior is not None and label in prior.index
        else ""
    )
    return (
        f"labels {count.iloc[0]:,} of {count.sum():,} tasks '{label}' ({' and '.join(which)}"
        f"{why}): the accuracy is that class's share of the truths"
    )


@click.command()
@click.option(
    "--dataset", default="duchenne", show_default=True, help="A bundled categorical dataset."
)
@click.option(
    "--epsilon",
    default=1.0,
    show_default=True,
    type=float,
    help="Per-answer epsilon of the two-layer mechanism.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the perturbation.")
def demo(dataset: str, epsilon: float, seed: int) -> None:
    """Perturb a bundled real dataset on the workers' side with the two-layer mechanism,
    aggregate it with several methods, and print accuracy against the expert labels. The last
    row is the perturbation-aware default (what ``privtd infer --mechanism`` picks): told the
    mechanism on the perturbed answers, told none on the clean ones."""
    from .. import datasets as datasets_mod
    from ..evaluation import evaluate
    from ..inference import Estimator, aware_method, make_estimator
    from ..mechanisms import TwoLayerRR

    data = datasets_mod.load(dataset)
    answers, truth = data.answers, data.truth
    if not answers.is_categorical:
        raise ValidationError(f"The demo needs a categorical dataset; {dataset!r} is numeric.")
    mechanism = TwoLayerRR.from_epsilon(epsilon, n_labels=answers.n_labels)
    perturbed = mechanism.perturb(answers, rng=seed)
    click.echo(
        f"{dataset}: {answers.n_answers} answers, {answers.n_tasks} tasks, "
        f"{answers.n_workers} workers, {len(truth)} expert truths"
    )
    for note in answers.notes:
        click.echo(f"  note: {note}")
    click.echo(
        f"two-layer mechanism: f_u ~ U({mechanism.a:.4g}, {mechanism.b:.4g}), "
        f"{mechanism.guarantee} (seed {seed}); "
        f"{(perturbed.value != answers.value).mean():.1%} of answers changed"
    )
    click.echo(f"  caveat: {mechanism.guarantee.note}")
    aware = aware_method(mechanism)
    rows: list[tuple[str, Estimator, Estimator]] = [
        (method, make_estimator(method), make_estimator(method))
        for method in DEMO_METHODS
        if method != "lc" or answers.n_labels == 2
    ]
    if aware is not None:
        # The same model on the clean answers, with no channel to undo.
        rows.append(
            (
                aware,
                make_estimator(aware, mechanism=None),
                make_estimator(aware, mechanism=mechanism),
            )
        )
    click.echo(f"{'method':<14} {'clean':>8} {'private':>8} {'change':>8} {'seconds':>8}")
    for method, on_clean, on_private in rows:
        start = time.perf_counter()
        clean = evaluate(on_clean.fit(answers).truths_, truth)["accuracy"]
        private = evaluate(on_private.fit(perturbed).truths_, truth)["accuracy"]
        elapsed = time.perf_counter() - start
        click.echo(
            f"{method:<14} {clean:>8.4f} {private:>8.4f} {private - clean:>+8.4f} {elapsed:>8.3f}"
        )
        note = _one_class_note([("clean", on_clean), ("private", on_private)])
        if note:
            click.echo(f"  {method}: {note}")
    if aware is not None:
        click.echo(
            f"  {aware}: the perturbation-aware default (privtd infer -M two-layer); one release,"
            " so each accuracy moves by a few hundredths with --seed"
        )
