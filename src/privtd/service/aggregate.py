"""Aggregation runs: the campaign's reports read straight from the database into integer-coded
arrays, the campaign's estimator fitted in a background thread, progress and results written
back to the run's row. A run resumes from the newest finished run's fit (warm start) where the
estimator can: answers only accumulate, so most of the previous fit still holds."""

from __future__ import annotations

import threading
import time
import traceback
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from ..answers import Answers
from ..errors import ConvergenceWarning, PrivtdError
from ..inference import AwareNull, make_estimator, takes_mechanism
from . import campaigns
from .schema import reports as t_reports
from .schema import runs as t_runs
from .schema import tasks as t_tasks
from .schema import workers as t_workers

#: The error of a run the server stopped in the middle of.
INTERRUPTED = "interrupted: the server stopped during this run; start a new run"


def now() -> datetime:
    return datetime.now(UTC)


class Runner:
    """Runs one in-memory aggregation at a time per server (a fit uses every core numpy
    gives it).

    With ``dask_scheduler`` (``privtd serve --dask-scheduler``), a campaign whose method runs
    on a Dask cluster (``privtd.inference.DISTRIBUTED_METHODS``) is fitted there instead,
    reached over TLS with ``dask_security`` (or over plain TCP with ``dask_allow_plain_tcp``):
    its reports are written as Parquet under ``dask_dir`` (a folder every Dask worker can
    read; default: the system's temporary folder, enough for workers on this machine), the
    cluster fits them, the file is removed. Such a run starts afresh (no warm start on a
    cluster). Cluster runs wait on the network, not on this machine's cores: each requester's
    go one at a time on a thread of their own, so that neither another requester's runs nor
    the in-memory ones wait on a slow or stalled cluster; connecting and every pass have a
    deadline (``privtd.inference.distributed.CONNECT_TIMEOUT``, ``PASS_TIMEOUT``)."""

    def __init__(
        self,
        engine: sa.Engine,
        dask_scheduler: str | None = None,
        dask_dir: str | None = None,
        dask_security: Any = None,
        dask_allow_plain_tcp: bool = False,
    ) -> None:
        if dask_scheduler is not None:
            from ..inference.distributed import check_scheduler

            check_scheduler(dask_scheduler, dask_security, dask_allow_plain_tcp)
        self.engine = engine
        self.dask_scheduler = dask_scheduler
        self.dask_dir = dask_dir
        self.dask_security = dask_security
        self.dask_allow_plain_tcp = dask_allow_plain_tcp
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="privtd-run")
        self.cluster_pools: dict[str, ThreadPoolExecutor] = {}
        self.lock = threading.Lock()
        self.interrupted = self.fail_interrupted()

    def fail_interrupted(self) -> int:
        """Mark failed every run a previous server process left queued or running (it died:
        a crash, kill -9, a power cut), so no run stays "running" forever; returns how many.

        Failed, not restarted: the requester sees why and starts a new run, which resumes from
        the newest finished one. This assumes one server process per database, which is what
        ``privtd serve`` runs.
        """
        with self.engine.begin() as conn:
            done = conn.execute(
                t_runs.update()
                .where(t_runs.c.status.in_(("queued", "running")))
                .values(
                    status="failed",
                    error=INTERRUPTED,
                    finished_at=now(),
                )
            )
        return int(done.rowcount)

    def start(self, campaign: Any) -> str:
        run_id = str(uuid.uuid4())
        with self.engine.begin() as conn:
            conn.execute(
                t_runs.insert().values(
                    id=run_id,
                    campaign_id=campaign.id,
                    status="queued",
                    method=campaign.method,
                    n_reports=0,
                    iteration=0,
                    max_iter=0,
                    created_at=now(),
                )
            )
        self._pool(campaign).submit(self._run, run_id, campaign)
        return run_id

    def _pool(self, campaign: Any) -> ThreadPoolExecutor:
        """The runner thread of this campaign's run: the requester's own for a cluster run,
        the shared one for an in-memory fit."""
        if self.dask_scheduler is None or not on_dask(campaign.method):
            return self.pool
        with self.lock:
            pool = self.cluster_pools.get(campaign.requester_id)
            if pool is None:
                pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="privtd-cluster-run")
                self.cluster_pools[campaign.requester_id] = pool
            return pool

    def _previous(self, campaign: Any) -> Any:
        """The newest finished run of this campaign's method that kept its state, or None."""
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(t_runs.c.id, t_runs.c.state)
                .where(
                    t_runs.c.campaign_id == campaign.id,
                    t_runs.c.status == "done",
                    t_runs.c.method == campaign.method,
                    t_runs.c.state.is_not(None),
                )
                .order_by(t_runs.c.created_at.desc())
                .limit(1)
            ).first()

    def _update(self, run_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(t_runs.update().where(t_runs.c.id == run_id).values(**values))

    def _run(self, run_id: str, campaign: Any) -> None:
        try:
            answers, mech = load(self.engine, campaign)
            if answers is None:
                raise PrivtdError("The campaign has no reports yet.")
            params: dict[str, Any] = {}
            if takes_mechanism(campaign.method):
                params["mechanism"] = mech
            estimator = make_estimator(campaign.method, **params)
            on_cluster = self.dask_scheduler is not None and on_dask(campaign.method)
            previous = None
            if estimator.warm_starts and not on_cluster:
                previous = self._previous(campaign)
            last = [0.0]

            def progress(n_iter: int, max_iter: int) -> None:
                # At most two writes a second, whatever the iteration rate.
                if time.monotonic() - last[0] > 0.5:
                    last[0] = time.monotonic()
                    self._update(run_id, iteration=n_iter, max_iter=max_iter)

            estimator.progress = progress
            self._update(
                run_id,
                status="running",
                n_reports=answers.n_answers,
                warm_from=None if previous is None else previous.id,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                try:
                    if on_cluster:
                        fit_on_cluster(
                            estimator,
                            answers,
                            str(self.dask_scheduler),
                            self.dask_dir,
                            security=self.dask_security,
                            allow_plain_tcp=self.dask_allow_plain_tcp,
                        )
                    else:
                        estimator.fit(
                            answers, warm_start=None if previous is None else previous.state
                        )
                except Exception:  # noqa: BLE001 - whatever a bad state raises, fit afresh
                    if previous is None:
                        raise
                    # A state this version cannot resume (an older model's arrays, a damaged
                    # row: not always a ValidationError, a malformed part can raise TypeError
                    # deep in the estimator): fit afresh. A fault of the fit itself recurs in
                    # the fresh fit and fails the run there.
                    self._update(run_id, warm_from=None)
                    estimator = make_estimator(campaign.method, **params)
                    estimator.progress = progress
                    estimator.fit(answers)
            result = summarise(estimator, answers, mech, campaign, self.engine)
            self._update(
                run_id,
                status="done",
                iteration=estimator.n_iter_,
                result=result,
                state=estimator.warm_state_ if estimator.warm_starts and not on_cluster else None,
                finished_at=now(),
            )
        except PrivtdError as exc:
            self._update(run_id, status="failed", error=str(exc).splitlines()[0], finished_at=now())
        except Exception as exc:  # noqa: BLE001 - a run must end in a state the API can show
            traceback.print_exc()
            self._update(
                run_id,
                status="failed",
                error=f"internal error: {type(exc).__name__}",
                finished_at=now(),
            )


def on_dask(method: str) -> bool:
    from ..inference.distributed import DISTRIBUTED_METHODS

    return method in DISTRIBUTED_METHODS


def fit_on_cluster(
    estimator: Any,
    answers: Answers,
    scheduler: str,
    folder: str | None = None,
    *,
    security: Any = None,
    allow_plain_tcp: bool = False,
) -> Any:
    """Fit ``estimator`` on the Dask cluster at ``scheduler`` (reached as
    :func:`privtd.inference.distributed.connect` reaches it, with ``security`` or
    ``allow_plain_tcp``) on the campaign's reports, written to a temporary Parquet file in
    ``folder`` (every worker must read it) once the cluster answered, and removed after,
    whatever the outcome. Rows go in task order, each task's reports in their order, so
    that the fit sees the tasks in campaign order; the label domain is the campaign's,
    labels without reports included. The fitted ``truths_``/``probas_`` cover the tasks with
    reports only."""
    import tempfile

    from ..inference.distributed import connect, fit_distributed

    order = np.argsort(answers.task, kind="stable")
    if answers.labels is not None:
        values: Any = answers.labels.take(answers.value[order])
    else:
        values = answers.value[order]
    frame = pd.DataFrame(
        {
            "task": answers.tasks.take(answers.task[order]).astype(str),
            "worker": answers.workers.take(answers.worker[order]).astype(str),
            "answer": values,
        }
    )
    kind = "numeric" if answers.labels is None else "categorical"
    with (
        connect(scheduler=scheduler, security=security, allow_plain_tcp=allow_plain_tcp) as client,
        tempfile.TemporaryDirectory(prefix="privtd-run-", dir=folder) as tmp,
    ):
        path = f"{tmp}/reports.parquet"
        frame.to_parquet(path, index=False)
        return fit_distributed(
            estimator,
            path,
            client=client,
            kind=kind,
            labels=None if answers.labels is None else list(answers.labels),
        )


def load(engine: sa.Engine, campaign: Any) -> tuple[Answers | None, Any]:
    """The campaign's non-NULL reports as Answers (tasks in campaign order, workers who
    submitted anything), read column-wise."""
    mech = campaigns.rebuild(campaign.mechanism, campaign.mechanism_params)
    with engine.connect() as conn:
        keys = (
            conn.execute(
                sa.select(t_tasks.c.key)
                .where(t_tasks.c.campaign_id == campaign.id)
                .order_by(t_tasks.c.position)
            )
            .scalars()
            .all()
        )
        result = conn.execute(
            sa.select(t_reports.c.task_position, t_reports.c.worker_id, t_reports.c.value).where(
                t_reports.c.campaign_id == campaign.id
            )
        )
        # The driver's plain tuples: these columns need no type processing, and building a
        # frame from SQLAlchemy's Row objects took 9 of a million-report run's 11 seconds.
        rows = result.cursor.fetchall()
        result.close()
    if not rows:
        return None, mech
    frame = pd.DataFrame(rows, columns=["task", "worker", "value"])
    worker_codes, workers = pd.factorize(frame["worker"])
    present = frame["value"].notna().to_numpy()
    value = frame["value"].to_numpy(dtype=float)[present]
    labels = None
    if mech.kind == "categorical":
        labels = pd.Index(campaign.labels)
        value = value.astype(np.int64)
    answers = Answers(
        task=frame["task"].to_numpy(dtype=np.int32)[present],
        worker=worker_codes.astype(np.int32)[present],
        value=value,
        tasks=pd.Index(keys),
        workers=pd.Index(workers),
        labels=labels,
    )
    return answers, mech


def summarise(
    estimator: Any, answers: Answers, mech: Any, campaign: Any, engine: sa.Engine
) -> dict[str, Any]:
    """Truths, confidence, worker quality and the privacy report, as JSON."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t_workers.c.id, t_workers.c.name, t_workers.c.spent_epsilon).where(
                t_workers.c.campaign_id == campaign.id
            )
        ).all()
        n_tasks = conn.execute(
            sa.select(sa.func.count())
            .select_from(t_tasks)
            .where(t_tasks.c.campaign_id == campaign.id)
        ).scalar_one()
    people = {r.id: r.name for r in rows}
    spent = {r.name: r.spent_epsilon for r in rows}
    truths = estimator.truths_
    # The tasks with reports: all of truths_ after a fit on a cluster, which sees only those.
    answered = truths.index.isin(
        answers.tasks[np.bincount(answers.task, minlength=answers.n_tasks) > 0]
    )
    out_truths = {
        str(k): _json(v)
        for k, v, ok in zip(truths.index, truths.to_numpy(), answered, strict=True)
        if ok
    }
    confidence = None
    if estimator.probas_ is not None:
        top = estimator.probas_.max(axis=1)
        confidence = {str(k): float(v) for k, v in top.items() if str(k) in out_truths}
    weights = estimator.weights_["weight"]
    g = mech.guarantee
    k = campaigns.answers_per_draw(mech, n_tasks)
    per, whole = campaigns.figures(mech, k)
    extra: dict[str, Any] = {}
    if isinstance(estimator, AwareNull):
        # How far the release fixes the pooled answers, which sparse tasks' truths follow.
        extra["pooled_median_interval"] = list(estimator.pooled_median_interval_)
    return {
        "method": campaign.method,
        "n_reports": answers.n_answers,
        "truths": out_truths,
        "confidence": confidence,
        "workers": {people.get(w, str(w)): float(v) for w, v in weights.items()},
        "privacy": {
            "mechanism": campaign.mechanism,
            "guarantee": str(g),
            "epsilon": g.epsilon,
            "unit": g.unit,
            # A worker who answered every task in one submission (one private draw).
            "answers_per_draw": k,
            "answer_epsilon": per,
            "release_epsilon": whole,
            "budget_per_worker": campaign.budget_epsilon,
            # Per worker, over its submissions (each one draw): the sum of each one's whole
            # release, release_epsilon(n) for its n reports.
            "spent_epsilon": spent,
        },
        **extra,
    }


def _json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value
