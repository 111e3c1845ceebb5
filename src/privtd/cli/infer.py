"""``privtd infer``, ``evaluate``, ``datasets`` and ``demo``: truth inference."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import click

from ..errors import ValidationError
from ..inference._tags import RANDOMIZED_RESPONSE  # the mechanisms AWARE_FORM's forms model
from ._common import (
    ANSWER_KIND,
    ON_DUPLICATE,
    TrackingGroup,
    _atomic_csv,
    _check_mechanism_keys,
    _echo_note,
    _mechanism_keys,
    _mechanism_params,
    _note_pooled_interval,
    _one_stdout,
    _parse_params,
    _progress,
    _read_answers,
    _read_reference,
    _read_truth_csv,
    _shown,
    _warn_label_set,
    _with_hint,
    answer_source,
)
from ._names import MECHANISM_NAMES, METHOD_NAMES

#: What each perturbation-aware method is without a mechanism (its estimator's docstring, for
#: mechanism=None): the note infer prints when one is asked for by name and told no mechanism.
#: aware-null has no such form: it reads a mechanism's release of whole rows.
AWARE_WITHOUT_MECHANISM = {
    "aware-one-coin": "a one-coin model with a learned accuracy prior (as one-coin-ds)",
    "aware-ds": "Dawid-Skene with a Dirichlet prior on the confusions (as ds)",
    "aware-select": "the choice among a pooled confusion, aware-one-coin and aware-ds, no channel",
    "aware-gaussian": "a hierarchical Gaussian model with a learned variance law",
    "aware-glad": "plain glad",
    "aware-mace": "plain mace",
    "aware-zencrowd": "plain zencrowd",
}

#: The perturbation-aware form of a plain method, for the note when a plain method is asked
#: for with a mechanism: each models randomized response (one-layer, two-layer, binary-rr).
AWARE_FORM = {
    "ds": "aware-ds",
    "one-coin-ds": "aware-one-coin",
    "glad": "aware-glad",
    "mace": "aware-mace",
    "zencrowd": "aware-zencrowd",
}


_GIVE_MECHANISM = "-M NAME -e EPSILON (or -p KEY=VALUE), or --mechanism-report FILE"


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
    "--param",
    "-p",
    "--mechanism-param",
    "param",
    multiple=True,
    metavar="KEY=VALUE",
    help="The mechanism's public parameter, repeatable (e.g. -p a=0.1), as in perturb and "
    "epsilon. Categorical mechanisms take n_labels from the answers unless given.",
)
@click.option(
    "--mechanism-report",
    type=click.Path(dir_okay=False),
    help="The JSON that `privtd perturb --report` wrote: the mechanism, its parameters and "
    "label set are read from it (instead of -M, -e and -p).",
)
@click.option(
    "--method-param",
    "-P",
    multiple=True,
    metavar="KEY=VALUE",
    help="Estimator parameter, repeatable (e.g. -P max_iter=50 -P tol=1e-4).",
)
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    help="CSV to write: task,truth ('-': standard output). With --engine dask, a name ending "
    "in .parquet is a folder the workers write, one Parquet file per shard (see "
    "docs/scale.md).",
)
@click.option(
    "--workers-output",
    type=click.Path(dir_okay=False),
    help="CSV to write per-worker weight, answer count and model columns ('-': standard output).",
)
@click.option(
    "--probas-output",
    type=click.Path(dir_okay=False),
    help="CSV to write per-task label probabilities, for models that have them ('-': "
    "standard output).",
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
    "a platform export, when it has any). The output then has a column gold (1: held fixed), "
    "and evaluate leaves those tasks out of its scores.",
)
@click.option(
    "--no-gold",
    is_flag=True,
    help="Fix no truth, not even a platform export's golden tasks (to score against them "
    "afterwards with evaluate).",
)
@click.option(
    "--decision",
    metavar="RULE",
    help="How each task's label is read from its posterior: 'map' (the most probable label, "
    "the Bayes decision for accuracy), 'balanced' (argmax posterior / class prior, for "
    "balanced accuracy), 'cost=LABEL:COST,...' (a miss of LABEL costs COST, other misses 1) "
    "or 'cost=TRUTH>DECIDED:COST,...' (per pair). Default: 'balanced' for the "
    "perturbation-aware models under a mechanism, 'map' otherwise. Needs a model with "
    "probabilities. See docs/inference.md#decisions.",
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
    metavar="tls://HOST:PORT",
    help="With --engine dask: a running `dask scheduler`, reached over TLS with --tls-ca-file, "
    "--tls-cert and --tls-key (default: a cluster on this machine, over TLS with a certificate "
    "made for the run). See docs/scale.md.",
)
@click.option(
    "--tls-ca-file",
    type=click.Path(dir_okay=False),
    help="With a tls:// --scheduler: the cluster's CA certificate (privtd cluster-certs).",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False),
    help="With a tls:// --scheduler: this client's certificate, which that CA signed.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False),
    help="With a tls:// --scheduler: this client's private key.",
)
@click.option(
    "--allow-plain-tcp",
    is_flag=True,
    help="Accept a tcp:// --scheduler, with no authentication and no encryption: anyone who "
    "can reach this address runs code here (on its workers, and in this process through the "
    "results they return). Only on a network no one else reaches.",
)
@click.option(
    "--pass-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="With --engine dask: how long one pass of the fit (or one step of reading the files) "
    "may take before the run stops with an error (default: 600).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="With --engine dask and no --scheduler: worker processes to start (default: one per "
    "core; at most two per core, within the machine's memory).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="With --engine dask: number of shards (default: about 5e6 answers each).",
)
@click.option(
    "--memory-limit",
    metavar="SIZE",
    help="With --engine dask and no --scheduler: each worker's memory limit (e.g. 7GB); past "
    "60%% of it a worker spills to its local disk rather than grow (docs/scale.md).",
)
def infer(
    answers: str,
    method: str | None,
    mechanism: str | None,
    epsilon: float | None,
    param: tuple[str, ...],
    mechanism_report: str | None,
    method_param: tuple[str, ...],
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
    no_gold: bool,
    decision: str | None,
    multi_label: str | None,
    progress: bool | None,
    engine: str,
    scheduler: str | None,
    tls_ca_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    allow_plain_tcp: bool,
    pass_timeout: float | None,
    workers: int | None,
    partitions: int | None,
    memory_limit: str | None,
) -> None:
    """Infer each task's truth and each worker's quality from ANSWERS: a long table (CSV, TSV
    or Parquet: task, worker, answer) or a platform's export (Toloka, MTurk, Label Studio,
    Appen; docs/formats.md), whose golden tasks are used as --gold.

    Parameters: -p/--param KEY=VALUE sets the mechanism's (as in perturb, epsilon, audit and
    attack), -P/--method-param KEY=VALUE the estimator's. Until the next release, a -p KEY
    that only the estimator takes still goes to it, with a warning.

    Perturbed answers: name the mechanism with -M and -e (and -p), or give the report perturb
    wrote with --mechanism-report; without --method the perturbation-aware estimator runs
    (docs/inference.md). An aware method (-m aware-glad, ...) given no mechanism runs with no
    channel, and a note says what model that is. Numeric-only methods (gtm, mean, median,
    raykar, sigma, ...) read integer answers as numbers; --kind overrides. With a numeric
    mechanism that adds noise (exp-gaussian, laplace), a warning says when the noise is wider
    than the answers, with its expected error (docs/inference.md).
    """
    _one_stdout(output=output, workers_output=workers_output, probas_output=probas_output)
    calibrated = epsilon is not None
    mechanism, mech_params, report_labels, moved = _mechanism_request(
        mechanism, mechanism_report, epsilon, param, calibrated
    )
    method_params = _parse_params(method_param, "-P/--method-param")
    if method is not None:
        _settle_moved(moved, method_params, method, mechanism, calibrated)
        moved = {}
    kind = _auto_kind(kind, mechanism, method)
    _check_request(output, workers_output, probas_output, mechanism, method, gold, no_gold)
    if multi_label is not None:
        _infer_multi_label(
            mechanism,
            engine,
            decision,
            answers,
            method,
            multi_label,
            _parse_params(method_param, "-P/--method-param"),
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
    parquet = _check_parquet(output, engine, probas_output, decision)
    source = _Source(fmt, delimiter, keep_rejected, task_col, worker_col, answer_col)
    cluster = _ClusterOptions(
        scheduler, workers, partitions, memory_limit, tls_ca_file, tls_cert, tls_key,
        allow_plain_tcp, pass_timeout,
    )  # fmt: skip
    if engine == "dask":
        data, imported = _ingest_on_cluster(answers, method, source, read, cluster), None
    else:
        imported = _read_in_memory(
            answers, source, read, report_labels, kind, mechanism, method, cluster
        )
        data = imported.answers
    for note in data.notes:
        _echo_note(note)
    _warn_label_set(data, answer_col)
    estimator, method, mech = _build_estimator(
        data, method, method_params, mechanism, epsilon, mech_params, calibrated, moved
    )
    chosen = _parse_decision(decision, data)  # a typo fails before the fit
    gold_series = _gold_truths(gold, no_gold, imported)
    elapsed = _fit(estimator, data, gold_series, method, engine, progress, output, parquet)
    truths, rule = _write_results(
        estimator, method, chosen, parquet, gold_series, output, workers_output, probas_output
    )
    _report(estimator, data, method, mechanism, mech, engine, truths, rule, elapsed, output)


def _mechanism_request(
    mechanism: str | None,
    mechanism_report: str | None,
    epsilon: float | None,
    param: tuple[str, ...],
    calibrated: bool,
) -> tuple[str | None, dict[str, Any], list[Any] | None, dict[str, Any]]:
    """The mechanism asked for (by -M or by --mechanism-report), its parameters, the label set
    of the report, and the -p KEYs the mechanism does not take (for the estimator, once the
    method is known)."""
    mech_params = _parse_params(param)
    report_labels: list[Any] | None = None
    if mechanism_report is not None:
        named, mech_params, report_labels = _read_report(mechanism_report)
        if mechanism is not None and mechanism != named:
            raise ValidationError(
                f"-M {mechanism} disagrees with {mechanism_report!r}, which names {named}; drop -M."
            )
        if epsilon is not None or param:
            raise ValidationError(
                f"{mechanism_report!r} fixes the mechanism's parameters; drop -e and -p."
            )
        mechanism = named
    # -p is the mechanism's; a KEY only the estimator takes is the old spelling (-P now),
    # still accepted for one release once the method is known.
    moved: dict[str, Any] = {}
    if mechanism_report is not None:
        pass  # the report's parameters are the mechanism's, as perturb built it
    elif mechanism is not None:
        keys = _mechanism_keys(mechanism, calibrated)
        moved = {k: v for k, v in mech_params.items() if k not in keys}
        mech_params = {k: v for k, v in mech_params.items() if k in keys}
    else:
        if epsilon is not None:
            raise ValidationError("--epsilon needs --mechanism (or --mechanism-report).")
        moved, mech_params = mech_params, {}
    return mechanism, mech_params, report_labels, moved


def _auto_kind(kind: str, mechanism: str | None, method: str | None) -> str:
    """``--kind auto`` settled where the mechanism fixes the kind, or a method that takes one
    kind only (integer population counts would otherwise be read as thousands of labels)."""
    if kind != "auto":
        return kind
    from ..inference import METHODS, RELEASE_METHODS

    if mechanism is not None:
        from ..mechanisms import MECHANISMS

        return MECHANISMS[mechanism].kind
    if method is not None:
        kinds = (METHODS.get(method) or RELEASE_METHODS[method]).kinds
        return kinds[0] if len(kinds) == 1 else kind
    return kind


def _check_request(
    output: str,
    workers_output: str | None,
    probas_output: str | None,
    mechanism: str | None,
    method: str | None,
    gold: str | None,
    no_gold: bool,
) -> None:
    """Refuse what no answers can make work (a missing output folder, an aware method that
    needs its mechanism, --gold with --no-gold) before reading them."""
    from ..inference import METHODS, RELEASE_METHODS, takes_mechanism
    from ..inference._tags import method_tags

    for path in (output, workers_output, probas_output):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValidationError(f"The folder of {path!r} does not exist. Create it first.")
    # Only the named method's estimator is imported here (``takes_mechanism``), not them all.
    if mechanism is None and method is not None and takes_mechanism(method):
        if method not in AWARE_WITHOUT_MECHANISM:
            releases = " or ".join(
                method_tags(METHODS.get(method) or RELEASE_METHODS[method], method).mechanisms
            )
            raise ValidationError(
                f"{method} reads the rows a mechanism ({releases}) released and needs it: give "
                f"{_GIVE_MECHANISM}."
            )
        # Asked for by name, the aware form runs without a channel: say what that is.
        click.echo(
            f"privtd: note: {method} without a mechanism is {AWARE_WITHOUT_MECHANISM[method]}; "
            f"to model the perturbation, give {_GIVE_MECHANISM}.",
            err=True,
        )
    if gold and no_gold:
        raise ValidationError("--gold and --no-gold contradict each other; give one.")


def _check_parquet(
    output: str, engine: str, probas_output: str | None, decision: str | None
) -> bool:
    """Whether the results go to a Parquet dataset (written by the Dask engine's workers),
    refusing the options that cannot go with one."""
    if not output.lower().endswith((".parquet", ".pq")):
        return False
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
    if decision is not None:
        raise ValidationError(
            "--decision re-reads the labels from the probabilities in memory; a Parquet "
            "output is written by the workers. Name a .csv output, or drop --decision."
        )
    return True


class _Source(NamedTuple):
    """How to read ANSWERS: infer's format and column options."""

    fmt: str
    delimiter: str | None
    keep_rejected: bool
    task_col: str | None
    worker_col: str | None
    answer_col: str | None


class _ClusterOptions(NamedTuple):
    """infer's options for the Dask engine, each refused by the in-memory one."""

    scheduler: str | None
    workers: int | None
    partitions: int | None
    memory_limit: str | None
    tls_ca_file: str | None
    tls_cert: str | None
    tls_key: str | None
    allow_plain_tcp: bool
    pass_timeout: float | None

    def given(self) -> list[str]:
        """The flags of the options given, in the order above."""
        return [f"--{name.replace('_', '-')}" for name, value in self._asdict().items() if value]


def _ingest_on_cluster(
    answers: str,
    method: str | None,
    source: _Source,
    read: dict[str, Any],
    cluster: _ClusterOptions,
) -> Any:
    """``--engine dask``: connect to (or start) the cluster, held open until the command ends,
    and ingest ANSWERS there."""
    from ..inference import distributed

    if method is not None and method not in distributed.DISTRIBUTED_METHODS:
        from ..inference import METHODS
        from ..inference.distributed._fit import not_distributed

        refusal = not_distributed(METHODS[method])
        raise ValidationError(f"-m {method}: {refusal} Leave out --engine dask.")
    if source.fmt not in ("auto", "long") or source.delimiter or source.keep_rejected:
        raise ValidationError(
            "--engine dask reads long CSV or Parquet tables only; read a platform export "
            "without --engine dask, or convert it first (docs/formats.md)."
        )
    read = {**read, "task": source.task_col or "task", "worker": source.worker_col or "worker"}
    read.update(answer=source.answer_col or "answer")
    c = cluster
    if c.scheduler is None and (c.tls_ca_file or c.tls_cert or c.tls_key or c.allow_plain_tcp):
        raise ValidationError(
            "--tls-ca-file, --tls-cert, --tls-key and --allow-plain-tcp go with a "
            "--scheduler; the cluster started here makes its own certificate."
        )
    security = distributed.tls_security(c.tls_ca_file, c.tls_cert, c.tls_key)
    if c.scheduler is not None:
        distributed.check_scheduler(c.scheduler, security, c.allow_plain_tcp)
    files = distributed.resolve_files(answers)  # a wrong path fails before any cluster
    client = click.get_current_context().with_resource(
        distributed.connect(
            scheduler=c.scheduler,
            workers=c.workers,
            memory_limit=c.memory_limit,
            security=security,
            allow_plain_tcp=c.allow_plain_tcp,
            pass_timeout=c.pass_timeout or distributed.PASS_TIMEOUT,
        )
    )
    return distributed.ingest(files, client, partitions=c.partitions, **read)


def _read_in_memory(
    answers: str,
    source: _Source,
    read: dict[str, Any],
    report_labels: list[Any] | None,
    kind: str,
    mechanism: str | None,
    method: str | None,
    cluster: _ClusterOptions,
) -> Any:
    """The in-memory engine: ANSWERS read from one file, with its export's golden tasks
    (:class:`privtd.io.Imported`); the Dask engine's options are refused."""
    from ..errors import NotNumericError

    given = cluster.given()
    if given:
        raise ValidationError(f"{', '.join(given)} need --engine dask.")
    if Path(answers).is_dir():
        raise ValidationError(
            f"{answers!r} is a directory. Pass a file, or --engine dask for a directory."
        )
    if report_labels is not None and kind == "categorical":
        read = {**read, "labels": report_labels}  # labels the release never drew are still labels
    try:
        return _read_answers(
            answers,
            source.fmt,
            source.delimiter,
            source.task_col,
            source.worker_col,
            source.answer_col,
            source.keep_rejected,
            **read,
        )
    except NotNumericError as exc:
        because = (
            f"the {mechanism} mechanism perturbs numbers"
            if mechanism is not None
            else f"{method} takes numbers"
            if method is not None
            else "they were read as numbers"
        )
        raise ValidationError(
            f"{exc.found}: {because}. Fix them, or read them as labels (--kind "
            "categorical) with a method for labels."
        ) from None


def _build_estimator(
    data: Any,
    method: str | None,
    method_params: dict[str, Any],
    mechanism: str | None,
    epsilon: float | None,
    mech_params: dict[str, Any],
    calibrated: bool,
    moved: dict[str, Any],
) -> tuple[Any, str, Any]:
    """The estimator to fit, the method it runs (the mechanism's aware one where none was
    named) and the mechanism built from the request (None without one)."""
    from ..inference import (
        METHODS,
        NO_AWARE_METHOD,
        RELEASE_METHODS,
        aware_method,
        make_estimator,
        takes_mechanism,
    )

    params: dict[str, Any] = {}
    mech = None
    if mechanism is not None:
        from ..mechanisms import MECHANISMS, make_mechanism

        if (
            MECHANISMS[mechanism].kind == "categorical"
            and data.is_categorical
            and "n_labels" not in mech_params
            and "n_labels" in _mechanism_keys(mechanism, calibrated)
        ):
            # As perturb does: the label count comes from the answers unless given.
            mech_params["n_labels"] = data.n_labels
        mech = make_mechanism(
            mechanism, epsilon, **_mechanism_params(mechanism, mech_params, data.n_tasks)
        )
        if method is None:
            method = aware_method(mech)
            if method is None:
                why = NO_AWARE_METHOD.get(mechanism, "none is implemented")
                raise ValidationError(
                    f"No perturbation-aware estimator for the {mechanism} mechanism: {why}. "
                    "Pass --method to pick one (P3's aggregator: sigma)."
                )
            _settle_moved(moved, method_params, method, mechanism, calibrated)
        if takes_mechanism(method):
            params["mechanism"] = mech
        else:
            _note_channel_unused(method, mechanism, mech)
    if method is None:
        raise ValidationError("Pass --method, or --mechanism to use the perturbation-aware one.")
    kinds = (METHODS.get(method) or RELEASE_METHODS[method]).kinds
    if data.kind not in kinds:
        raise ValidationError(
            f"{method} takes {' or '.join(kinds)} answers; these were read as {data.kind}. "
            f"Pass --kind {kinds[0]}, or pick another method."
        )
    return make_estimator(method, **params, **method_params), method, mech


def _note_channel_unused(method: str, mechanism: str, mech: Any) -> None:
    """The user asked for a plain estimator: run it, but say the channel goes unused, and name
    the method's own aware form where it has one for this mechanism."""
    from ..inference import aware_method

    default = f"the perturbation-aware default ({aware_method(mech) or 'none'})"
    form = AWARE_FORM.get(method) if mechanism in RANDOMIZED_RESPONSE else None
    if form is None:
        instead = f"leave out --method for {default}"
    elif form == aware_method(mech):
        instead = f"pass -m {form}, its perturbation-aware form (the default here)"
    else:
        instead = f"pass -m {form}, its perturbation-aware form, or leave out --method for "
        instead += default
    click.echo(
        f"privtd: note: {method} does not model the {mechanism} mechanism; {instead}.",
        err=True,
    )


def _parse_decision(decision: str | None, data: Any) -> tuple[str, Any] | None:
    """``--decision``, parsed against the answers' labels: the rule and its costs."""
    if decision is None:
        return None
    from ..inference.decision import parse_decision

    if not data.is_categorical:
        raise ValidationError("--decision picks among labels; these answers are numbers.")
    return parse_decision(decision, data.labels)


def _gold_truths(gold: str | None, no_gold: bool, imported: Any) -> Any:
    """The truths held fixed in the fit: --gold's file, else the export's golden tasks (unless
    --no-gold), with a note on where the export's went."""
    export_gold = None if imported is None else imported.gold
    gold_series = _read_truth_csv(gold) if gold else None if no_gold else export_gold
    if export_gold is not None and not no_gold:
        from ..io import FORMAT_LABELS

        label = FORMAT_LABELS[imported.format]
        source = f"the {label} export" if imported.format != "long" else "its gold column"
        click.echo(
            f"privtd: note: {source} has {len(export_gold)} golden task(s); "
            + (
                "--gold replaces them" if gold else "using them as gold (--gold FILE replaces them)"
            ),
            err=True,
        )
    return gold_series


def _fit(
    estimator: Any,
    data: Any,
    gold_series: Any,
    method: str,
    engine: str,
    progress: bool | None,
    output: str,
    parquet: bool,
) -> float:
    """Fit in memory or on the cluster, with the progress line; the seconds it took."""
    show = sys.stderr.isatty() if progress is None else progress
    start = time.perf_counter()
    with _progress(show, f"{method}") as tick:
        estimator.progress = tick
        if engine == "dask":
            from ..inference import distributed

            distributed.fit_distributed(
                estimator, data, gold=gold_series, output=output if parquet else None
            )
        else:
            estimator.fit(data, gold=gold_series)
    return time.perf_counter() - start


def _write_results(
    estimator: Any,
    method: str,
    chosen: tuple[str, Any] | None,
    parquet: bool,
    gold_series: Any,
    output: str,
    workers_output: str | None,
    probas_output: str | None,
) -> tuple[Any, str]:
    """Write the truths (under --decision), the workers' weights and the probabilities; the
    truths (None for a Parquet output) and the decision rule."""
    # Check every requested output before writing any, so a failure leaves no partial set.
    if probas_output and estimator.probas_ is None:
        raise ValidationError(f"Method {method!r} gives no probabilities; drop --probas-output.")
    # A Parquet output is written by then, by the workers: the fit holds no truths here.
    truths, rule = (None, "map") if parquet else _decided(estimator, method, chosen)
    if truths is not None:
        table = truths.rename_axis("task").reset_index()
        if gold_series is not None:
            # Named, so that evaluate leaves them out: their truth is the gold by construction.
            table["gold"] = truths.index.isin(gold_series.index).astype(int)
        _atomic_csv(table, output, index=False)
    if workers_output:
        _atomic_csv(estimator.weights_.rename_axis("worker"), workers_output, index=True)
    if probas_output and estimator.probas_ is not None:
        _atomic_csv(estimator.probas_.rename_axis("task"), probas_output, index=True)
    return truths, rule


def _report(
    estimator: Any,
    data: Any,
    method: str,
    mechanism: str | None,
    mech: Any,
    engine: str,
    truths: Any,
    rule: str,
    elapsed: float,
    output: str,
) -> None:
    """The summary line on stderr, and the notes and warnings on what the fit can tell."""
    status = "converged" if estimator.converged_ else "did not converge"
    click.echo(
        f"{method}: {data.n_tasks} tasks, {data.n_workers} workers, {data.n_answers} answers; "
        f"{estimator.n_iter_} iteration(s), {status}, {elapsed:.3f} s -> {_shown(output)}",
        err=True,
    )
    if method == "aware-null":  # AwareNull, imported only for its own fits
        _note_pooled_interval(*estimator.pooled_median_interval_)
    if mechanism is not None and not data.is_categorical and engine == "memory":
        from ..mechanisms.utility import noise_warning

        noisy = noise_warning(mech, data)
        if noisy:
            click.echo(f"privtd: warning: {_with_hint(noisy, 'clip')}", err=True)
    if data.is_categorical and engine == "memory" and truths is not None:
        from ..inference import takes_mechanism
        from ..inference.decision import fitted_prior, one_class_warning

        warning = one_class_warning(
            truths,
            data,
            mechanism=mech if takes_mechanism(method) else None,
            method=method,
            prior=fitted_prior(estimator),
            decision=rule,
        )
        if warning:
            click.echo(f"privtd: warning: {_with_hint(warning, 'decision')}", err=True)


def _decided(estimator: Any, method: str, chosen: tuple[str, Any] | None) -> tuple[Any, str]:
    """The truths under ``--decision`` (parsed: the rule and its costs; None: the estimator's
    own decision), and the rule's name ("map" for an estimator without a decision parameter)."""
    from ..inference import decide
    from ..inference.decision import fitted_prior

    if chosen is None:
        return estimator.truths_, getattr(estimator, "decision_", "map")
    if estimator.probas_ is None:
        raise ValidationError(
            f"Method {method!r} gives no probabilities to decide from; drop --decision, or pick "
            "a method with probabilities (ds, aware-ds, glad, ...)."
        )
    rule, costs = chosen
    return decide(estimator.probas_, rule, prior=fitted_prior(estimator), costs=costs), rule


def _settle_moved(
    moved: dict[str, Any],
    method_params: dict[str, Any],
    method: str,
    mechanism: str | None,
    calibrated: bool,
) -> None:
    """Give the estimator the -p KEYs that only it takes (the spelling before -P), warning
    that it goes; any other KEY is unknown to both, and the error lists what each takes."""
    from ..inference import estimator_params

    taken = estimator_params(method)
    for key, value in moved.items():
        if key not in taken:
            if mechanism is not None:
                _check_mechanism_keys(mechanism, calibrated, {key: value})
            raise ValidationError(
                f"unknown parameter {key!r}: -p sets the mechanism's parameters (give -M), "
                f"-P the method's; {method} takes: {', '.join(taken) or 'none'}."
            )
        click.echo(
            f"privtd: warning: -p {key}=... for an estimator parameter is deprecated and goes "
            f"in the next release: -p is the mechanism's, as in perturb; write -P {key}=... "
            "(--method-param).",
            err=True,
        )
        if key in method_params:
            raise ValidationError(f"{key} is given by both -p and -P; give it once, with -P.")
        method_params[key] = value


def _read_report(path: str) -> tuple[str, dict[str, Any], list[Any] | None]:
    """The mechanism, its parameters and the label set of a `privtd perturb --report` JSON."""
    from ..mechanisms import MECHANISMS

    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(f"Cannot parse {path!r} as JSON: {exc}.") from None
    if (
        not isinstance(report, dict)
        or report.get("mechanism") not in MECHANISMS
        or not isinstance(report.get("parameters"), dict)
    ):
        raise ValidationError(
            f"{path!r} is not a report of `privtd perturb --report` (it needs 'mechanism' and "
            "'parameters'). Pass that JSON, or -M and -e."
        )
    labels = report.get("labels")
    if labels is not None and not isinstance(labels, list):
        raise ValidationError(f"{path!r}: 'labels' must be a list. Fix or drop it.")
    return report["mechanism"], dict(report["parameters"]), labels


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
@click.option(
    "--answers",
    "answers_path",
    type=click.Path(dir_okay=False),
    help="The answers TRUTHS were inferred from (a long CSV task,worker,answer): for numbers, "
    "the baseline is then their median (default: the reference's median).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def evaluate_cmd(
    truths: str, reference: str, kind: str, answers_path: str | None, as_json: bool
) -> None:
    """Score inferred TRUTHS (CSV task,truth) against known truths, beside the trivial baseline
    (the reference's majority class; for numbers a median) and, for labels, the balanced
    accuracy, macro-F1, each class's recall and the confusion matrix (docs/evaluation.md).
    Tasks that infer held fixed as gold (TRUTHS' gold column) are left out."""
    from ..evaluation import evaluate

    inferred, gold = _read_truths_and_gold(truths)
    answers = None
    if answers_path is not None:
        answers = _read_answers(
            answers_path, "auto", None, None, None, None, False, kind="numeric"
        ).answers
    metrics = evaluate(inferred, _read_reference(reference), kind=kind, gold=gold, answers=answers)
    if metrics.get("n_gold"):
        click.echo(
            f"privtd: note: left out {metrics['n_gold']} task(s) that infer held fixed as gold "
            f"(the gold column of {truths!r}): their truth is the reference by construction",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(metrics))
        return
    for line in _metrics_text(metrics):
        click.echo(line)


def _read_truths_and_gold(path: str) -> tuple[Any, Any]:
    """Inferred truths, and the tasks infer held fixed (its output's gold column; None if it
    has none)."""
    import pandas as pd

    from .._csv import read_csv

    truths = _read_truth_csv(path)  # its errors first: a file it reads, read_csv reads
    frame = read_csv(path, ["task"])
    if "gold" not in frame.columns:
        return truths, None
    flag = frame["gold"].astype(str).str.strip().str.lower().isin(["1", "1.0", "true", "yes"])
    return truths, pd.Index(frame.loc[flag.to_numpy(), "task"])


def _metrics_text(metrics: dict[str, Any]) -> list[str]:
    """evaluate's table: the scores with the baseline's and the margin beside each, then each
    class's recall and the confusion matrix."""
    scores = [
        k
        for k, v in metrics.items()
        if isinstance(v, (int, float))
        and not k.startswith(("baseline_", "n_predicted"))
        and not k.endswith("_margin")
    ]
    width = max(len(k) for k in scores)
    lines = []
    for key in scores:
        value = metrics[key]
        if key.startswith("n_"):
            lines.append(f"{key:>{width}}: {int(value)}")
            continue
        line = f"{key:>{width}}: {value:.4f}"
        if f"baseline_{key}" in metrics:
            margin = metrics[f"{key}_margin"]
            line += f"   baseline {metrics[f'baseline_{key}']:.4f}, margin {margin:+.4f}"
        lines.append(line)
    if "baseline_label" in metrics:
        lines.append(
            f"{'baseline':>{width}}: every task '{metrics['baseline_label']}', "
            f"{metrics['baseline']}; balanced accuracy's is 1 / classes"
        )
    else:
        lines.append(
            f"{'baseline':>{width}}: every task {metrics['baseline_value']:.6g}, "
            f"{metrics['baseline']}; margin: the baseline's error less the method's"
        )
        if metrics["mae_margin"] < 0:
            lines.append(
                f"note: the constant guess has the smaller mean absolute error "
                f"({metrics['baseline_mae']:.4g} against {metrics['mae']:.4g}): these truths "
                "carry less than no information about the tasks' values"
            )
    if "recall" in metrics:
        recall = ", ".join(f"{label} {r:.4f}" for label, r in metrics["recall"].items())
        lines.append(f"{'recall':>{width}}: {recall}")
        rows = metrics["confusion"]
        columns = list(next(iter(rows.values())))
        cell = max(6, *(len(str(c)) for c in columns), *(len(str(r)) for r in rows))
        cell = max(cell, *(len(str(n)) for row in rows.values() for n in row.values()))
        lines.append("confusion (rows: reference, columns: inferred):")
        lines.append(" " * (cell + 1) + " ".join(f"{c:>{cell}}" for c in columns))
        for label, row in rows.items():
            lines.append(f"{label:>{cell}} " + " ".join(f"{n:>{cell}}" for n in row.values()))
        if metrics["n_predicted_labels"] == 1 and len(rows) > 1:
            lines.append(
                f"note: every scored task got one label, so the accuracy is that class's share "
                f"of the reference and the balanced accuracy {metrics['balanced_accuracy']:.4f}"
            )
    return lines


@click.group("datasets", cls=TrackingGroup)
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
DEMO_WIDTH = 100  # the demo's lines fit a 100-column terminal


def _echo_wrapped(text: str, indent: str = "") -> None:
    """Print ``text`` wrapped to the demo's width, continuation lines indented two more."""
    import textwrap

    click.echo(
        textwrap.fill(
            text,
            DEMO_WIDTH,
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_on_hyphens=False,
            break_long_words=False,
        )
    )


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
    "--mechanism",
    "-M",
    "mechanism_name",
    default="one-layer",
    show_default=True,
    type=click.Choice(["one-layer", "two-layer"]),
    help="P0's randomized response: one-layer (every answer flipped independently: its "
    "per-answer epsilon holds given the worker's other answers and composes) or two-layer (one "
    "private flip probability per worker: epsilon is one answer alone; the figures a worker "
    "gets are printed beside it).",
)
@click.option(
    "--epsilon",
    default=1.0,
    show_default=True,
    type=float,
    help="Per-answer epsilon the mechanism is calibrated to (for two-layer: P0's marginal, one "
    "answer alone).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the perturbation.")
def demo(dataset: str, mechanism_name: str, epsilon: float, seed: int) -> None:
    """Perturb a bundled real dataset on the workers' side, aggregate it with several methods,
    and print accuracy and balanced accuracy against the expert labels, beside the majority-class
    baseline's, with the privacy each worker gets: one answer alone, one answer given the
    worker's other answers, and the worker's whole release. The last row is the
    perturbation-aware default (what ``privtd infer --mechanism`` picks): told the mechanism on
    the perturbed answers, told none on the clean ones."""
    import numpy as np

    from .. import datasets as datasets_mod
    from ..evaluation import evaluate
    from ..inference import Estimator, aware_method, make_estimator
    from ..mechanisms import Mechanism, OneLayerRR, TwoLayerRR, format_release_figures

    data = datasets_mod.load(dataset)
    answers, truth = data.answers, data.truth
    if not answers.is_categorical:
        raise ValidationError(f"The demo needs a categorical dataset; {dataset!r} is numeric.")
    mechanism: Mechanism
    if mechanism_name == "two-layer":
        mechanism = TwoLayerRR.from_epsilon(epsilon, n_labels=answers.n_labels)
        drawn = f"f_u ~ U({mechanism.a:.4g}, {mechanism.b:.4g}) drawn once per worker"
    else:
        mechanism = OneLayerRR.from_epsilon(epsilon, n_labels=answers.n_labels)
        drawn = f"every answer flipped with f = {mechanism.f:.4g}"
    perturbed = mechanism.perturb(answers, rng=seed)
    click.echo(
        f"{dataset}: {answers.n_answers} answers, {answers.n_tasks} tasks, "
        f"{answers.n_workers} workers, {len(truth)} expert truths"
    )
    for note in answers.notes:
        click.echo(f"  note: {note}")
    _echo_wrapped(
        f"{mechanism_name} mechanism: {drawn}; {mechanism.guarantee} (one answer alone); "
        f"seed {seed}; {(perturbed.value != answers.value).mean():.1%} of answers changed"
    )
    counts = answers.worker_counts()
    for label, k in (("median", int(np.median(counts))), ("largest", int(counts.max()))):
        shared = ", one draw" if mechanism_name == "two-layer" else ""
        click.echo(f"  the {label} worker ({k} answers{shared}):")
        for line in format_release_figures(mechanism, k, indent="    ")[1:]:
            click.echo(line)
    if mechanism.guarantee.note:
        _echo_wrapped(f"caveat: {mechanism.guarantee.note}", "  ")
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
    # Accuracy flatters on skewed truths (Duchenne's are 63.5% one class), so each method's
    # balanced accuracy (the mean of the classes' recalls) stands beside it, and the trivial
    # baseline, every task labelled the truths' majority class, heads the table.
    click.echo(f"{'':<14} {'accuracy':^26} {'balanced accuracy':^26}".rstrip())
    columns = f"{'clean':>8} {'private':>8} {'change':>8}"
    click.echo(f"{'method':<14} {columns} {columns} {'seconds':>8}")
    # The truths scored against themselves: only the baseline fields are read.
    base = evaluate(truth, truth)
    accuracy, balanced = base["baseline_accuracy"], base["baseline_balanced_accuracy"]
    click.echo(
        f"{'baseline':<14} {accuracy:>8.4f} {accuracy:>8.4f} {'':>8} {balanced:>8.4f} "
        f"{balanced:>8.4f}"
    )
    n_truths, n_classes = base["n_evaluated"], len(base["recall"])
    _echo_wrapped(
        f"baseline: every task labelled the experts' majority class '{base['baseline_label']}' "
        f"({round(accuracy * n_truths)} of {n_truths} truths); its balanced accuracy is "
        f"1/{n_classes} for {n_classes} classes, whatever their shares",
        "  ",
    )
    for method, on_clean, on_private in rows:
        start = time.perf_counter()
        clean = evaluate(on_clean.fit(answers).truths_, truth)
        private = evaluate(on_private.fit(perturbed).truths_, truth)
        elapsed = time.perf_counter() - start
        cells = [
            f"{clean[key]:>8.4f} {private[key]:>8.4f} {private[key] - clean[key]:>+8.4f}"
            for key in ("accuracy", "balanced_accuracy")
        ]
        click.echo(f"{method:<14} {cells[0]} {cells[1]} {elapsed:>8.3f}")
        note = _one_class_note([("clean", on_clean), ("private", on_private)])
        if note:
            _echo_wrapped(f"{method}: {note}", "  ")
    if aware is not None:
        _echo_wrapped(
            f"{aware}: the perturbation-aware default (privtd infer -M {mechanism_name}); one "
            "release, so each private figure moves by a few hundredths with --seed",
            "  ",
        )


def _infer_multi_label(
    mechanism: str | None,
    engine: str,
    decision: str | None,
    answers: str,
    method: str | None,
    sep: str,
    params: dict[str, Any],
    gold: str | None,
    output: str,
    workers_output: str | None,
    probas_output: str | None,
    columns: tuple[str, str, str],
) -> None:
    """``privtd infer --multi-label SEP``: binary relevance over ``method`` (with no
    mechanism, engine or decision, refused here)."""
    if mechanism or engine != "memory" or method is None:
        raise ValidationError("--multi-label needs --method and no --mechanism or --engine.")
    if decision is not None:
        raise ValidationError(
            "--decision reads one label per task; binary relevance decides each label on "
            "its own. Drop --decision."
        )
    import pandas as pd

    from ..errors import SchemaError
    from ..inference import BinaryRelevance

    task, worker, answer = columns
    from .._csv import unescape_frame

    frame = unescape_frame(pd.read_csv(answers, dtype={answer: str}, keep_default_na=False))
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
