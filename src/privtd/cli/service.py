"""``privtd serve``, ``requester``, ``campaign`` and ``client``: the collection service."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import ValidationError
from ._common import (
    TrackingGroup,
    _atomic_csv,
    _note_pooled_interval,
    _parse_params,
    _parse_value,
    _write_output,
)


def _service() -> Any:
    try:
        from .. import service
    except ImportError as exc:
        raise ImportError(
            f"The service needs its extra ({exc.name} is missing): pip install 'privtd[service]'."
        ) from None
    return service


@click.command()
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
    help="The largest epsilon per answer, given the worker's other answers of the same "
    "submission (one private draw), however the parameters are given: refuse campaigns past it "
    "for a worker who answers every task at once, and submissions past it (docs/service.md).",
)
@click.option(
    "--dask-scheduler",
    envvar="PRIVTD_DASK_SCHEDULER",
    metavar="tls://HOST:PORT",
    help="Aggregate campaigns on this Dask cluster (env PRIVTD_DASK_SCHEDULER), for the "
    "methods that run there (docs/scale.md); the others, in this process. Reached over TLS "
    "with --dask-tls-ca-file, --dask-tls-cert and --dask-tls-key.",
)
@click.option(
    "--dask-tls-ca-file",
    envvar="PRIVTD_DASK_TLS_CA_FILE",
    type=click.Path(dir_okay=False),
    help="The Dask cluster's CA certificate (privtd cluster-certs).",
)
@click.option(
    "--dask-tls-cert",
    envvar="PRIVTD_DASK_TLS_CERT",
    type=click.Path(dir_okay=False),
    help="This server's certificate for the Dask cluster, which that CA signed.",
)
@click.option(
    "--dask-tls-key",
    envvar="PRIVTD_DASK_TLS_KEY",
    type=click.Path(dir_okay=False),
    help="This server's private key for the Dask cluster.",
)
@click.option(
    "--dask-allow-plain-tcp",
    envvar="PRIVTD_DASK_ALLOW_PLAIN_TCP",
    is_flag=True,
    help="Accept a tcp:// --dask-scheduler, with no authentication and no encryption: anyone "
    "who can reach this address runs code here (on its workers, and in this server, which "
    "holds every campaign, through the results they return). Only on a network no one else "
    "reaches.",
)
@click.option(
    "--dask-dir",
    envvar="PRIVTD_DASK_DIR",
    type=click.Path(file_okay=False, exists=True),
    help="With --dask-scheduler: a folder every Dask worker can read, for the campaign's "
    "reports as Parquet (default: the system's temporary folder).",
)
@click.option(
    "--access-log",
    default="-",
    show_default=True,
    metavar="FILE",
    help="Append one line per request (time, client address, method, path with tokens and "
    "codes redacted, status, duration; never a body or a header) to FILE; '-' is standard "
    "error (docs/service.md#access-log).",
)
@click.option("--no-access-log", is_flag=True, help="Write no access log.")
def serve(
    url: str,
    host: str,
    port: int,
    requester_token: str | None,
    max_epsilon: float,
    dask_scheduler: str | None,
    dask_tls_ca_file: str | None,
    dask_tls_cert: str | None,
    dask_tls_key: str | None,
    dask_allow_plain_tcp: bool,
    dask_dir: str | None,
    access_log: str,
    no_access_log: bool,
) -> None:
    """Run the collection service: workers submit perturbed reports, the requester aggregates.

    The API is described at /docs (OpenAPI at /openapi.json); workers' page at /collect.
    """
    service = _service()
    import uvicorn

    dask_security = None
    if dask_scheduler is None:
        if dask_tls_ca_file or dask_tls_cert or dask_tls_key or dask_allow_plain_tcp:
            raise ValidationError(
                "--dask-tls-ca-file, --dask-tls-cert, --dask-tls-key and --dask-allow-plain-tcp "
                "go with --dask-scheduler."
            )
    else:
        from ..inference.distributed import tls_security

        dask_security = tls_security(dask_tls_ca_file, dask_tls_cert, dask_tls_key)

    # Opened first, so a bad --access-log fails before the database is touched.
    handler = None if no_access_log else _open_access_log(access_log)
    try:
        app = service.create_app(
            url,
            requester_token=requester_token,
            max_epsilon=max_epsilon,
            dask_scheduler=dask_scheduler,
            dask_dir=dask_dir,
            dask_security=dask_security,
            dask_allow_plain_tcp=dask_allow_plain_tcp,
        )
        if app.state.new_requester_token:
            click.echo(f"requester token (shown once): {app.state.new_requester_token}", err=True)
        if app.state.runner.interrupted:
            click.echo(
                f"{app.state.runner.interrupted} aggregation run(s) left running by a server "
                "that stopped are marked failed; start them again (privtd campaign aggregate)",
                err=True,
            )
        click.echo(f"privtd serve: {url} on http://{host}:{port}", err=True)
        # uvicorn's own access log would print the raw path and query, codes included: off.
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        if handler is not None:  # the logger is global: leave no handler on a closed stream
            _close_access_log(handler)


def _open_access_log(target: str) -> Any:
    """Send the service's access log (privtd.service.access_log) to ``target``; returns the
    handler, for :func:`_close_access_log`."""
    import logging

    from ..service.access_log import LOGGER

    if target == "-":
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
    else:
        try:
            handler = logging.FileHandler(target, encoding="utf-8")
        except OSError as exc:
            raise ValidationError(
                f"Cannot open the access log {target} ({exc.strerror}); give a writable "
                "--access-log FILE, or '-' for standard error."
            ) from None
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    # Its own lines only, once: not again through the root logger's handlers.
    LOGGER.propagate = False
    return handler


def _close_access_log(handler: Any) -> None:
    import logging

    from ..service.access_log import LOGGER

    LOGGER.removeHandler(handler)
    handler.close()
    if not LOGGER.handlers:
        LOGGER.setLevel(logging.NOTSET)


DB = click.option(
    "--db",
    "url",
    default="sqlite:///privtd.db",
    show_default=True,
    help="The server's database URL (as given to privtd serve).",
)


@click.group(cls=TrackingGroup)
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


@click.group(cls=TrackingGroup)
def campaign() -> None:
    """A requester's side of the service: create a campaign, issue its enrolment codes,
    aggregate its reports; list your campaigns, show a campaign's runs, export its reports."""


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
@click.option(
    "--max-answers",
    type=click.IntRange(min=1),
    help="Take at most this many answers from each worker (default: every task).",
)
@click.option(
    "--workers-raise-ceiling",
    is_flag=True,
    help="Accept a campaign in which one worker can spend more than the workers' default "
    "ceiling over all their campaigns (100); tell your workers to raise theirs.",
)
@click.option(
    "--adaptive",
    metavar="SETTINGS",
    help="Adaptive redundancy: hand each worker the least settled tasks only, until each "
    "reaches a target confidence. A target (0.95), or KEY=VALUE,... of target, max_per_task, "
    "min_per_task, batch, max_answers (the campaign's answer budget) and model (method: the "
    "campaign's method ranks the tasks; pooled: a faster model); docs/service.md.",
)
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
    max_answers: int | None,
    workers_raise_ceiling: bool,
    adaptive: str | None,
    token: str,
) -> None:
    """Create a campaign on the server at URL; prints its id and the workers' page. Workers
    enrol with codes from 'privtd campaign codes' unless --open-enrolment is given. The server
    refuses a campaign in which one worker can spend more than the workers' default ceiling
    over all their campaigns (100), naming the figures: lower --budget, cap --max-answers, or
    pass --workers-raise-ceiling."""
    import pandas as pd

    from .._files import refuse_spreadsheet
    from ..client import Requester

    refuse_spreadsheet(tasks_path)
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
        max_answers_per_worker=max_answers,
        workers_raise_ceiling=workers_raise_ceiling,
        adaptive=None if adaptive is None else _adaptive_settings(adaptive),
    )
    click.echo(made["id"])
    if made.get("warning"):
        click.echo(f"privtd: warning: {made['warning']}", err=True)
    click.echo(
        f"{len(tasks)} tasks, {made['mechanism']['name']} ({_figures(made['mechanism'])}), "
        f"method {made['method']}; workers open {url.rstrip('/')}/collect?campaign={made['id']}",
        err=True,
    )
    if made.get("adaptive"):
        a = made["adaptive"]
        cap = "" if a["max_answers"] is None else f"; {a['max_answers']} reports in all at most"
        click.echo(
            f"adaptive redundancy: each worker is handed up to {a['batch']} of the least settled "
            f"tasks it has not answered, until each reaches confidence {a['target']:g} "
            f"({a['min_per_task']} to {a['max_per_task']} reports a task{cap}; ranked by the "
            f"{'campaign method' if a.get('model', 'method') == 'method' else 'pooled model'})",
            err=True,
        )


def _adaptive_settings(text: str) -> dict[str, Any]:
    """``--adaptive``: a bare target, or KEY=VALUE pairs separated by commas."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) == 1 and "=" not in parts[0]:
        parts = [f"target={parts[0]}"]
    return _parse_params(tuple(parts), "--adaptive")


def _figures(mech: dict[str, Any], worker: bool = False) -> str:
    """A campaign's epsilons, each with its unit: one answer alone, and a worker who answers
    every task in one submission (one private draw); ``worker``: addressed to the worker."""
    from ..client import per_answer_words

    # A result stored before the figures were kept has the first only.
    k, unit = mech.get("answers_per_draw", 1), mech["unit"]
    alone = f"epsilon {mech['epsilon']:.4g} per {unit} alone"
    if k <= 1:
        return alone
    who, own = ("if you answer", "your") if worker else ("a worker who answers", "its")
    return (
        f"{alone}; {who} all {k} tasks at once: {mech['answer_epsilon']:.4g} "
        f"{per_answer_words(unit, k, own)}, {mech['release_epsilon']:.4g} for all {k} together"
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
    from ..client import Requester

    out = Requester(url, token).issue_codes(
        campaign_id, count, expires_in=None if expires_in is None else expires_in * 3600
    )
    text = "".join(f"{c}\n" for c in out["codes"])
    if output:
        _write_output(output, text, private=True)  # '-': standard output, as everywhere
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
    import pandas as pd

    from ..client import Requester

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
        from .._csv import to_csv

        click.echo(to_csv(frame), nl=False)
    if workers:
        weights = pd.Series(result["workers"], name="weight").rename_axis("worker")
        _atomic_csv(weights.to_frame(), workers, index=True)
    privacy = result["privacy"]
    click.echo(
        f"{result['n_reports']} reports, {len(truths)} tasks with answers ({result['method']}); "
        f"{privacy['mechanism']}, {_figures(privacy)}; budget per worker epsilon "
        f"{privacy['budget_per_worker']:g} (each submission's whole release, summed)",
        err=True,
    )
    if "pooled_median_interval" in result:
        _note_pooled_interval(*result["pooled_median_interval"])


JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    return "".join(
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in [header, *rows]
    )


def _when(stamp: str | None) -> str:
    """An API timestamp as 'YYYY-MM-DD HH:MM:SS' (UTC), or '-'."""
    return "-" if not stamp else stamp.replace("T", " ")[:19]


@campaign.command("list")
@click.argument("url")
@JSON
@TOKEN
def campaign_list(url: str, as_json: bool, token: str) -> None:
    """List your campaigns on the server at URL: id, name, mechanism, epsilon, workers
    enrolled, reports received, state (collecting, aggregating, aggregated, failed)."""
    from ..client import Requester

    rows = Requester(url, token).campaigns()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    header = ["id", "name", "mechanism", "epsilon", "all-tasks", "workers", "reports", "state"]
    click.echo(
        _table(
            header,
            [
                [
                    r["id"],
                    r["name"],
                    r["mechanism"],
                    f"{r['answer_epsilon']:.4g}/{r['unit']}",
                    f"{r['release_epsilon']:.4g}/{r['answers_per_draw']}",
                    str(r["workers"]),
                    str(r["reports"]),
                    r["state"],
                ]
                for r in rows
            ],
        ),
        nl=False,
    )
    click.echo(
        f"{len(rows)} campaign(s); epsilon: per answer (or cell...), given the worker's other "
        "answers, for a worker who answers every task in one submission; all-tasks: those N "
        "answers together (epsilon/N)",
        err=True,
    )


@campaign.command("status")
@click.argument("url")
@click.argument("campaign_id")
@JSON
@TOKEN
def campaign_status(url: str, campaign_id: str, as_json: bool, token: str) -> None:
    """Show CAMPAIGN_ID's aggregation runs, oldest first: id, state, started, finished (UTC),
    reports, error."""
    from ..client import Requester

    runs = Requester(url, token).runs(campaign_id)
    if as_json:
        click.echo(json.dumps(runs, indent=2))
        return
    header = ["run", "state", "started", "finished", "reports", "error"]
    click.echo(
        _table(
            header,
            [
                [
                    r["run_id"],
                    r["status"]
                    + (f" {r['iteration']}/{r['max_iter']}" if r["status"] == "running" else ""),
                    _when(r["started_at"]),
                    _when(r["finished_at"]),
                    str(r["n_reports"]),
                    r["error"] or "-",
                ]
                for r in runs
            ],
        ),
        nl=False,
    )
    if not runs:
        click.echo("no aggregation run yet (privtd campaign aggregate starts one)", err=True)


@campaign.command("export")
@click.argument("url")
@click.argument("campaign_id")
@click.option(
    "--output",
    "-o",
    default="-",
    show_default=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="CSV file for the reports ('-': standard output).",
)
@TOKEN
def campaign_export(url: str, campaign_id: str, output: str, token: str) -> None:
    """Write CAMPAIGN_ID's perturbed reports as CSV (task,worker,answer; an empty answer is a
    NULL report): what the workers' devices sent, never their raw answers."""
    import os
    import tempfile

    from ..client import Requester

    requester = Requester(url, token)
    if output == "-":
        size = requester.export_reports(campaign_id, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    else:
        target = Path(output)
        folder = target.resolve().parent
        if not folder.is_dir():
            raise ValidationError(f"The folder of {output!r} does not exist. Create it first.")
        # Into a temporary file beside the target, renamed once complete: a dropped connection
        # leaves no half export behind.
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                size = requester.export_reports(campaign_id, handle)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)  # as an ordinary new file would be, not mkstemp's 0600
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    click.echo(f"exported the reports of campaign {campaign_id} ({size} bytes)", err=True)


LEDGER = click.option(
    "--ledger",
    envvar="PRIVTD_LEDGER",
    type=click.Path(dir_okay=False),
    help="Your ceiling file (env PRIVTD_LEDGER; default privtd-ledger.json next to --state): "
    "keep one for all your campaigns, so the lifetime total counts them all.",
)


@click.group(cls=TrackingGroup)
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
    from ..client import Worker

    campaign, ceiling = _preview(url, campaign_id, state, ledger)
    worker = Worker.enrol(url, campaign_id, name, state, code=code, ledger=ceiling.path)
    click.echo(
        f"enrolled {name} in {campaign['name']!r}, budget epsilon {campaign['budget']:g}; "
        f"state in {state}"
    )
    _show_recovery_code(worker.recovery_code)


def _show_recovery_code(code: str | None) -> None:
    if code:
        click.echo(
            f"recovery code: {code}\nkeep it apart from the state file, shown once: if the state "
            "file is lost, 'privtd client recover' gives this same worker (what it spent "
            "included) a new token with it, once",
            err=True,
        )


@client.command("recover")
@click.argument("url")
@click.argument("campaign_id")
@click.option(
    "--code",
    envvar="PRIVTD_RECOVERY_CODE",
    required=True,
    help="The recovery code shown at enrolment (env PRIVTD_RECOVERY_CODE).",
)
@click.option(
    "--state", required=True, type=click.Path(dir_okay=False), help="New JSON file for the state."
)
@LEDGER
def client_recover(url: str, campaign_id: str, code: str, state: str, ledger: str | None) -> None:
    """Continue as the same worker of CAMPAIGN_ID after losing the state file: the recovery code
    gets a new token (the old one stops working) and a new recovery code, printed here. What the
    worker spent carries over; recovery never gives a fresh budget."""
    from ..client import Worker

    worker = Worker.recover(url, campaign_id, code, state, ledger=ledger)
    click.echo(
        f"recovered {worker.state['name']} in campaign {campaign_id}: spent epsilon "
        f"{float(worker.state['spent_epsilon']):.6g} of {float(worker.state['budget']):g}; "
        f"state in {state}"
    )
    _show_recovery_code(worker.recovery_code)


def _preview(url: str, campaign_id: str, state: str, ledger: str | None) -> Any:
    """Shows the campaign's epsilon and the worker's ceiling before anything is sent."""
    from ..client import Worker, most_release, own_mechanism

    # Refused here (CeilingExceededError, one line) when above the ceiling: nothing was sent.
    campaign, ceiling = Worker.preview(url, campaign_id, state, ledger)
    # The figures the device's own parameters mean, not the server's.
    own = own_mechanism(campaign)
    k = most_release(campaign)
    mech = {
        "unit": campaign["mechanism"]["unit"],
        "epsilon": own.answer_epsilon(1),
        "answers_per_draw": k,
        "answer_epsilon": own.answer_epsilon(k),
        "release_epsilon": own.release_epsilon(k),
    }
    click.echo(
        f"campaign {campaign['name']!r}: {campaign['mechanism']['name']}, "
        f"{_figures(mech, worker=True)}; your ceiling: {ceiling.per_answer:g} per answer (given "
        f"your other answers of the same submission), lifetime {ceiling.total:.4g} of "
        f"{ceiling.lifetime:g} spent ({ceiling.path})",
        err=True,
    )
    return campaign, ceiling


@client.command("recovery-code")
@click.option(
    "--state", required=True, type=click.Path(dir_okay=False), help="The worker's state file."
)
def client_recovery_code(state: str) -> None:
    """Print a new recovery code for the worker of --state (its previous code stops working):
    for a worker enrolled before recovery codes existed, or whose code may have leaked."""
    from ..client import Worker

    _show_recovery_code(Worker(state).new_recovery_code())


@client.command("ceiling")
@LEDGER
@click.option("--state", type=click.Path(dir_okay=False), help="A state file (its ceiling).")
@click.option(
    "--per-answer",
    type=click.FloatRange(min=0, min_open=True),
    help="New per-answer ceiling (given your other answers of the same submission).",
)
@click.option(
    "--lifetime",
    type=click.FloatRange(min=0, min_open=True),
    help="New ceiling on the epsilon spent over all campaigns.",
)
def client_ceiling(
    ledger: str | None, state: str | None, per_answer: float | None, lifetime: float | None
) -> None:
    """Show (or change) your own ceiling: the largest epsilon per answer, given your other
    answers of the same submission, a campaign may use on your answers, and the total over all
    your campaigns (each submission's whole release, summed). Defaults: 3 per answer, 100 in
    all (docs/service.md says why)."""
    from ..client import Ceiling

    if ledger is None and state is not None:
        ledger = json.loads(Path(state).read_text()).get("ledger")
    # Without --state or --ledger: privtd-ledger.json in the current folder.
    ceiling = Ceiling.for_state(state or "state.json", ledger)
    if per_answer is not None or lifetime is not None:
        ceiling.set(per_answer=per_answer, lifetime=lifetime)
    click.echo(
        f"{ceiling.path}: at most epsilon {ceiling.per_answer:g} per answer (given your other "
        f"answers of the same submission); lifetime "
        f"{ceiling.total:.6g} of {ceiling.lifetime:g} spent over {len(ceiling.spent)} campaign(s)"
    )


@client.command("submit")
@click.argument("answers", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--state", required=True, type=click.Path(dir_okay=False), help="The worker's state file."
)
def client_submit(answers: str, state: str) -> None:
    """Perturb ANSWERS (CSV: task,answer) on this machine and submit them.

    Answers are taken as the campaign declares them: a label written another way without loss
    ("1" or 1.0 for the label 1) is that label; a number outside a numeric campaign's range
    is clipped into it here, before perturbing, and the count is printed."""
    import pandas as pd

    from .._files import refuse_spreadsheet
    from ..client import Worker

    refuse_spreadsheet(answers)
    frame = pd.read_csv(answers, dtype={"task": str})
    missing = {"task", "answer"} - set(frame.columns)
    if missing:
        raise ValidationError(f"{answers} lacks column(s) {sorted(missing)}; need task,answer.")
    if frame["task"].duplicated().any():
        raise ValidationError(f"{answers} names a task more than once; one answer per task.")
    if frame["answer"].isna().any():
        raise ValidationError(f"{answers} has empty answers; drop those rows.")
    from ..client import per_answer_words

    worker = Worker(state)
    campaign = worker.campaign()
    n = int(campaign["n_tasks"]) if campaign["whole_row"] else len(frame)
    per, whole = worker.figures(n)
    unit = campaign["mechanism"]["unit"]
    # Computed here from the parameters this machine perturbs with; the ceiling is checked on
    # the same figures before anything is perturbed.
    click.echo(
        f"this submission (one draw): epsilon {per:.4g} {per_answer_words(unit, n, 'your')}, "
        f"{whole:.4g} for all {n} together; your ceiling {worker.ceiling.per_answer:g} per "
        f"answer, lifetime {worker.ceiling.total:.4g} of {worker.ceiling.lifetime:g} spent",
        err=True,
    )
    values = [v.item() if hasattr(v, "item") else v for v in frame["answer"]]
    out = worker.submit(dict(zip(frame["task"], values, strict=True)))
    params = campaign["mechanism"]["params"]
    if campaign.get("labels") is None and "low" in params and "high" in params:
        click.echo(
            f"clipped {out['n_clipped']} of {len(frame)} answer(s) to the campaign's range "
            f"[{params['low']:g}, {params['high']:g}] here, before perturbing",
            err=True,
        )
    click.echo(
        # The worker's own count: it includes releases the server refused (it received them).
        f"sent {out['n_reports']} perturbed report(s); spent epsilon "
        f"{worker.state['spent_epsilon']:g} of {worker.state['budget']:g}"
    )
