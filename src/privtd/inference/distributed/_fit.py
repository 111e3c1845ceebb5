"""The client's half of each estimator on a cluster: one pass over the shards per iteration.

An EM estimator (:class:`~privtd.inference._em.EMEstimator`) runs its own model here, with the
loop of its in-memory fit (:func:`~privtd.inference._em.run_em`): :class:`_Passes` is the
executor, each shard a part, the per-worker statistics summed over the shards in partition
order, in float64. The other drivers (majority vote, mean and median) follow their
estimator's in-memory ``_fit`` step for step; their per-shard work is in :mod:`._shard` and
calls the in-memory kernels.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from ...answers import Answers
from ...errors import ValidationError
from .. import _kernels, all_estimators
from .._base import Estimator, gold_series
from .._em import EMEstimator, Shape
from .._tags import get_tags
from ..aware_dawid_skene import AwareDawidSkene
from ..catd import CATD
from ..crh import CRH
from ..dawid_skene import DawidSkene
from ..gtm import GTM
from ..latent_class import LatentClass
from ..mace import MACE, AwareMACE
from ..majority_vote import MajorityVote
from ..mean_median import Mean, Median
from ..one_coin_dawid_skene import OneCoinDawidSkene
from ..perturbation_aware import AwareOneCoin
from ..private_dawid_skene import PrivateDawidSkene
from ..raykar import Raykar
from ..weighted_average import WeightedAverage
from ..weighted_vote import WeightedVote
from ..zencrowd import AwareZenCrowd, ZenCrowd
from ..zero_based_skill import ZeroBasedSkill
from . import _shard
from ._cluster import connect, gather
from ._ingest import DistributedAnswers, ingest

#: Params bigger than this (bytes) go to the cluster once per iteration, as one task every
#: shard's pass reads, rather than embedded in each shard's task: the scheduler keeps a pass's
#: definition as long as a later pass may need it recomputed (a lost worker), so embedded
#: copies would cost it shards x iterations x params.
_SHARED_BYTES = 10_000


@dataclass
class _Coded:
    """What ``Estimator._set_results`` reads of the answers, for a fit on a cluster."""

    tasks: pd.Index
    workers: pd.Index
    labels: pd.Index | None
    n_answers: int
    counts: np.ndarray
    notes: tuple[str, ...]

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    @property
    def n_labels(self) -> int:
        return 0 if self.labels is None else len(self.labels)

    def worker_counts(self) -> np.ndarray:
        return self.counts


@dataclass(frozen=True)
class _Lean:
    """The per-task state of a pass that was not kept: the pass and its parameters (a value,
    or a future every shard reads), from which each shard recomputes it when it is needed
    (the results, a mirrored start). The posteriors of DawidSkene, OneCoinDawidSkene, the
    aware estimators and MajorityVote are functions of the shard and the per-worker
    parameters, so nothing per task stays on the workers between their passes."""

    fn: Callable[..., Any]
    params: Any


class _Passes:
    """Runs one pass of a per-shard function over every shard and gathers the statistics."""

    def __init__(self, data: DistributedAnswers) -> None:
        self.data = data
        self.client = data.client
        self.outs: list[Any] | _Lean | None = None
        self.has_gold = False
        self.output: str | None = None  # a folder the workers write the results into
        self.written_probas = False

    def _finish(self, fn: Callable[..., Any], extra: list[tuple[Any, ...]]) -> list[Any]:
        """``fn(shard, (state, stats), *extra[p])`` on each shard ``p`` with its final state:
        the kept one, or for a lean pass recomputed in the same task, so that only one
        shard's state exists at a time on a worker rather than every shard's at once."""
        outs, shards, submit = self.outs, self.data.shards, self.client.submit
        if isinstance(outs, _Lean):
            backend = _kernels.get_backend()
            return [
                submit(_final, fn, backend, s, None, outs.fn, outs.params, *e, pure=False)
                for s, e in zip(shards, extra, strict=True)
            ]
        assert outs is not None
        return [
            submit(_final, fn, None, s, out, None, None, *e, pure=False)
            for s, out, e in zip(shards, outs, extra, strict=True)
        ]

    def write(self, folder: str) -> None:
        """Each shard's final results written by the worker that holds it, as
        ``folder/part-NNNNN.parquet``: the client never holds every task's result."""
        client = self.client
        labels = client.submit(_shard.const, self.data.labels, pure=False)
        width = max(5, len(str(self.data.n_partitions)))
        paths = [
            (labels, os.path.join(folder, f"part-{p:0{width}d}.parquet"))
            for p in range(self.data.n_partitions)
        ]
        written = gather(client, self._finish(_shard.write_results, paths))
        self.written_probas = bool(written) and written[0][1]

    def run(self, fn: Callable[..., Any], params: Any = None) -> Any:
        """``fn(shard, previous, params)`` on each shard; the per-task state stays where it is
        (or, for a lean pass, is recomputed when needed), the statistics come back summed over
        the shards."""
        self.outs, stats = self.apply(fn, self.outs, params)
        return stats

    def apply(
        self, fn: Callable[..., Any], prev: list[Any] | _Lean | None, params: Any = None
    ) -> tuple[list[Any] | _Lean, Any]:
        """One pass from the given previous states (None: none); its per-shard futures (the
        new states; a :class:`_Lean` for a pass whose state is recomputed rather than kept)
        and the statistics summed over the shards (``_shard.combine``).

        Each pass is a task that depends on its shard and on the previous pass's task (unless
        it reads nothing of it: ``_shard.STATELESS``). Dask keeps that lineage while a later
        pass may need it, so when a worker dies it recomputes the lost shards (from the files)
        and passes on the remaining workers, and the fit goes on with the same numbers."""
        submit = self.client.submit
        if _nbytes(params) > _SHARED_BYTES:
            params = submit(_shard.const, params, pure=False)
        backend = _kernels.get_backend()
        name = getattr(fn, "__name__", "")
        n = self.data.n_partitions
        if prev is None or name in _shard.STATELESS:
            prev = None
        lean = name in _shard.RECOMPUTABLE and prev is None
        args: list[tuple[Any, Any, Any]]
        if isinstance(prev, _Lean):
            # The previous state is recomputed inside this pass's task, on the shard's worker.
            args = [(None, prev.fn, prev.params)] * n
        else:
            args = [(out, None, None) for out in (prev or [None] * n)]
        outs = [
            submit(_on_shard, fn, backend, lean, shard, *arg, params, pure=False)
            for shard, arg in zip(self.data.shards, args, strict=True)
        ]
        # A tree reduction on the workers: neighbours added pairwise, level by level, in
        # partition order, so the sum is the same for the same partitioning and the client
        # receives one set of per-worker arrays however many shards there are.
        level = [submit(_shard.second, o, pure=False) for o in outs]
        while len(level) > 1:
            pairs = [level[i : i + 2] for i in range(0, len(level), 2)]
            level = [submit(_shard.combine, *p, pure=False) if len(p) == 2 else p[0] for p in pairs]
        [total] = gather(self.client, level)
        return (_Lean(fn, params) if lean else outs), total

    def collect(self) -> tuple[pd.Index, np.ndarray, np.ndarray | None]:
        """The per-task results, gathered once and put in the in-memory order of tasks; with
        ``output`` set, written by the workers instead (``write``) and none returned."""
        if self.output is not None:
            self.write(self.output)
            k = 0 if self.data.labels is None else self.data.n_labels
            none = np.zeros((0, k)) if self.written_probas else None
            return pd.Index([], name="task"), np.zeros(0, dtype=np.int64), none
        parts = gather(self.client, self._finish(_shard.results, [()] * self.data.n_partitions))
        ids = parts[0]["ids"].append([p["ids"] for p in parts[1:]])
        order = np.argsort(np.concatenate([p["first_row"] for p in parts]), kind="stable")
        truth = np.concatenate([p["truth"] for p in parts])[order]
        proba = None
        if parts[0]["proba"] is not None:
            proba = np.concatenate([p["proba"] for p in parts])[order]
        return pd.Index(ids.take(order), name="task"), truth, proba


def _on_shard(
    fn: Callable[..., Any],
    backend: str,
    lean: bool,
    shard: Any,
    out: Any,
    prev_fn: Callable[..., Any] | None,
    prev_params: Any,
    params: Any,
) -> Any:
    """``fn(shard, out, params)`` on a worker; ``prev_fn``: the previous state was not kept,
    recompute it first; ``lean``: drop the new state, keep the statistics only."""
    # A worker process runs the client's kernel backend, so both compute the same sums.
    _kernels.set_backend(backend)
    # Shards are the parallelism on a cluster (one process per core): a backend's own threads
    # in every worker would only fight over the same cores.
    _kernels.current_backend().use_one_thread()
    if prev_fn is not None:
        out = (prev_fn(shard, None, prev_params)[0], None)
    state, stats = fn(shard, out, params)
    return (None if lean else state), stats


def _final(
    fn: Callable[..., Any],
    backend: str | None,
    shard: Any,
    out: Any,
    prev_fn: Callable[..., Any] | None,
    prev_params: Any,
    *extra: Any,
) -> Any:
    """``fn(shard, out, *extra)``; with ``prev_fn``, ``out`` recomputed first (a lean pass)."""
    if prev_fn is not None:
        assert backend is not None
        out = _on_shard(prev_fn, backend, False, shard, None, None, None, prev_params)
    return fn(shard, out, *extra)


def _nbytes(params: Any) -> int:
    if isinstance(params, np.ndarray):
        return int(params.nbytes)
    if isinstance(params, tuple | list):
        return sum(_nbytes(p) for p in params)
    return 0


def _total(stats: Any, index: int | None = None) -> np.ndarray:
    """A field of the shards' statistics summed over the shards (see ``_Passes.apply``), as a
    float64 array."""
    return np.asarray(stats if index is None else stats[index], dtype=np.float64)


# ---------------------------------------------------------------------- drivers
def _fit_mv(est: MajorityVote, data: DistributedAnswers, passes: _Passes) -> None:
    agree = _total(passes.run(_shard.mv_pass))
    tasks, truth, proba = passes.collect()
    est._set_results(
        _coded(data, tasks), truth, proba=proba, worker_columns={"agreement": agree / data.counts}
    )


def _fit_em(est: EMEstimator, data: DistributedAnswers, passes: _Passes) -> None:
    """An EM estimator: its own model and results, its steps run over the shards."""
    fit = est._run(passes, Shape.of(data))
    tasks, truth, proba = passes.collect()
    est._finish(_coded(data, tasks), fit, truth, proba)


def _fit_private_ds(est: PrivateDawidSkene, data: DistributedAnswers, passes: _Passes) -> None:
    if not isinstance(est.init, str):
        raise ValidationError(
            "On a Dask cluster PrivateDawidSkene starts from the majority vote only (init='mv'): "
            "an init array follows the in-memory order of tasks, which the shards do not keep."
        )
    _fit_em(est, data, passes)


def _fit_plain(fn: Callable[..., Any]) -> Callable[[Estimator, DistributedAnswers, _Passes], None]:
    def fit(est: Estimator, data: DistributedAnswers, passes: _Passes) -> None:
        passes.run(fn)
        tasks, truth, _ = passes.collect()
        est._set_results(_coded(data, tasks), truth)

    return fit


#: How each estimator tagged to run on Dask (its tags' ``executors``) fits over the shards:
#: tests/test_registry.py checks that these are exactly the tagged classes.
_DRIVERS: dict[type[Estimator], Callable[..., None]] = {
    MajorityVote: _fit_mv,
    WeightedVote: _fit_em,
    DawidSkene: _fit_em,
    OneCoinDawidSkene: _fit_em,
    LatentClass: _fit_em,
    CRH: _fit_em,
    CATD: _fit_em,
    GTM: _fit_em,
    Raykar: _fit_em,
    WeightedAverage: _fit_em,
    Mean: _fit_plain(_shard.mean_pass),
    Median: _fit_plain(_shard.median_pass),
    AwareDawidSkene: _fit_em,
    AwareOneCoin: _fit_em,
    ZenCrowd: _fit_em,
    ZeroBasedSkill: _fit_em,
    PrivateDawidSkene: _fit_private_ds,
    MACE: _fit_em,
}

#: The deprecated aliases of a model given a mechanism (``AwareMACE`` for
#: ``MACE(mechanism=...)``), kept for one release: each fits as its model.
_ALIASES: dict[type[Estimator], type[Estimator]] = {AwareMACE: MACE, AwareZenCrowd: ZenCrowd}


def _driver(estimator: Estimator) -> Callable[..., None] | None:
    """How the estimator fits over the shards, or None where it does not run there (its
    class has no driver, or its tags, which differ with a mechanism for GLAD, MACE and
    ZenCrowd, do not name ``"dask"``)."""
    if "dask" not in get_tags(estimator).executors:
        return None
    return _DRIVERS.get(_ALIASES.get(type(estimator), type(estimator)))


def not_distributed(estimator: Estimator | type[Estimator]) -> str:
    """The sentence that says an estimator (or estimator class) does not run on a cluster,
    with the reason where its tags give one, and the methods that do."""
    cls = estimator if isinstance(estimator, type) else type(estimator)
    reason = get_tags(estimator).not_distributed
    why = f" ({reason})" if reason else ""
    return (
        f"{cls.__name__} does not run on a Dask cluster yet{why}; these methods do: "
        f"{', '.join(DISTRIBUTED_METHODS)}."
    )


#: The methods (``privtd infer --method``) that run on a Dask cluster: those whose tags'
#: ``executors`` name ``"dask"``.
DISTRIBUTED_METHODS: tuple[str, ...] = tuple(name for name, _ in all_estimators(executor="dask"))


def _coded(data: DistributedAnswers, tasks: pd.Index) -> Answers:
    coded = _Coded(tasks, data.workers, data.labels, data.n_answers, data.counts, data.notes)
    return cast(Answers, coded)


def fit_distributed(
    estimator: Estimator,
    source: DistributedAnswers | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    client: Any = None,
    partitions: int | None = None,
    gold: Any = None,
    output: str | os.PathLike[str] | None = None,
    **read: Any,
) -> Estimator:
    """Fit ``estimator`` on a Dask cluster; the same fitted attributes as ``estimator.fit``.

    Parameters
    ----------
    estimator : Estimator
        One of :data:`DISTRIBUTED_METHODS`' estimators (MajorityVote, WeightedVote,
        DawidSkene, OneCoinDawidSkene, LatentClass, ZenCrowd, MACE, CRH, CATD, GTM, Raykar,
        WeightedAverage, Mean, Median, AwareDawidSkene, AwareOneCoin, ZeroBasedSkill,
        PrivateDawidSkene; ZenCrowd and MACE with a mechanism too), with
        ``tie_break="first"``.
    source : DistributedAnswers, path, glob or list of paths
        Answers already ingested (:func:`ingest`), or Parquet / CSV files to ingest first
        (a directory, a glob, or a list): ``read`` takes :func:`ingest`'s keyword arguments.
    client : distributed.Client, optional
        The cluster to use. Default: a LocalCluster on this machine for the call (one worker
        process per core, 127.0.0.1 only, no dashboard). Ignored when ``source`` is ingested.
    partitions : int, optional
        Number of shards when ingesting here (default: about 5e6 answers each).
    gold : Series or mapping task -> truth, optional
        Known truths, fixed during the fit as ``estimator.fit(..., gold=)`` fixes them.
    output : path, optional
        A folder to create for the per-task results, written by the workers as Parquet (one
        ``part-NNNNN.parquet`` per shard: ``task``, ``truth`` and, for models with
        probabilities, ``p_<label>`` per label), so that the client never holds every task's
        result. The files are written into a temporary folder beside it that is renamed once
        all are written: a failed fit leaves nothing. With it, ``truths_`` and ``probas_`` are
        not set (``output_`` names the folder); the per-worker results are.

    Notes
    -----
    Each iteration is one pass: the client broadcasts the per-worker parameters, every shard
    computes its tasks' posteriors (or truths) with the in-memory kernels and returns its
    per-worker sufficient statistics and log-likelihood share, which the client sums in
    partition order in float64. Per-task state never leaves its worker until the end. On data
    that fits in memory the result equals ``estimator.fit`` on the concatenated files (labels
    identical, numbers up to the round-off of summing in another order), for any partition
    and worker count. See docs/scale.md.
    """
    if _driver(estimator) is None:
        raise ValidationError(f"{not_distributed(estimator)} Fit it in memory.")
    if getattr(estimator, "tie_break", "first") != "first":
        raise ValidationError(
            f"On a Dask cluster {type(estimator).__name__} breaks ties with tie_break='first' "
            "only (a random tie-break would depend on the partitioning). Pass tie_break='first'."
        )
    if isinstance(source, DistributedAnswers):
        if read or partitions is not None or client is not None:
            raise ValidationError(
                "These answers are already ingested; pass no client, partitions or read options."
            )
        return _fit(estimator, source, gold, output)
    with connect(client=client) as cl:
        return _fit(estimator, ingest(source, cl, partitions=partitions, **read), gold, output)


def _with_gold(data: DistributedAnswers, gold: Any) -> DistributedAnswers:
    """The answers with gold truths set in every shard (checked as ``Gold.encode`` checks
    them); the gold goes to every worker once, each shard keeps its own tasks' part."""
    series = gold_series(gold)
    if series is None:
        return data
    values: np.ndarray
    if data.labels is not None:
        values = data.labels.get_indexer(pd.Index(series.to_numpy()))
        if (values < 0).any():
            bad = series[values < 0].iloc[:3].tolist()
            raise ValidationError(
                f"gold has label(s) {bad} outside the answer domain {list(data.labels)}. "
                "Declare them with labels=... or fix the values."
            )
    else:
        try:
            values = series.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValidationError("gold truths for numeric answers must be numbers.") from exc
    client = data.client
    shared = client.submit(_shard.const, (pd.Index(series.index), values), pure=False)
    outs = [client.submit(_shard.with_gold, s, shared, pure=False) for s in data.shards]
    found = sum(gather(client, [client.submit(_shard.second, o, pure=False) for o in outs]))
    if found < len(series):
        raise ValidationError(
            f"gold names {len(series) - found} task(s) with no answers. Pass only tasks that "
            "appear in the answers."
        )
    shards = [client.submit(_shard.first, o, pure=False) for o in outs]
    return dataclasses.replace(data, shards=shards)


def _new_folder(output: str | os.PathLike[str]) -> tuple[str, str]:
    """The output folder's path and a fresh temporary folder beside it (same filesystem, so
    that renaming it is atomic)."""
    target = os.path.abspath(os.fspath(output))
    parent, name = os.path.split(target)
    if os.path.lexists(target):
        raise ValidationError(
            f"{os.fspath(output)!r} exists. Remove it or pick another name: the results are "
            "written as a new folder of Parquet files."
        )
    if not os.path.isdir(parent):
        raise ValidationError(f"The folder of {os.fspath(output)!r} does not exist. Create it.")
    return target, tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)


def _fit(
    estimator: Estimator,
    data: DistributedAnswers,
    gold: Any = None,
    output: str | os.PathLike[str] | None = None,
) -> Estimator:
    if data.kind not in estimator.kinds:
        raise ValidationError(
            f"{type(estimator).__name__} takes {' or '.join(estimator.kinds)} answers; these are "
            f"{data.kind}. Pick another method or recode the answers (kind=...)."
        )
    estimator._validate_params()
    for name in [k for k in vars(estimator) if k.endswith("_") and not k.startswith("_")]:
        delattr(estimator, name)
    estimator._warm = None
    driver = _driver(estimator)
    assert driver is not None  # fit_distributed refused the others
    has_gold = gold is not None and gold_series(gold) is not None
    if has_gold:
        data = _with_gold(data, gold)
    passes = _Passes(data)
    passes.has_gold = has_gold
    if output is None:
        driver(estimator, data, passes)
        # warm_state_ reads the answers' task and label order, which _set_results was given.
        estimator._answers = cast(Answers, _coded(data, estimator.truths_.index))
        return estimator
    target, passes.output = _new_folder(output)
    try:
        driver(estimator, data, passes)
        os.rename(passes.output, target)
    except BaseException:
        shutil.rmtree(passes.output, ignore_errors=True)
        raise
    # The per-task results are in the files, not here: no empty stand-ins.
    for name in ("truths_", "probas_"):
        if hasattr(estimator, name):
            delattr(estimator, name)
    estimator.output_ = target  # type: ignore[attr-defined]
    return estimator
