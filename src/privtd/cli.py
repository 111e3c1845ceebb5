"""The ``privtd`` command line.

Every error is one line on stderr and a non-zero exit, never a traceback; output files are
written to a temporary name and renamed, so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from . import datasets as datasets_mod
from ._files import atomic_write_text
from .answers import Answers
from .errors import NotNumericError, PrivtdError, SchemaError, ValidationError
from .evaluation import evaluate
from .inference import (
    AWARE_METHODS,
    METHODS,
    NO_AWARE_METHOD,
    RELEASE_METHODS,
    AwareNull,
    Estimator,
    aware_method,
    make_estimator,
)
from .mechanisms import MECHANISMS, TwoLayerRR, make_mechanism, task_profiles, worker_totals

EXIT_ERROR = 2


# ---------------------------------------------------------------------- helpers
def _fail(message: str) -> None:
    click.echo(f"privtd: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _atomic_csv(frame: pd.DataFrame, path: str, index: bool) -> None:
    atomic_write_text(path, frame.to_csv(index=index))


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    return text


def _parse_params(pairs: tuple[str, ...]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValidationError(f"--param takes KEY=VALUE. Got {pair!r}.")
        key, value = pair.split("=", 1)
        params[key.strip().replace("-", "_")] = _parse_value(value.strip())
    return params


def _mechanism_params(mechanism: str, params: dict[str, Any], n_tasks: int) -> dict[str, Any]:
    """CLI parameters as constructor arguments; for ``mf`` the requester's public task profiles
    are drawn here from ``d`` (default 10) and ``profile_seed`` (default 0)."""
    if mechanism == "mf":
        d = params.pop("d", 10)
        seed = params.pop("profile_seed", 0)
        params["profiles"] = task_profiles(n_tasks, d, rng=seed)
    return params


@contextmanager
def _progress(enabled: bool, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar over EM iterations, shown on a terminal (or when forced)."""
    if not enabled:
        yield None
        return
    state: dict[str, Any] = {}

    def tick(n_iter: int, max_iter: int) -> None:
        if "bar" not in state:
            state["bar"] = click.progressbar(length=max_iter, label=label, file=sys.stderr)
            state["bar"].__enter__()
        state["bar"].update(n_iter - state.get("done", 0))
        state["done"] = n_iter

    try:
        yield tick
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)


def _read_truth_csv(path: str) -> pd.Series:
    try:
        frame = pd.read_csv(path, dtype={"task": str})
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValidationError(
            f"Cannot parse {path!r} as CSV: {str(exc).splitlines()[0]}."
        ) from None
    missing = [c for c in ("task", "truth") if c not in frame.columns]
    if missing:
        raise ValidationError(
            f"{path!r} lacks column(s) {missing}: expected ['task', 'truth'], found "
            f"{list(frame.columns)}."
        )
    if frame["task"].duplicated().any():
        dup = frame["task"][frame["task"].duplicated()].iloc[0]
        raise ValidationError(f"{path!r} names task {dup!r} twice. Give one truth per task.")
    return frame.set_index("task")["truth"]


# ---------------------------------------------------------------------- commands
# Options several commands share, spelt once.
ON_DUPLICATE = click.option(
    "--on-duplicate",
    type=click.Choice(["error", "first", "last", "majority", "mean"]),
    default="error",
    show_default=True,
    help="Repeated (task, worker) pairs.",
)
ANSWER_KIND = click.option(
    "--kind",
    type=click.Choice(["auto", "categorical", "numeric"]),
    default="auto",
    show_default=True,
    help="Answer type; 'auto': floats are numeric, the rest labels.",
)
MECHANISM = click.option(
    "--mechanism", "-M", required=True, type=click.Choice(list(MECHANISMS)), help="Local mechanism."
)


def mechanism_params(example: str = "") -> Callable[[Any], Any]:
    """The mechanism-parameter option, spelt as every command accepts it (``-p``/``--param``
    outside infer, ``--mechanism-param`` everywhere)."""
    example = f"; {example}" if example else ""
    return click.option(
        "--param",
        "-p",
        "--mechanism-param",
        "param",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Mechanism parameter, repeatable{example} (--mechanism-param is the same, as "
        "infer spells it).",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="privtd")
def cli() -> None:
    """privtd: privacy-preserving truth discovery for crowdsourcing."""


@cli.command()
@click.argument("answers", type=click.Path())
@click.option(
    "--method",
    "-m",
    type=click.Choice([*METHODS, *RELEASE_METHODS]),
    help="Inference method (default with --mechanism: the perturbation-aware one).",
)
@click.option(
    "--mechanism",
    "-M",
    type=click.Choice(list(MECHANISMS)),
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
    help="CSV to write: task,truth.",
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
    task_col: str,
    worker_col: str,
    answer_col: str,
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
    """Infer each task's truth and each worker's quality from ANSWERS (CSV or Parquet)."""
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
            (task_col, worker_col, answer_col),
        )
        return
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
    data: Any
    if engine == "dask":
        from .inference import distributed

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
            distributed.fit_distributed(estimator, data, gold=gold_series)
        else:
            estimator.fit(data, gold=gold_series)
    elapsed = time.perf_counter() - start
    # Check every requested output before writing any, so a failure leaves no partial set.
    if probas_output and estimator.probas_ is None:
        raise ValidationError(f"Method {method!r} gives no probabilities; drop --probas-output.")
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
    from .inference import BinaryRelevance

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


def _note_pooled_interval(low: float, high: float) -> None:
    """Where the reports say little, AwareNull's learned prior takes the tasks to the pooled
    answers: say so when the release fixes their median to no better than one score."""
    if high - low > 1.0:
        click.echo(
            f"privtd: note: this release fixes the pooled answers' median only to "
            f"{low:.2f}-{high:.2f} (bootstrap, nominal 90%); most tasks' truths follow it "
            "at this epsilon and sparsity, so treat them as uncertain.",
            err=True,
        )


@cli.command("evaluate")
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
    metrics = evaluate(_read_truth_csv(truths), _read_truth_csv(reference), kind=kind)
    if as_json:
        click.echo(json.dumps(metrics))
        return
    for key, value in metrics.items():
        shown = f"{int(value)}" if key.startswith("n_") else f"{value:.4f}"
        click.echo(f"{key:>12}: {shown}")


@cli.group("datasets")
def datasets_group() -> None:
    """List or export the bundled real datasets."""


@datasets_group.command("list")
def datasets_list() -> None:
    """Name, type and description of each bundled dataset."""
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
    for path in datasets_mod.export(name, output):
        click.echo(str(path))


DEMO_METHODS = ("mv", "wv", "crh", "catd", "ds", "one-coin-ds", "lc")


@cli.command()
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


@cli.command()
@click.argument("answers", type=click.Path(dir_okay=False))
@MECHANISM
@click.option(
    "--epsilon",
    "-e",
    type=float,
    help="Target per-answer epsilon; the mechanism is calibrated to it.",
)
@mechanism_params("e.g. -p a=0.1; or -p f=0.3 without --epsilon")
@click.option(
    "--seed",
    type=int,
    help="Integer seed: a reproducible simulation from privtd's fast keyed generator (not "
    "cryptographic). Without it: a real release, drawn from the OS cryptographic generator "
    "(numeric noise by OpenDP's exact samplers: pip install 'privtd[dp]').",
)
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    help="CSV to write: task,worker,answer (perturbed).",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    help="JSON to write: mechanism, parameters, guarantee and every worker's total.",
)
@click.option(
    "--allow-float-leak",
    is_flag=True,
    help="mf only: make a real release (no --seed) although mf's floating-point rows can rule "
    "out neighbouring answers whatever epsilon says (Mironov 2012; docs/privacy.md). Without "
    "it a real mf release is refused.",
)
@ON_DUPLICATE
def perturb(
    answers: str,
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    seed: int | None,
    output: str,
    report: str | None,
    allow_float_leak: bool,
    on_duplicate: str,
) -> None:
    """Perturb ANSWERS as each worker would on their device.

    Without --seed this is a real release: categorical mechanisms draw from the OS
    cryptographic generator (os.urandom), numeric ones (laplace, exp-gaussian) release points
    of a public grid with exact discrete Laplace or Gaussian noise from OpenDP, so no release
    rules out a neighbouring answer through floating point. With --seed it is a simulation of
    the same laws from a fast keyed generator: reproducible, not for real data. mf's noise is
    real-valued: its guarantee holds for real arithmetic only (docs/privacy.md), so a real mf
    release needs --allow-float-leak.
    """
    if allow_float_leak and mechanism != "mf":
        raise ValidationError(
            f"--allow-float-leak applies to mf only; {mechanism} releases on a public grid."
        )
    for path in (output, report):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValidationError(f"The folder of {path!r} does not exist. Create it first.")
    kind = MECHANISMS[mechanism].kind
    try:
        data = Answers.from_path(answers, kind=kind, on_duplicate=on_duplicate)
    except NotNumericError as exc:
        # The reader's advice (read them as labels) does not apply: the mechanism fixes the kind.
        labels = ", ".join(name for name, cls in MECHANISMS.items() if cls.kind == "categorical")
        raise ValidationError(
            f"{exc.found}. The {mechanism} mechanism perturbs numbers; for labels use one of "
            f"{labels}."
        ) from None
    for note in data.notes:
        click.echo(f"privtd: note: {note}", err=True)
    params = _mechanism_params(mechanism, _parse_params(param), data.n_tasks)
    if kind == "categorical":
        params.setdefault("n_labels", data.n_labels)
    if allow_float_leak:
        params["allow_float_leak"] = True
    mech = make_mechanism(mechanism, epsilon, **params)
    if seed is None and allow_float_leak:
        click.echo(
            "privtd: warning: a real mf release: its guarantee holds for real arithmetic only "
            "and the floating-point leak (Mironov 2012) is not closed (docs/privacy.md).",
            err=True,
        )
    perturbed = mech.perturb(data, rng=seed)
    summary: dict[str, Any] = {
        "mechanism": mechanism,
        "parameters": mech.params(),
        "guarantee": {
            "epsilon": mech.guarantee.epsilon,
            "delta": mech.guarantee.delta,
            "unit": mech.guarantee.unit,
            "note": mech.guarantee.note,
        },
        "seed": seed,
        "n_answers": data.n_answers,
        "n_output": perturbed.n_answers,
    }
    if perturbed.n_answers == data.n_answers:  # same cells: say how many changed
        summary["changed_fraction"] = float((perturbed.value != data.value).mean())
    totals = worker_totals(data, mech)
    summary["workers"] = {
        str(w): {"n_released": int(r.n_released), "epsilon_total": float(r.epsilon_total)}
        for w, r in totals.iterrows()
    }
    if isinstance(mech, TwoLayerRR) and seed is not None:
        # Only a simulation knows each f_u; report what it means per worker (SPEC C3b).
        cond = mech.conditional_epsilons(mech.flips_for(data, seed))
        summary["conditional_epsilon_quantiles"] = {
            q: float(np.quantile(cond, float(q))) for q in ("0.1", "0.5", "0.9", "1.0")
        }
    _atomic_csv(perturbed.to_frame(), output, index=False)
    if report:
        atomic_write_text(report, json.dumps(summary, indent=2, default=str))
    changed = (
        f"{summary['changed_fraction']:.1%} changed"
        if "changed_fraction" in summary
        else f"{perturbed.n_answers} output cells"
    )
    click.echo(
        f"{mechanism}: {mech.guarantee}; {data.n_answers} answers of {data.n_workers} workers, "
        f"{changed} -> {output}",
        err=True,
    )


@cli.command("audit")
@MECHANISM
@click.option("--epsilon", "-e", type=float, help="Calibrate the mechanism to this epsilon.")
@mechanism_params()
@click.option(
    "--samples",
    "-n",
    default=1_000_000,
    show_default=True,
    type=int,
    help="Samples per neighbouring input.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sampling.")
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=float,
    help="Confidence of the lower bound (simultaneous over outputs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def audit_cmd(
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    samples: int,
    seed: int,
    confidence: float,
    as_json: bool,
) -> None:
    """Measure a mechanism's privacy loss on neighbouring inputs against its claim.

    Exits 1 when the measured lower bound exceeds the claimed epsilon.
    """
    from .audit import audit

    mech = make_mechanism(
        mechanism, epsilon, **_mechanism_params(mechanism, _parse_params(param), 1)
    )
    result = audit(mech, samples=samples, seed=seed, confidence=confidence)
    fields = {
        "mechanism": mechanism,
        "claimed_epsilon": result.claimed_epsilon,
        "lower_bound": result.lower_bound,
        "point_estimate": result.point_estimate,
        "samples": samples,
        "confidence": confidence,
        "verdict": result.verdict,
    }
    if as_json:
        click.echo(json.dumps(fields))
    else:
        for key, value in fields.items():
            shown = f"{value:.6g}" if isinstance(value, float) else str(value)
            click.echo(f"{key:>16}: {shown}")
    if not result.holds:
        sys.exit(1)


@cli.command("attack")
@click.argument("perturbed", type=click.Path(dir_okay=False))
@click.option(
    "--original",
    required=True,
    type=click.Path(dir_okay=False),
    help="The original answers (only to score the attack; the attack never reads them).",
)
@click.option(
    "--mechanism",
    "-M",
    required=True,
    type=click.Choice(list(MECHANISMS)),
    help="The mechanism that produced PERTURBED (reported beside the result).",
)
@click.option("--epsilon", "-e", type=float, help="Its per-answer epsilon.")
@mechanism_params()
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def attack_cmd(
    perturbed: str,
    original: str,
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    as_json: bool,
) -> None:
    """Try to recover workers' original answers from PERTURBED, as an untrusted requester would,
    and report the fraction recovered against chance."""
    from .attack import attack

    if MECHANISMS[mechanism].kind != "categorical":
        raise ValidationError(f"The attack covers categorical mechanisms; {mechanism!r} is not.")
    orig = Answers.from_path(original, kind="categorical")
    assert orig.labels is not None
    pert = Answers.from_path(perturbed, kind="categorical", labels=list(orig.labels))
    # Same cells in the same order: align the perturbed rows to the original ones.
    key = pd.MultiIndex.from_arrays([pert.tasks.take(pert.task), pert.workers.take(pert.worker)])
    want = pd.MultiIndex.from_arrays([orig.tasks.take(orig.task), orig.workers.take(orig.worker)])
    pos = key.get_indexer(want)
    if (pos < 0).any() or len(key) != len(want):
        raise ValidationError("PERTURBED and --original must hold the same (task, worker) cells.")
    aligned = orig.with_values(pert.value[pos])
    params = _parse_params(param)
    params.setdefault("n_labels", orig.n_labels)
    mech = make_mechanism(mechanism, epsilon, **params)
    result: dict[str, Any] = {**attack(orig, aligned).as_dict(), "claimed": str(mech.guarantee)}
    if as_json:
        click.echo(json.dumps(result))
        return
    for key_, value in result.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        click.echo(f"{key_:>16}: {shown}")


@cli.command("secure-em")
@click.argument("answers", type=click.Path(dir_okay=False))
@click.option(
    "--model",
    type=click.Choice(["auto", "binary", "multiclass", "real"]),
    default="auto",
    show_default=True,
    help="Latent class model; 'auto': binary for 2 labels, multiclass for more, real for numbers.",
)
@click.option(
    "--backend",
    type=click.Choice(["masking", "paillier"]),
    default="masking",
    show_default=True,
    help="Secure sum: pairwise masks, or Paillier encryption.",
)
@click.option("--processes", is_flag=True, help="Run each worker in its own OS process.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="CSV to write: task,truth.")
@click.option(
    "--rounds-output", type=click.Path(dir_okay=False), help="CSV to write per-round costs."
)
@ANSWER_KIND
@click.option(
    "--value-range",
    nargs=2,
    type=float,
    metavar="LOW HIGH",
    help="Public answer range (real model).",
)
@click.option("--max-iter", type=int, default=500, show_default=True)
@click.option("--tol", type=float, help="Stopping tolerance (default: the plain estimator's).")
@click.option("--fraction-bits", type=int, default=40, show_default=True)
@click.option(
    "--key-bits",
    type=int,
    default=2048,
    show_default=True,
    help="Paillier key size; keys under 2048 bits can be factored and are refused.",
)
@click.option(
    "--min-answers",
    type=int,
    default=3,
    show_default=True,
    metavar="K",
    help="Tasks with fewer than K answers (counted by a first secure sum) are left out of every "
    "later sum and get no truth (empty in the output): with one answer a task's sums are that "
    "worker's own terms. At least 2. The requester learns every task's answer count.",
)
@click.option(
    "--allow-leaky-rerun",
    is_flag=True,
    help="REVEALS ANSWERS. Retry a round without a worker that dropped out, and allow a run over "
    "other workers than an earlier run of --campaign or of the workers' own records "
    "(--worker-history; the flag sets every simulated worker's policy). The difference of two "
    "sums over two sets of workers tells the requester which tasks the missing workers answered "
    "and their labels. Without this flag a drop-out stops the run and no sum over fewer workers "
    "is released.",
)
@click.option(
    "--campaign",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="The requester's JSON record of the workers of this campaign's earlier runs (created if "
    "missing, updated after each run). A run over other workers than an earlier one is refused "
    "unless --allow-leaky-rerun. It guards an honest requester against a mistake; the workers' "
    "own records (--worker-history) are what a dishonest requester cannot reset.",
)
@click.option(
    "--worker-history",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Folder of the workers' own records, one file per worker (DIR/<worker id>.json, "
    "holding its private identity key: keep DIR private). Each worker refuses, before it sends "
    "anything that depends on its answers, a run that shares a task with a run it took part in "
    "but not its workers (by their long-term keys) or not its answers, unless "
    "--allow-leaky-rerun. Without it, separate invocations start with workers that remember "
    "nothing, and nothing stops a requester that re-runs without a worker from learning that "
    "worker's answers.",
)
@ON_DUPLICATE
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary, not every round.")
def secure_em_cmd(
    answers: str,
    model: str,
    backend: str,
    processes: bool,
    output: str | None,
    rounds_output: str | None,
    kind: str,
    value_range: tuple[float, float] | None,
    max_iter: int,
    tol: float | None,
    fraction_bits: int,
    key_bits: int,
    min_answers: int,
    allow_leaky_rerun: bool,
    campaign: str | None,
    worker_history: str | None,
    on_duplicate: str,
    quiet: bool,
) -> None:
    """Run P2's worker-private EM on ANSWERS with one party per worker.

    Each worker keeps its answers and its quality parameters; the requester sees only secure
    sums, and from them each task's answer count, posteriors every round and the truths
    (docs/secure.md lists all it learns). Prints, per round, the time and the bytes sent by the
    requester and by the workers.

    A task with fewer than --min-answers answers gets no truth: its sums would expose the few
    workers who answered it. A worker that drops out stops the run: re-running without it would
    reveal its answers, and needs --allow-leaky-rerun. With --worker-history, the workers
    themselves refuse such a re-run, whoever starts it.

    Not protected (docs/secure.md, "Known limits"): two tasks whose answerers differ by one
    worker give the requester that worker's terms from the difference of their sums, whatever
    --min-answers is; each worker learns from the posteriors whether the others who answered
    its tasks agreed with it; with --backend paillier a dishonest requester can have one
    worker's ciphertexts decrypted by the key holder (use masking where that matters).
    """
    from .secure import RoundStats, SecureEM

    for path in (output, rounds_output):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValidationError(f"The folder of {path!r} does not exist. Create it first.")
    data = Answers.from_path(answers, kind=kind, on_duplicate=on_duplicate)
    for note in data.notes:
        click.echo(f"privtd: note: {note}", err=True)
    n_workers = data.n_workers

    def report(stats: RoundStats) -> None:
        if not quiet:
            click.echo(
                f"round {stats.round:4d} {stats.phase:5s} {stats.seconds:8.3f} s | requester "
                f"{stats.requester_seconds:7.3f} s, sent {stats.requester_bytes_sent:>11,} B | "
                f"workers max {stats.worker_seconds_max:7.3f} s, sent "
                f"{stats.worker_bytes_sent:>12,} B ({stats.worker_bytes_sent // n_workers:,} each)",
                err=True,
            )

    estimator = SecureEM(
        model,
        backend,
        processes=processes,
        tol=tol,
        max_iter=max_iter,
        fraction_bits=fraction_bits,
        key_bits=key_bits,
        value_range=value_range,
        min_answers=min_answers,
        allow_leaky_rerun=allow_leaky_rerun,
        campaign=campaign,
        worker_history=worker_history,
        on_round=report,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        # The tasks left out are reported below, with what to do.
        warnings.filterwarnings("ignore", message=".*too few answers to protect")
        estimator.fit(data)
    elapsed = time.perf_counter() - start
    left_out = len(estimator.too_few_answers_)
    if left_out:
        click.echo(
            f"privtd: note: {left_out} of {data.n_tasks} task(s) have fewer than {min_answers} "
            "answers: too few answers to protect. They were left out of every secure sum and "
            "have no truth (empty in the output); collect more answers for them, or lower "
            "--min-answers (at least 2).",
            err=True,
        )
    if output:
        _atomic_csv(estimator.truths_.rename_axis("task").reset_index(), output, index=False)
    if rounds_output:
        _atomic_csv(estimator.rounds_, rounds_output, index=False)
    rounds = estimator.rounds_
    status = "converged" if estimator.converged_ else "did not converge"
    dropped = (
        f", {len(estimator.dropped_)} worker(s) dropped out (their answers leaked: "
        "--allow-leaky-rerun)"
        if estimator.dropped_
        else ""
    )
    click.echo(
        f"secure-em ({estimator.spec_.model}, {backend}"
        f"{', one process per worker' if processes else ''}): {data.n_tasks} tasks, "
        f"{n_workers} workers, {data.n_answers} answers; {estimator.n_iter_} iteration(s), "
        f"{status}{dropped}, {elapsed:.2f} s; requester sent "
        f"{int(rounds.requester_bytes_sent.sum()):,} B, workers sent "
        f"{int(rounds.worker_bytes_sent.sum()):,} B" + (f" -> {output}" if output else ""),
        err=True,
    )
    if not output:
        table = estimator.truths_.rename_axis("task").reset_index()
        click.echo(table.to_csv(index=False), nl=False)


@cli.command("reproduce")
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
    help="Folder for table.csv, table.md, run.json, checks.md and figures ('all': one each).",
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
    tables, figures, checks and run record."""
    from .experiments import report, runner

    out = Path(out_dir)
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
    for check in outcome.checks:
        click.echo(f"[{check['verdict']}] {check['claim']}: {check['ours']}")
    written = ", ".join(dict.fromkeys(str(p) for p in outcome.written))
    click.echo(f"{outcome.facts['seconds']} s; wrote {written}")


@cli.command("epsilon")
@MECHANISM
@click.option(
    "--epsilon", "-e", type=float, help="Print the parameters that achieve this per-answer epsilon."
)
@mechanism_params("e.g. -p f=0.3 -p n_labels=4")
def epsilon_cmd(mechanism: str, epsilon: float | None, param: tuple[str, ...]) -> None:
    """Print a mechanism's guarantee, or with --epsilon the parameters that achieve it."""
    mech = make_mechanism(
        mechanism, epsilon, **_mechanism_params(mechanism, _parse_params(param), 1)
    )
    shown = [
        f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in mech.params().items()
    ]
    click.echo(f"{mechanism}: {', '.join(shown)}")
    click.echo(f"guarantee: {mech.guarantee}")
    if mech.guarantee.note:
        click.echo(f"note: {mech.guarantee.note}")


# ---------------------------------------------------------------------- service
def _service() -> Any:
    try:
        from . import service
    except ImportError as exc:
        raise ImportError(
            f"The service needs its extra ({exc.name} is missing): pip install 'privtd[service]'."
        ) from None
    return service


@cli.command()
@click.option(
    "--db",
    "url",
    default="sqlite:///privtd.db",
    show_default=True,
    help="Database URL: sqlite:///FILE, or postgresql://USER@HOST:PORT/DB.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--requester-token",
    envvar="PRIVTD_REQUESTER_TOKEN",
    help="Register this requester token (env PRIVTD_REQUESTER_TOKEN), at least 32 random "
    "characters (python -c 'import secrets; print(secrets.token_urlsafe(32))'); without it, a "
    "new database makes one and prints it once.",
)
@click.option(
    "--max-epsilon",
    type=float,
    default=10.0,
    show_default=True,
    help="Refuse campaigns whose epsilon per answer is above this, however their parameters "
    "are given (and take no reports for one made under a laxer ceiling).",
)
def serve(url: str, host: str, port: int, requester_token: str | None, max_epsilon: float) -> None:
    """Run the collection service: workers submit perturbed reports, the requester aggregates.

    The API is described at /docs (OpenAPI at /openapi.json); workers' page at /collect.
    """
    service = _service()
    import uvicorn

    app = service.create_app(url, requester_token=requester_token, max_epsilon=max_epsilon)
    if app.state.new_requester_token:
        click.echo(f"requester token (shown once): {app.state.new_requester_token}", err=True)
    if app.state.runner.interrupted:
        click.echo(
            f"{app.state.runner.interrupted} aggregation run(s) left running by a server that "
            "stopped are marked failed; start them again (privtd campaign aggregate)",
            err=True,
        )
    click.echo(f"privtd serve: {url} on http://{host}:{port}", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


DB = click.option(
    "--db",
    "url",
    default="sqlite:///privtd.db",
    show_default=True,
    help="The server's database URL (as given to privtd serve).",
)


@cli.group()
def requester() -> None:
    """The server operator's side: list requesters, revoke or replace a requester's token.

    These work on the database directly (run them where privtd serve runs), so they work when
    the token itself is lost or leaked. A requester holding its token can do the same over the
    API: DELETE /requester/token revokes it, POST /requester/token replaces it.
    """


@requester.command("list")
@DB
def requester_list(url: str) -> None:
    """Print every requester: id, created, revoked (or -), number of campaigns."""
    service = _service()
    engine = service.db.connect(url)
    for r in service.requesters.listing(engine):
        revoked = "-" if r["revoked_at"] is None else f"revoked {r['revoked_at']:%Y-%m-%d %H:%M}"
        click.echo(f"{r['id']}  {r['created_at']:%Y-%m-%d %H:%M}  {revoked}  {r['campaigns']}")
    engine.dispose()


@requester.command("revoke")
@click.argument("requester_id")
@DB
def requester_revoke(requester_id: str, url: str) -> None:
    """Revoke REQUESTER_ID's token: refused from now on (its campaigns stay; rotate makes a
    new token for them)."""
    service = _service()
    engine = service.db.connect(url)
    service.requesters.revoke(engine, requester_id)
    engine.dispose()
    click.echo(f"revoked the token of requester {requester_id}", err=True)


@requester.command("rotate")
@click.argument("requester_id")
@DB
def requester_rotate(requester_id: str, url: str) -> None:
    """Print a new token for REQUESTER_ID (its campaigns); the old token stops working."""
    service = _service()
    engine = service.db.connect(url)
    token = service.requesters.rotate(engine, requester_id)
    engine.dispose()
    click.echo(token)
    click.echo("the previous token of this requester no longer works", err=True)


TOKEN = click.option(
    "--token",
    envvar="PRIVTD_REQUESTER_TOKEN",
    required=True,
    help="The requester token (env PRIVTD_REQUESTER_TOKEN).",
)


@cli.group()
def campaign() -> None:
    """A requester's side of the service: create a campaign, aggregate its reports."""


@campaign.command("create")
@click.argument("url")
@click.option(
    "--tasks",
    "tasks_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True),
    help="CSV with a 'task' column (and optionally 'text', shown to workers).",
)
@click.option("--mechanism", required=True, help="one-layer, two-layer, binary-rr, ...")
@click.option("--epsilon", type=float, help="The mechanism's epsilon (or give --param).")
@click.option(
    "--param",
    "--mechanism-param",
    "param",
    multiple=True,
    help="Mechanism parameter KEY=VALUE (repeatable; --mechanism-param is the same).",
)
@click.option("--labels", help="Comma-separated answer domain, for categorical mechanisms.")
@click.option("--budget", required=True, type=float, help="Each worker's privacy budget.")
@click.option("--method", help="Inference method (default: the perturbation-aware one).")
@click.option("--name", default="campaign", show_default=True)
@click.option(
    "--open-enrolment",
    is_flag=True,
    help="Let anyone with the campaign id enrol, without a code. Anyone can then add fake "
    "workers, each with a fresh budget; by default workers need a code ('campaign codes').",
)
@click.option("--max-workers", type=click.IntRange(min=1), help="Admit at most this many workers.")
@TOKEN
def campaign_create(
    url: str,
    tasks_path: str,
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    labels: str | None,
    budget: float,
    method: str | None,
    name: str,
    open_enrolment: bool,
    max_workers: int | None,
    token: str,
) -> None:
    """Create a campaign on the server at URL; prints its id and the workers' page. Workers
    enrol with codes from 'privtd campaign codes' unless --open-enrolment is given."""
    from .client import Requester

    frame = pd.read_csv(tasks_path, dtype=str, keep_default_na=False)
    if "task" not in frame.columns:
        raise ValidationError(f"{tasks_path} lacks a 'task' column.")
    if frame.empty or (frame["task"] == "").any():
        raise ValidationError(f"{tasks_path} has no tasks, or an empty task key.")
    if frame["task"].duplicated().any():
        dup = frame["task"][frame["task"].duplicated()].iloc[0]
        raise ValidationError(f"{tasks_path} names task {dup!r} twice; one row per task.")
    texts = frame["text"] if "text" in frame.columns else [""] * len(frame)
    tasks = [{"key": k, "text": t} for k, t in zip(frame["task"], texts, strict=True)]
    domain = None if labels is None else [_parse_value(v.strip()) for v in labels.split(",")]
    made = Requester(url, token).create_campaign(
        name,
        tasks,
        mechanism,
        budget=budget,
        epsilon=epsilon,
        params=_parse_params(param),
        labels=domain,
        method=method,
        open_enrolment=open_enrolment,
        max_workers=max_workers,
    )
    click.echo(made["id"])
    if made.get("warning"):
        click.echo(f"privtd: warning: {made['warning']}", err=True)
    click.echo(
        f"{len(tasks)} tasks, {made['mechanism']['guarantee']}, method {made['method']}; "
        f"workers open {url.rstrip('/')}/collect?campaign={made['id']}",
        err=True,
    )


@campaign.command("codes")
@click.argument("url")
@click.argument("campaign_id")
@click.option("--count", "-n", default=1, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--expires-in",
    type=click.FloatRange(min=0, min_open=True),
    help="Hours until the codes expire (default: never).",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="File for the codes.")
@TOKEN
def campaign_codes(
    url: str, campaign_id: str, count: int, expires_in: float | None, output: str | None, token: str
) -> None:
    """Issue enrolment codes for CAMPAIGN_ID: each admits one worker, once. Hand each to one
    person; they are shown here only (the server keeps their hashes)."""
    from .client import Requester

    out = Requester(url, token).issue_codes(
        campaign_id, count, expires_in=None if expires_in is None else expires_in * 3600
    )
    text = "".join(f"{c}\n" for c in out["codes"])
    if output:
        atomic_write_text(Path(output), text)
    else:
        click.echo(text, nl=False)
    until = f", expiring {out['expires_at']}" if out["expires_at"] else ""
    click.echo(f"{len(out['codes'])} enrolment code(s){until}", err=True)


@campaign.command("aggregate")
@click.argument("url")
@click.argument("campaign_id")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="CSV: task,truth,confidence.")
@click.option("--workers", type=click.Path(dir_okay=False), help="CSV: worker,weight.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=1800.0,
    show_default=True,
    help="Seconds to wait for the run; past them the command fails and the run goes on.",
)
@TOKEN
def campaign_aggregate(
    url: str,
    campaign_id: str,
    output: str | None,
    workers: str | None,
    timeout: float,
    token: str,
) -> None:
    """Run the campaign's estimator on its reports (resuming from the last run) and write the
    truths; prints the privacy report."""
    from .client import Requester

    def progress(run: dict[str, Any]) -> None:
        if run["status"] == "running" and sys.stderr.isatty():
            click.echo(f"\riteration {run['iteration']}", nl=False, err=True)

    result = Requester(url, token).aggregate(campaign_id, progress=progress, timeout=timeout)
    truths = pd.Series(result["truths"], name="truth").rename_axis("task")
    frame = truths.to_frame()
    if result["confidence"] is not None:
        frame["confidence"] = pd.Series(result["confidence"])
    if output:
        _atomic_csv(frame, output, index=True)
    else:
        click.echo(frame.to_csv(), nl=False)
    if workers:
        weights = pd.Series(result["workers"], name="weight").rename_axis("worker")
        _atomic_csv(weights.to_frame(), workers, index=True)
    privacy = result["privacy"]
    click.echo(
        f"{result['n_reports']} reports, {len(truths)} tasks with answers ({result['method']}); "
        f"{privacy['guarantee']}; budget per worker epsilon {privacy['budget_per_worker']:g}",
        err=True,
    )
    if "pooled_median_interval" in result:
        _note_pooled_interval(*result["pooled_median_interval"])


LEDGER = click.option(
    "--ledger",
    envvar="PRIVTD_LEDGER",
    type=click.Path(dir_okay=False),
    help="Your ceiling file (env PRIVTD_LEDGER; default privtd-ledger.json next to --state): "
    "keep one for all your campaigns, so the lifetime total counts them all.",
)


@cli.group()
def client() -> None:
    """A worker's side of the service: enrol, then perturb here and submit."""


@client.command("enrol")
@click.argument("url")
@click.argument("campaign_id")
@click.option("--name", required=True, help="The worker's name in the campaign.")
@click.option(
    "--state", required=True, type=click.Path(dir_okay=False), help="JSON file to keep state in."
)
@click.option("--code", envvar="PRIVTD_ENROLMENT_CODE", help="The enrolment code you were given.")
@LEDGER
def client_enrol(
    url: str, campaign_id: str, name: str, state: str, code: str | None, ledger: str | None
) -> None:
    """Enrol in CAMPAIGN_ID at URL; the token and the budget go to --state. The campaign's
    epsilon is shown and checked against your ceiling ('privtd client ceiling') first."""
    from .client import Worker

    campaign, ceiling = _preview(url, campaign_id, state, ledger)
    Worker.enrol(url, campaign_id, name, state, code=code, ledger=ceiling.path)
    click.echo(
        f"enrolled {name} in {campaign['name']!r}, budget epsilon {campaign['budget']:g}; "
        f"state in {state}"
    )


def _preview(url: str, campaign_id: str, state: str, ledger: str | None) -> Any:
    """Shows the campaign's epsilon and the worker's ceiling before anything is sent."""
    from .client import Worker

    # Refused here (CeilingExceededError, one line) when above the ceiling: nothing was sent.
    campaign, ceiling = Worker.preview(url, campaign_id, state, ledger)
    mech = campaign["mechanism"]
    click.echo(
        f"campaign {campaign['name']!r}: {mech['name']}, epsilon {mech['epsilon']:.4g} per "
        f"{mech['unit']} ({mech['guarantee']}); your ceiling: {ceiling.per_answer:g} per "
        f"answer, lifetime {ceiling.total:.4g} of {ceiling.lifetime:g} spent ({ceiling.path})",
        err=True,
    )
    return campaign, ceiling


@client.command("ceiling")
@LEDGER
@click.option("--state", type=click.Path(dir_okay=False), help="A state file (its ceiling).")
@click.option(
    "--per-answer", type=click.FloatRange(min=0, min_open=True), help="New per-answer ceiling."
)
@click.option(
    "--lifetime",
    type=click.FloatRange(min=0, min_open=True),
    help="New ceiling on the epsilon spent over all campaigns.",
)
def client_ceiling(
    ledger: str | None, state: str | None, per_answer: float | None, lifetime: float | None
) -> None:
    """Show (or change) your own ceiling: the largest epsilon per answer a campaign may use
    on your answers, and the total over all your campaigns. Defaults: 3 per answer, 100 in
    all (docs/service.md says why)."""
    from .client import Ceiling

    if ledger is None and state is not None:
        ledger = json.loads(Path(state).read_text()).get("ledger")
    # Without --state or --ledger: privtd-ledger.json in the current folder.
    ceiling = Ceiling.for_state(state or "state.json", ledger)
    if per_answer is not None or lifetime is not None:
        ceiling.set(per_answer=per_answer, lifetime=lifetime)
    click.echo(
        f"{ceiling.path}: at most epsilon {ceiling.per_answer:g} per answer; lifetime "
        f"{ceiling.total:.6g} of {ceiling.lifetime:g} spent over {len(ceiling.spent)} campaign(s)"
    )


@client.command("submit")
@click.argument("answers", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--state", required=True, type=click.Path(dir_okay=False), help="The worker's state file."
)
def client_submit(answers: str, state: str) -> None:
    """Perturb ANSWERS (CSV: task,answer) on this machine and submit them."""
    from .client import Worker

    frame = pd.read_csv(answers, dtype={"task": str})
    missing = {"task", "answer"} - set(frame.columns)
    if missing:
        raise ValidationError(f"{answers} lacks column(s) {sorted(missing)}; need task,answer.")
    if frame["task"].duplicated().any():
        raise ValidationError(f"{answers} names a task more than once; one answer per task.")
    if frame["answer"].isna().any():
        raise ValidationError(f"{answers} has empty answers; drop those rows.")
    worker = Worker(state)
    mech = worker.campaign()["mechanism"]
    click.echo(
        f"campaign epsilon {worker.epsilon:.4g} per {mech['unit']}; your ceiling "
        f"{worker.ceiling.per_answer:g}, lifetime {worker.ceiling.total:.4g} of "
        f"{worker.ceiling.lifetime:g} spent",
        err=True,
    )
    values = [v.item() if hasattr(v, "item") else v for v in frame["answer"]]
    out = worker.submit(dict(zip(frame["task"], values, strict=True)))
    click.echo(
        # The worker's own count: it includes releases the server refused (it received them).
        f"sent {out['n_reports']} perturbed report(s); spent epsilon "
        f"{worker.state['spent_epsilon']:g} of {worker.state['budget']:g}"
    )


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    click.echo(f"privtd: warning: {message}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every expected failure into one line and exit code 2."""
    warnings.showwarning = _show_warning
    try:
        cli.main(args=argv, prog_name="privtd", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted")
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PrivtdError as exc:
        _fail(str(exc))
    except ImportError as exc:
        if "pip install" not in str(exc):  # not a missing extra: a bug, handled below
            if os.environ.get("PRIVTD_DEBUG"):
                raise
            _fail(f"internal error (ImportError: {exc}); please report it")
        _fail(str(exc))  # an optional extra is missing; the message names the install line
    except (OSError, pd.errors.ParserError) as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except MemoryError:
        _fail("out of memory; try a smaller input or a machine with more memory")
    except Exception as exc:  # a bug: still one line, with a way to see the traceback
        if os.environ.get("PRIVTD_DEBUG"):
            raise
        _fail(
            f"internal error ({type(exc).__name__}: {exc}); please report it, and rerun with "
            "PRIVTD_DEBUG=1 for the traceback"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
