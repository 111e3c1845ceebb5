"""Run P2's worker-private EM on an answer table, one simulated party per worker.

The table is split by worker before anything starts: each :class:`~privtd.secure.parties.Worker`
receives only its own rows, and the :class:`~privtd.secure.parties.Requester` receives only the
public description (number of tasks, the label domain or answer range). With
``processes=True`` every worker runs in its own OS process.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers, as_answers
from ..errors import ConvergenceWarning, ValidationError
from . import fixed_point
from .models import MODELS, ModelSpec
from .paillier import KEY_BITS
from .parties import BACKENDS, Requester, RoundStats, SecureRun, Transport, Worker
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

    Parameters
    ----------
    model : {"auto", "binary", "multiclass", "real"}
        "auto" picks binary for two labels, multiclass for more, real for numeric answers.
    backend : {"masking", "paillier"}
        The secure sum: pairwise masks (default, fast) or Paillier encryption (P2's choice).
    processes : bool
        One OS process per worker, over loopback sockets, instead of objects in this process.
    tol, max_iter
        The stopping rule of the matching plain estimator (LatentClass, DawidSkene, Raykar).
    fraction_bits : int
        Fixed-point precision; each secure sum is off by at most ``J * 2**-(F+1)``.
    key_bits : int
        Paillier modulus length (2048 by default; shorter keys only for tests).
    eta, gamma
        Clip of the binary model; precision cap of the real model in units of the answer range.
    value_range : (low, high), optional
        The public answer range of the real model; defaults to the answers' declared range.
    min_participants, max_attempts
        The fewest workers a round may have; how often a round is retried after drop-outs.
    on_round : callable, optional
        Called with each round's :class:`~privtd.secure.parties.RoundStats`.

    Fitted: ``truths_`` (Series by task id), ``probas_`` (categorical), ``n_iter_``,
    ``converged_``, ``objective_``, ``rounds_`` (one row per round: time and bytes by party kind),
    ``dropped_`` (worker ids that dropped out), ``run_``.
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
        min_participants: int = 3,
        max_attempts: int = 3,
        timeout: float = 120.0,
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
        self.min_participants = min_participants
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.on_round = on_round

    def spec_for(self, answers: Answers) -> ModelSpec:
        """The public description of a run on ``answers``."""
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
                "Use real for numeric answers, binary or multiclass for labels."
            )
        low, high = 0.0, 1.0
        if model == "real":
            declared = self.value_range or answers.value_range
            if declared is None:
                raise ValidationError(
                    "The real model needs the public answer range: pass value_range=(low, high) "
                    "(--value-range LOW HIGH), or declare it when loading the answers."
                )
            low, high = (float(v) for v in declared)
        n_labels = answers.n_labels if answers.is_categorical else 2
        return ModelSpec(model, answers.n_tasks, n_labels, self.eta, self.gamma, low, high)

    def fit(self, answers: Answers | Any) -> SecureEM:
        answers = as_answers(answers)
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
        transport: Transport
        if self.processes:
            transport = SocketTransport(
                held, min_participants=self.min_participants, timeout=self.timeout
            )
            self.workers_: list[Worker] = []
        else:
            self.workers_ = [
                Worker(w, tasks, values, min_participants=self.min_participants)
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
            on_round=self.on_round,
        )
        run = requester.run()
        self._set_results(answers, spec, run)
        return self

    def _set_results(self, answers: Answers, spec: ModelSpec, run: SecureRun) -> None:
        self.run_ = run
        self.spec_ = spec
        state = run.state
        if spec.model == "real":
            self.truths_ = pd.Series(
                spec.low + (spec.high - spec.low) * state, index=answers.tasks, name="truth"
            )
            self.probas_ = None
        else:
            assert answers.labels is not None
            proba = np.column_stack([1.0 - state, state]) if spec.model == "binary" else state
            self.truths_ = pd.Series(
                answers.labels.take(proba.argmax(axis=1)), index=answers.tasks, name="truth"
            )
            self.probas_ = pd.DataFrame(proba, index=answers.tasks, columns=answers.labels)
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
