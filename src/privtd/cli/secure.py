"""``privtd secure-em``: EM over secure sums."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import click

from ..errors import ValidationError
from ._common import (
    ANSWER_KIND,
    ON_DUPLICATE,
    _atomic_csv,
    _echo_note,
    _one_stdout,
)


@click.command("secure-em")
@click.argument("answers", type=click.Path(dir_okay=False))
@click.option(
    "--model",
    type=click.Choice(["auto", "binary", "multiclass", "one-coin", "real", "glad"]),
    default="auto",
    show_default=True,
    help="Latent class model; 'auto': binary for 2 labels, multiclass for more, real for numbers; "
    "one-coin: one private accuracy per worker. glad is refused: its joint conjugate-gradient "
    "M-step has no secure-sum form here (docs/secure.md).",
)
@click.option(
    "--backend",
    type=click.Choice(["masking", "paillier"]),
    default="masking",
    show_default=True,
    help="Secure sum: pairwise masks (workers verify every sum and compute the posteriors "
    "themselves), or Paillier encryption: SEMI-HONEST REQUESTER ONLY, since workers cannot verify "
    "its sums and compute on the posteriors it sends: a requester that sends crafted ones reads "
    "every worker's answers (8 of 8 workers, 1.000 of their labels, docs/secure.md).",
)
@click.option("--processes", is_flag=True, help="Run each worker in its own OS process.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="CSV to write: task,truth ('-': standard output).",
)
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
    "worker's own terms. At least 2. The requester learns every task's answer count. Each "
    "worker refuses a K under its own floor (here every simulated worker takes K) and, with "
    "masking, draws the kept tasks itself from counts it verified. Sybil workers of the "
    "requester's that answer every task still bring single-answer tasks back.",
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

    With masking every worker checks each round's sums (one tagged masked contribution from
    every participant, added by itself) and computes the kept tasks and the posteriors itself:
    a requester that sends crafted posteriors, or alters a sum, is refused. No worker sends its
    time; per-worker times are measured by the simulation (nan with --processes).

    Not protected (docs/secure.md, "Known limits"): two tasks whose answerers differ by one
    worker give the requester that worker's terms from the difference of their sums, whatever
    --min-answers is; Sybil workers of the requester's that answer every task bring back every
    task with one real answer (148 of 148, labels 1.000); each worker learns from the
    posteriors whether the others who answered its tasks agreed with it; with --backend
    paillier the requester is trusted to follow the protocol: one that sends crafted
    posteriors reads every worker's answers (8 of 8 workers, labels 1.000), and one that has a
    worker's ciphertexts decrypted by the key holder reads that worker's (use masking where
    that matters).
    """
    from ..answers import Answers
    from ..secure import RoundStats, SecureEM

    _one_stdout(output=output, rounds_output=rounds_output)
    for path in (output, rounds_output):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValidationError(f"The folder of {path!r} does not exist. Create it first.")
    data = Answers.from_path(answers, kind=kind, on_duplicate=on_duplicate)
    for note in data.notes:
        _echo_note(note)
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
        from .._csv import to_csv

        click.echo(to_csv(table, index=False), nl=False)
