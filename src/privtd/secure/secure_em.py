"""Run P2's worker-private EM on an answer table, one simulated party per worker.

The table is split by worker before anything starts: each :class:`~privtd.secure.parties.Worker`
receives only its own rows, and the :class:`~privtd.secure.parties.Requester` receives only the
public description (number of tasks, the label domain or answer range). With
``processes=True`` every worker runs in its own OS process.

What the requester learns, and what ``min_answers`` and a drop-out do: ``docs/secure.md``.
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers, as_answers
from ..errors import ConvergenceWarning, ValidationError
from . import fixed_point
from .campaign import Campaign
from .history import WorkerHistory
from .models import GLAD_REFUSED, MODELS, ModelSpec
from .paillier import KEY_BITS
from .parties import (
    BACKENDS,
    MIN_ANSWERS,
    Requester,
    RoundStats,
    SecureRun,
    Transport,
    Worker,
    check_min_answers,
)
from .transport import InProcessTransport, SocketTransport


def split_by_worker(answers: Answers) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each worker code's own (task codes, value codes): what that worker holds, and no more."""
    order = np.argsort(answers.worker, kind="stable")
    worker = answers.worker[order]
    cuts = np.flatnonzero(np.diff(worker)) + 1
    starts = np.concatenate([[0], cuts])
    return {
        int(worker[s]): (answers.task[order[s:e]].astype(np.int64), answers.value[order[s:e]])
        for s, e in zip(starts, np.append(cuts, len(order)), strict=True)
    }


class SecureEM:
    """Worker-private latent class EM (Kajino et al., DMKD 2014), every party simulated.

    The requester sees only secure sums, each task's answer count and the posteriors of every
    round (docs/secure.md lists what each party learns). With masking, every worker verifies
    each round's sums itself (one tagged masked contribution from every participant, which it
    adds) and computes the kept tasks and the posteriors from them: a requester that crafts
    the posteriors or a sum is refused. No worker sends its time or any other side value.

    Not protected: two tasks whose answerers differ by one worker give the requester that
    worker's terms from the difference of their sums, whatever ``min_answers`` is; Sybil
    workers of the requester's that answer every task bring back every task with one real
    answer (148 of 148 on a sparse crowd, labels 1.000); each worker learns from the
    posteriors whether the others who answered its tasks agreed with it. With
    ``backend="paillier"`` the requester must be semi-honest: workers cannot verify its sums
    and compute on the posteriors it broadcasts, so one that broadcasts crafted posteriors
    reads every worker's answers (8 of 8 workers, labels 1.000), and one that has a worker's
    ciphertexts decrypted by the key holder reads that worker's.

    Parameters
    ----------
    model : {"auto", "binary", "multiclass", "one-coin", "real"}
        "auto" picks binary for two labels, multiclass for more, real for numeric answers;
        "one-coin" (one private accuracy per worker) is chosen by name. "glad" is refused:
        its joint conjugate-gradient M-step has no secure-sum form here (docs/secure.md).
    backend : {"masking", "paillier"}
        The secure sum: pairwise masks (default, fast; workers verify every sum) or Paillier
        encryption (P2's choice; semi-honest requester only, see above).
    processes : bool
        One OS process per worker, over loopback sockets, instead of objects in this process.
    tol, max_iter
        The stopping rule of the matching plain estimator (LatentClass, DawidSkene,
        OneCoinDawidSkene, Raykar).
    fraction_bits : int
        Fixed-point precision; each secure sum is off by at most ``J * 2**-(F+1)``.
    key_bits : int
        Paillier modulus length, at least 2048 bits (shorter keys only with
        ``test_only_short_keys``).
    eta, gamma
        Clip of the binary model; precision cap of the real model in units of the answer range.
    value_range : (low, high), optional
        The public answer range of the real model; defaults to the answers' declared range.
    min_answers : int
        At least 2, default 3. A first secure sum counts the answers of every task; tasks with
        fewer are left out of every later sum, because their sums would be one or two workers'
        own terms. Their truth is not inferred: NaN in ``truths_`` and ``probas_``, listed in
        ``too_few_answers_`` ("too few answers to protect"), with a warning. Every simulated
        worker takes it as its own floor and refuses a run under it (a real
        :class:`~privtd.secure.Worker` sets its own, default 3).
    allow_leaky_rerun : bool
        Off by default: a worker that drops out ends the run with
        :class:`~privtd.secure.parties.DropoutError`, and no sum over the workers that remain is
        released. On: the round is retried without it, and a fit over another set of workers
        than an earlier fit of the same campaign goes on. **Either reveals which tasks the
        missing workers answered and their labels** (the difference of two sums over two sets
        of workers is their contribution; ``docs/secure.md``).
    campaign : Campaign, path or None
        The requester's record of earlier runs that ``allow_leaky_rerun`` guards against. A path
        keeps the record in a JSON file across processes; None keeps it in this object (every
        ``fit`` of one SecureEM is one campaign). Runs that do not share a record are not linked
        by it: that is the workers' own record's job.
    worker_history : path or None
        The workers' own records of the runs they took part in
        (:class:`~privtd.secure.WorkerHistory`), which a dishonest requester cannot reset: a
        worker refuses a run that shares a task with one of its earlier runs but not its workers
        or not its answers. A folder keeps one JSON file per worker (``<worker id>.json``,
        holding its private identity key: keep the folder private), as separate devices would.
        None keeps them in this object across fits (in a private temporary folder with
        ``processes``); a new SecureEM then starts with workers that remember nothing, as new
        devices would.
    min_participants, max_attempts
        The fewest workers a round may have; how often a round is retried after drop-outs
        (with ``allow_leaky_rerun``).
    test_only_short_keys : bool
        Accept Paillier keys under 2048 bits. For tests only: such keys can be factored, which
        reveals every worker's contribution.
    on_round : callable, optional
        Called with each round's :class:`~privtd.secure.parties.RoundStats`.

    Notes
    -----
    Fitted: ``truths_`` (Series by task id; NaN for the tasks with too few answers),
    ``probas_`` (categorical), ``answer_counts_`` (per task: the requester learns them),
    ``too_few_answers_`` (task ids left out), ``n_iter_``, ``converged_``, ``objective_``,
    ``rounds_`` (one row per round: time and bytes by party kind; the workers' times are the
    simulation's own measure, NaN with ``processes``), ``dropped_`` (worker ids that
    dropped out; only with ``allow_leaky_rerun``), ``campaign_``, ``run_``.
    """

    def __init__(
        self,
        model: str = "auto",
        backend: str = "masking",
        *,
        processes: bool = False,
        tol: float | None = None,
        max_iter: int = 500,
        fraction_bits: int = fixed_point.FRACTION_BITS,
        key_bits: int = KEY_BITS,
        eta: float = 1e-6,
        gamma: float = 1e4,
        value_range: tuple[float, float] | None = None,
        min_answers: int = MIN_ANSWERS,
        allow_leaky_rerun: bool = False,
        campaign: Campaign | str | os.PathLike[str] | None = None,
        worker_history: str | os.PathLike[str] | None = None,
        min_participants: int = 3,
        max_attempts: int = 3,
        timeout: float = 120.0,
        test_only_short_keys: bool = False,
        on_round: Callable[[RoundStats], None] | None = None,
    ) -> None:
        self.model = model
        self.backend = backend
        self.processes = processes
        self.tol = tol
        self.max_iter = max_iter
        self.fraction_bits = fraction_bits
        self.key_bits = key_bits
        self.eta = eta
        self.gamma = gamma
        self.value_range = value_range
        self.min_answers = min_answers
        self.allow_leaky_rerun = allow_leaky_rerun
        self.campaign = campaign
        self.worker_history = worker_history
        self.min_participants = min_participants
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.test_only_short_keys = test_only_short_keys
        self.on_round = on_round

    def spec_for(self, answers: Answers) -> ModelSpec:
        """The public description of a run on ``answers``."""
        if self.model == "glad":
            raise ValidationError(GLAD_REFUSED)
        if self.model not in ("auto", *MODELS):
            raise ValidationError(
                f"Unknown model {self.model!r}. Choose auto, {', '.join(MODELS)}."
            )
        if self.backend not in BACKENDS:
            raise ValidationError(
                f"Unknown backend {self.backend!r}. Choose one of {', '.join(BACKENDS)}."
            )
        model = self.model
        if model == "auto":
            model = (
                "real"
                if not answers.is_categorical
                else ("binary" if answers.n_labels == 2 else "multiclass")
            )
        if (model == "real") == answers.is_categorical:
            raise ValidationError(
                f"The {model} model does not fit {answers.kind} answers. "
                "Use real for numeric answers, binary, multiclass or one-coin for labels."
            )
        low, high = 0.0, 1.0
        if model == "real":
            declared = self.value_range or answers.value_range
            if declared is None:
                raise ValidationError(
                    "The real model needs the public answer range: pass value_range=(low, high), "
                    "or declare it when loading the answers.",
                    param="value_range",
                )
            low, high = (float(v) for v in declared)
        n_labels = answers.n_labels if answers.is_categorical else 2
        return ModelSpec(model, answers.n_tasks, n_labels, self.eta, self.gamma, low, high)

    def _campaign(self) -> Campaign:
        """The record of earlier runs: the given one, the file's, or this object's own."""
        if isinstance(self.campaign, Campaign):
            return self.campaign
        if self.campaign is not None:
            return Campaign.open(self.campaign)
        if getattr(self, "campaign_", None) is None:
            self.campaign_ = Campaign()
        return self.campaign_

    def _history_file(self, name: str) -> Path:
        """The history file of worker ``name``: in ``worker_history``, or this object's own
        private temporary folder (for worker processes, which cannot share objects)."""
        folder = self.worker_history
        if folder is None:
            if getattr(self, "_history_folder", None) is None:
                # Removed with this object: its workers' memory lives as long as it does.
                self._history_folder = tempfile.TemporaryDirectory(prefix="privtd-workers-")
            folder = self._history_folder.name
        where = Path(folder)
        if not where.is_dir():
            raise ValidationError(
                f"The worker history folder {str(where)!r} does not exist. Create it first."
            )
        # Quoted so that no worker id can name a file outside the folder.
        return where / (urllib.parse.quote(name, safe="") + ".json")

    def _histories(self, names: list[str]) -> dict[str, WorkerHistory]:
        """Each worker's own record, in memory across this object's fits, or from its file."""
        if self.worker_history is not None:
            return {n: WorkerHistory.open(self._history_file(n)) for n in names}
        if getattr(self, "worker_histories_", None) is None:
            self.worker_histories_: dict[str, WorkerHistory] = {}
        for n in names:
            self.worker_histories_.setdefault(n, WorkerHistory())
        return {n: self.worker_histories_[n] for n in names}

    def fit(self, answers: Answers | Any) -> SecureEM:
        answers = as_answers(answers)
        check_min_answers(self.min_answers)
        spec = self.spec_for(answers)
        if spec.model == "real":
            lo, hi = spec.low, spec.high
            outside = (answers.value < lo) | (answers.value > hi)
            if outside.any():
                raise ValidationError(
                    f"{int(outside.sum())} answer(s) fall outside the public range [{lo}, {hi}]; "
                    "widen value_range."
                )
        held = split_by_worker(answers)
        # In this simulation every worker takes the same policy as the requester; a real worker
        # sets its own (privtd.secure.Worker).
        policy: dict[str, Any] = {
            "allow_leaky_rerun": self.allow_leaky_rerun,
            "min_answers": self.min_answers,
            "test_only_short_keys": self.test_only_short_keys,
        }
        campaign = self._campaign()
        self.campaign_ = campaign
        # Refuse a leaky re-run before any worker is started.
        campaign.check((str(answers.workers[w]) for w in held), self.allow_leaky_rerun)
        names = {w: str(answers.workers[w]) for w in held}
        # What each worker's device holds besides its answers' codes: their task ids and labels.
        own: dict[int, dict[str, Any]] = {
            w: {
                "task_names": [str(t) for t in answers.tasks[tasks]],
                "value_names": [
                    str(v) for v in (values if answers.labels is None else answers.labels[values])
                ],
            }
            for w, (tasks, values) in held.items()
        }
        transport: Transport
        if self.processes:
            for w in held:
                own[w]["history"] = str(self._history_file(names[w]))
                # A bad file fails here, with its message, not as a worker process that dies.
                WorkerHistory.open(own[w]["history"])
            transport = SocketTransport(
                held,
                min_participants=self.min_participants,
                timeout=self.timeout,
                worker_options=policy,
                own_options=own,
            )
            self.workers_: list[Worker] = []
        else:
            histories = self._histories(list(names.values()))
            self.workers_ = [
                Worker(
                    w,
                    tasks,
                    values,
                    min_participants=self.min_participants,
                    history=histories[names[w]],
                    **policy,
                    **own[w],
                )
                for w, (tasks, values) in held.items()
            ]
            transport = InProcessTransport(self.workers_)
        requester = Requester(
            spec,
            transport,
            self.backend,
            tol=self.tol,
            max_iter=self.max_iter,
            fraction_bits=self.fraction_bits,
            key_bits=self.key_bits,
            max_attempts=self.max_attempts,
            min_participants=self.min_participants,
            min_answers=self.min_answers,
            allow_leaky_rerun=self.allow_leaky_rerun,
            campaign=campaign,
            worker_names=names,
            test_only_short_keys=self.test_only_short_keys,
            on_round=self.on_round,
        )
        try:
            run = requester.run()
        finally:
            campaign.save()
        self._set_results(answers, spec, run)
        return self

    def _set_results(self, answers: Answers, spec: ModelSpec, run: SecureRun) -> None:
        self.run_ = run
        self.spec_ = spec
        kept = run.kept_tasks
        state = run.state
        self.answer_counts_ = pd.Series(run.counts, index=answers.tasks, name="answers")
        left_out = np.ones(spec.n_tasks, dtype=bool)
        left_out[kept] = False
        self.too_few_answers_ = answers.tasks[left_out]
        if spec.model == "real":
            truth = np.full(spec.n_tasks, np.nan)
            truth[kept] = spec.low + (spec.high - spec.low) * state
            self.truths_ = pd.Series(truth, index=answers.tasks, name="truth")
            self.probas_ = None
        else:
            assert answers.labels is not None
            proba = np.full((spec.n_tasks, spec.n_labels), np.nan)
            proba[kept] = np.column_stack([1.0 - state, state]) if spec.model == "binary" else state
            labels = answers.labels.take(proba[kept].argmax(axis=1))
            if left_out.any():
                values = np.full(spec.n_tasks, np.nan, dtype=object)
                values[kept] = np.asarray(labels, dtype=object)
                self.truths_ = pd.Series(values, index=answers.tasks, name="truth")
            else:
                self.truths_ = pd.Series(labels, index=answers.tasks, name="truth")
            self.probas_ = pd.DataFrame(proba, index=answers.tasks, columns=answers.labels)
        if left_out.any():
            warnings.warn(
                f"{int(left_out.sum())} of {spec.n_tasks} task(s) have fewer than "
                f"min_answers={check_min_answers(self.min_answers)} answers: too few answers to "
                "protect. They were left out of every secure sum and their truth is not inferred "
                "(NaN; listed in too_few_answers_).",
                UserWarning,
                stacklevel=3,
            )
        self.n_iter_ = run.n_iter
        self.converged_ = run.converged
        self.objective_ = np.asarray(run.objective, dtype=float)
        self.rounds_ = run.rounds_frame()
        self.dropped_ = [answers.workers[w] for w in run.dropped]
        if not run.converged:
            warnings.warn(
                f"SecureEM stopped at max_iter={run.n_iter} before meeting its stopping rule; "
                "raise max_iter or tol.",
                ConvergenceWarning,
                stacklevel=2,
            )
