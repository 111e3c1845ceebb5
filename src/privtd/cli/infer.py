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
    _read_answers,
    _read_reference,
    _read_truth_csv,
    answer_source,
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
@answer_source
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
    help="CSV task,truth of known truths, fixed during fitting (default: the golden tasks of "
    "a platform export, when it has any).",
)
@click.option(
    "--param",
    "-p",
    multiple=True,
    metavar="KEY=VALUE",
    help="Estimator parameter, repeatable (e.g. -p max_iter=50 -p tol=1e-4).",
)
@click.option(
    "--multi-label",
    metavar="SEP",
    help="Each answer is a set of labels joined by SEP (e.g. 'cat|dog'; empty: none): fit "
    "--method once per label on whether each worker chose it (binary relevance, "
    "docs/inference.md). Truths are written joined by SEP.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar over iterations (default: when stderr is a terminal).",
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
    fmt: str,
    delimiter: str | None,
    task_col: str | None,
    worker_col: str | None,
    answer_col: str | None,
    keep_rejected: bool,
    on_duplicate: str,
    on_missing: str,
    single_task: str,
    single_worker: str,
    gold: str | None,
    param: tuple[str, ...],
    multi_label: str | None,
    progress: bool | None,
    engine: str,
    scheduler: str | None,
    workers: int | None,
    partitions: int | None,
) -> None:
    """Infer each task's truth and each worker's quality from ANSWERS: a long table (CSV, TSV
    or Parquet: task, worker, answer) or a platform's export (Toloka, MTurk, Label Studio,
    Appen; docs/formats.md), whose golden tasks are used as --gold."""
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
    if multi_label is not None:
        if mechanism or engine != "memory" or method is None:
            raise ValidationError("--multi-label needs --method and no --mechanism or --engine.")
        _infer_multi_label(
            answers,
            method,
            multi_label,
            _parse_params(param),
            gold,
            output,
            workers_output,
            probas_output,
            (task_col or "task", worker_col or "worker", answer_col or "answer"),
        )
        return
    read: dict[str, Any] = dict(
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
    export_gold = None
    if engine == "dask":
        from ..inference import distributed

        if method is not None and method not in distributed.DISTRIBUTED_METHODS:
            raise ValidationError(
                f"Method {method!r} does not run on a Dask cluster yet; these do: "
                f"{', '.join(distributed.DISTRIBUTED_METHODS)}. Leave out --engine dask."
            )
        if fmt not in ("auto", "long") or delimiter or keep_rejected:
            raise ValidationError(
                "--engine dask reads long CSV or Parquet tables only; read a platform export "
                "without --engine dask, or convert it first (docs/formats.md)."
            )
        read.update(task=task_col or "task", worker=worker_col or "worker")
        read.update(answer=answer_col or "answer")
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
        imported = _read_answers(
            answers, fmt, delimiter, task_col, worker_col, answer_col, keep_rejected, **read
        )
        data = imported.answers
        export_gold = imported.gold
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
    gold_series = _read_truth_csv(gold) if gold else export_gold
    if export_gold is not None:
        from ..io import FORMAT_LABELS

        label = FORMAT_LABELS[imported.format]
        click.echo(
            f"privtd: note: the {label} export has {len(export_gold)} golden task(s); "
            + (
                "--gold replaces them" if gold else "using them as gold (--gold FILE replaces them)"
            ),
            err=True,
        )
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
    help="CSV task,truth with the known truths, or a platform export whose golden tasks are "
    "the truths (docs/formats.md).",
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

    metrics = evaluate(_read_truth_csv(truths), _read_reference(reference), kind=kind)
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
    if aware is not None:
        click.echo(
            f"  {aware}: the perturbation-aware default (privtd infer -M two-layer); one release,"
            " so each accuracy moves by a few hundredths with --seed"
        )


def _infer_multi_label(
    answers: str,
    method: str,
    sep: str,
    params: dict[str, Any],
    gold: str | None,
    output: str,
    workers_output: str | None,
    probas_output: str | None,
    columns: tuple[str, str, str],
) -> None:
    """``privtd infer --multi-label SEP``: binary relevance over ``method``."""
    import pandas as pd

    from ..errors import SchemaError
    from ..inference import BinaryRelevance

    task, worker, answer = columns
    frame = pd.read_csv(answers, dtype={answer: str}, keep_default_na=False)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"The answers table lacks column(s) {missing}: expected {list(columns)}, found "
            f"{list(frame.columns)}. Pass --task-col, --worker-col or --answer-col."
        )
    chosen = frame[answer].str.split(sep, regex=False).map(lambda labels: [x for x in labels if x])
    data = pd.DataFrame({"task": frame[task], "worker": frame[worker], "answer": chosen})
    truth = None
    if gold:
        known = _read_truth_csv(gold).astype(str)
        truth = known.str.split(sep, regex=False).map(lambda labels: [x for x in labels if x])
    est = BinaryRelevance(method, **params).fit(data, gold=truth)
    if probas_output and est.probas_ is None:
        raise ValidationError(f"Method {method!r} gives no probabilities; drop --probas-output.")
    joined = est.truths_.map(lambda labels: sep.join(sorted(labels)))
    _atomic_csv(joined.rename_axis("task").reset_index(), output, index=False)
    if workers_output:
        _atomic_csv(est.weights_.rename_axis("worker"), workers_output, index=True)
    if probas_output and est.probas_ is not None:
        _atomic_csv(est.probas_.rename_axis("task"), probas_output, index=True)
    click.echo(
        f"{method} per label (binary relevance): {len(joined)} tasks, "
        f"{len(est.estimators_)} labels -> {output}",
        err=True,
    )
