"""Truth inference on a Dask cluster: the same estimators, answers partitioned by task.

``ingest`` reads Parquet or CSV files on the cluster, codes worker ids and labels once and
keeps the answers on the workers as shards, every answer of a task in one shard;
``fit_distributed`` then runs an estimator with one pass over the shards per iteration. Needs
``pip install 'privtd[dask]'``; this module imports Dask only when a cluster is used. See
docs/scale.md.
"""

from ._cluster import (
    CONNECT_TIMEOUT,
    PASS_TIMEOUT,
    check_scheduler,
    connect,
    max_workers,
    tls_security,
)
from ._fit import DISTRIBUTED_METHODS, fit_distributed
from ._ingest import DistributedAnswers, ingest, resolve_files

__all__ = [
    "CONNECT_TIMEOUT",
    "PASS_TIMEOUT",
    "DISTRIBUTED_METHODS",
    "DistributedAnswers",
    "check_scheduler",
    "connect",
    "fit_distributed",
    "ingest",
    "max_workers",
    "resolve_files",
    "tls_security",
]
