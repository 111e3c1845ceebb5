"""``privtd cluster-certs``: the certificates that keep strangers off a Dask cluster."""

from __future__ import annotations

import shlex

import click


@click.command("cluster-certs")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option(
    "--workers",
    type=click.IntRange(1, 1000),
    default=2,
    show_default=True,
    help="Worker certificates to make (worker-1 ... worker-N), one per `dask worker` process "
    "or machine.",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="A host name or IP address of the scheduler or a worker, written into their "
    "certificates for tools that check it (Dask does not); repeatable.",
)
@click.option(
    "--days",
    type=click.IntRange(1, 3650),
    default=365,
    show_default=True,
    help="How long the certificates are valid.",
)
def cluster_certs(folder: str, workers: int, hosts: tuple[str, ...], days: int) -> None:
    """Make a private CA and the TLS certificates of a small Dask cluster in FOLDER.

    Writes ca.pem, and a certificate and key (NAME.pem, NAME-key.pem, mode 0600) for the
    scheduler, the client (privtd infer, privtd serve) and each worker. A party with a
    certificate the CA signed may join the cluster and run code on it; any other is refused.
    The CA's key is not kept, so no one can add a party later: for more, make a new folder and
    give every party its new files. Copy each key to its party only (docs/scale.md).
    """
    from ..inference.distributed._certs import make_cluster_certs

    made = make_cluster_certs(folder, workers=workers, hosts=hosts, days=days)
    ca = made["ca"][0]

    def tls(name: str, prefix: str = "--tls") -> str:
        cert, key = made[name]
        parts = [f"{prefix}-ca-file", ca, f"{prefix}-cert", cert, f"{prefix}-key", key]
        return shlex.join(parts)

    scheduler = "tls://SCHEDULER:8786"
    click.echo(f"privtd: wrote the CA certificate and {len(made) - 1} certificates to {folder}")
    click.echo("# the scheduler:")
    click.echo(f"dask scheduler --protocol tls {tls('scheduler')}")
    click.echo("# each worker (worker-1 ... worker-N), pointed at the scheduler:")
    click.echo(f"dask worker {scheduler} {tls('worker-1')}")
    click.echo("# the client:")
    click.echo(f"privtd infer ANSWERS -o OUT --engine dask --scheduler {scheduler} {tls('client')}")
    click.echo(f"privtd serve --dask-scheduler {scheduler} {tls('client', '--dask-tls')}")
