"""The latent class models of P2, split into a worker's half and the requester's half.

A worker's half (:class:`LocalModel`) holds that worker's own answers and parameters: from the
broadcast posteriors it runs its own M-step, then forms its contribution to each task's secure
sums (zero for tasks it did not answer, so the sums also hide who answered what). The
requester's half (:class:`AggregateModel`) sees only those sums: it computes the posteriors, the
class prior, the stopping test, and checks that every sum is in the range the model allows.

The requester's half is a :class:`~privtd.inference._em.Model` of privtd's one EM loop,
:func:`~privtd.inference._em.run_em`: its parts are the workers, its two per-part steps
(:func:`local_start`, :func:`local_step`) are what every worker runs on its own answers in a
start and an EM round, and its statistics are the per-task secure sums. The secure sum is the
executor (:class:`~privtd.secure.parties.SecureSum`): the workers receive the name of the step
(the round's phase), never a function.

- ``binary``: the two-coin latent class model (docs/algorithms.md#latent-class): sums
  ``log a_i`` and ``log b_i``.
- ``multiclass``: Dawid-Skene (P2 appendix 1.1; docs/algorithms.md#dawid-skene): sums
  ``log rho[i, l]``, one per class.
- ``one-coin``: one-coin Dawid-Skene (docs/algorithms.md#one-coin-dawid-skene): each worker
  keeps one accuracy; the sums are per-task log-likelihoods ``log rho[i, l]``, one per class.
- ``real``: the regularised real-valued model (P2 appendix 1.2; docs/algorithms.md#raykar): sums
  ``sum_j lambda_j y_ij`` and ``sum_j lambda_j``.

With the same start, each model's iterates are those of the plain EM of
:class:`~privtd.inference.LatentClass`, :class:`~privtd.inference.DawidSkene`,
:class:`~privtd.inference.OneCoinDawidSkene` and :class:`~privtd.inference.Raykar` (``gamma``,
``init="mean"``), up to the fixed-point error.
The start is itself a secure sum: of votes (categorical) or of answers and counts (real).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import expit, logsumexp, softmax

from ..errors import ProtocolError, ValidationError
from ..inference._em import Model
from ..inference._ops import per_worker
from ..inference.dawid_skene import EPS
from ..inference.one_coin_dawid_skene import OneCoinDawidSkene

MODELS = ("binary", "multiclass", "one-coin", "real")
#: The models whose sums are one per class (the posteriors a row of K per task).
PER_CLASS = ("multiclass", "one-coin")
#: Dawid-Skene's floor on confusion entries and priors (as the plain estimator).
DS_FLOOR = 1e-10
#: Why GLAD has no secure model (SecureEM and the CLI refuse it with this line).
GLAD_REFUSED = (
    "GLAD is not available under the secure sum: its M-step fits the task difficulties and "
    "the worker abilities jointly by conjugate gradients, which would take one secure round "
    "per line-search step and release a per-task gradient sum each time; privtd implements no "
    "such protocol (docs/secure.md). Use one-coin, which also gives each worker one private "
    "accuracy."
)


@dataclass(frozen=True)
class ModelSpec:
    """The public description of a run that every party receives at setup.

    ``eta`` clips the binary model's sensitivity, specificity and prior (as
    :class:`~privtd.inference.LatentClass` does). ``gamma`` caps the real model's precision, in
    units of the public answer range ``[low, high]``: a worker's answers are mapped to ``[0, 1]``
    before anything is computed, so ``gamma = 1e4`` means no worker is trusted beyond a standard
    deviation of 1% of the range.
    """

    model: str
    n_tasks: int
    n_labels: int = 2
    eta: float = 1e-6
    gamma: float = 1e4
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if self.model == "glad":
            raise ValidationError(GLAD_REFUSED)
        if self.model not in MODELS:
            raise ValidationError(
                f"Unknown model {self.model!r}. Choose one of {', '.join(MODELS)}."
            )
        if self.n_tasks < 1:
            raise ValidationError(
                f"A secure run needs at least one task. Got n_tasks={self.n_tasks}."
            )
        if self.model == "binary" and self.n_labels != 2:
            raise ValidationError(
                f"The binary model needs exactly 2 labels; these answers have {self.n_labels}. "
                "Use model='multiclass'.",
                param="model",
            )
        if self.model in PER_CLASS and self.n_labels < 2:
            raise ValidationError(
                f"The {self.model} model needs at least 2 labels. Got {self.n_labels}."
            )
        if not 0.0 < self.eta < 0.5:
            raise ValidationError(f"eta must be in (0, 0.5). Got {self.eta}.")
        if not (np.isfinite(self.gamma) and self.gamma > 0):
            raise ValidationError(f"gamma must be a positive number. Got {self.gamma}.")
        if not (np.isfinite(self.low) and np.isfinite(self.high) and self.low < self.high):
            raise ValidationError(
                f"The answer range needs low < high. Got [{self.low}, {self.high}]."
            )

    @property
    def max_abs(self) -> float:
        """The largest ``|contribution|`` a worker can make: what the encoding must hold."""
        if self.model == "binary":
            return float(-np.log(self.eta))
        if self.model == "multiclass":
            # A confusion entry is at least the floor over the column's mass, at most n_tasks.
            return float(-np.log(DS_FLOOR / self.n_tasks))
        if self.model == "one-coin":
            # Both log-probabilities a worker sends are of entries clipped to [EPS, 1 - EPS].
            return float(-np.log(EPS))
        return 1.0

    @property
    def per_class(self) -> bool:
        """Whether the sums, and the posteriors, are one per class (else two per task)."""
        return self.model in PER_CLASS

    @property
    def n_sums(self) -> int:
        """Secure sums per task and round."""
        return self.n_labels if self.per_class else 2

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> ModelSpec:
        try:
            return cls(
                model=str(message["model"]),
                n_tasks=int(message["n_tasks"]),
                n_labels=int(message["n_labels"]),
                eta=float(message["eta"]),
                gamma=float(message["gamma"]),
                low=float(message["low"]),
                high=float(message["high"]),
            )
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise ProtocolError(f"Malformed model description at setup: {exc}") from None


# ------------------------------------------------------------------ the worker's half
class LocalModel(ABC):
    """One worker's private answers and parameters; nothing here leaves the worker in the clear."""

    def __init__(
        self, spec: ModelSpec, tasks: np.ndarray, values: np.ndarray, *, allow_empty: bool = False
    ) -> None:
        tasks = np.asarray(tasks, dtype=np.int64)
        if tasks.size == 0 and not allow_empty:
            raise ValidationError("A worker must hold at least one answer.")
        if tasks.size and (tasks.min() < 0 or tasks.max() >= spec.n_tasks):
            raise ValidationError(f"Task codes must be in [0, {spec.n_tasks}).")
        if np.unique(tasks).size != tasks.size:
            raise ValidationError("A worker answers each task at most once.")
        self.spec = spec
        self.tasks = tasks
        self.values = np.asarray(values)

    def answered(self) -> np.ndarray:
        """Contribution ``(n_tasks, 1)`` to the count of answers per task: 1 where answered."""
        out = np.zeros((self.spec.n_tasks, 1))
        out[self.tasks] = 1.0
        return out

    @abstractmethod
    def start(self) -> np.ndarray:
        """Contribution to the sums that start EM (votes, or answers and counts)."""

    @abstractmethod
    def update(self, state: np.ndarray) -> None:
        """Local M-step from the broadcast posteriors (or truths)."""

    @abstractmethod
    def contribution(self) -> np.ndarray:
        """Contribution ``(n_tasks, n_sums)`` to this round's secure sums."""

    def _dense(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros((self.spec.n_tasks, rows.shape[1]))
        out[self.tasks] = rows
        return out


class LocalBinary(LocalModel):
    def __init__(
        self, spec: ModelSpec, tasks: np.ndarray, values: np.ndarray, *, allow_empty: bool = False
    ) -> None:
        super().__init__(spec, tasks, values, allow_empty=allow_empty)
        if not np.isin(self.values, (0, 1)).all():
            raise ValidationError("Binary answers must be coded 0 or 1.")
        self.x = self.values.astype(np.float64)
        self.sensitivity = self.specificity = 0.5

    def start(self) -> np.ndarray:
        return self._dense(np.column_stack([self.x, np.ones_like(self.x)]))

    def update(self, state: np.ndarray) -> None:
        m = state[self.tasks]
        x = self.x
        sens = float((m * x).sum() / max(m.sum(), 1e-300))
        spec = float(((1.0 - m) * (1.0 - x)).sum() / max((1.0 - m).sum(), 1e-300))
        lo, hi = self.spec.eta, 1.0 - self.spec.eta
        self.sensitivity = min(max(sens, lo), hi)
        self.specificity = min(max(spec, lo), hi)

    def contribution(self) -> np.ndarray:
        x, a, b = self.x, self.sensitivity, self.specificity
        log_a = x * np.log(a) + (1.0 - x) * np.log1p(-a)
        log_b = (1.0 - x) * np.log(b) + x * np.log1p(-b)
        return self._dense(np.column_stack([log_a, log_b]))


class LocalLabels(LocalModel):
    """A worker's labels coded ``0..K-1``; its start is its votes, one indicator per class."""

    def __init__(
        self, spec: ModelSpec, tasks: np.ndarray, values: np.ndarray, *, allow_empty: bool = False
    ) -> None:
        super().__init__(spec, tasks, values, allow_empty=allow_empty)
        k = spec.n_labels
        if not np.isin(self.values, np.arange(k)).all():
            raise ValidationError(f"{spec.model.capitalize()} answers must be coded 0..{k - 1}.")
        self.y = self.values.astype(np.int64)

    def start(self) -> np.ndarray:
        return self._dense(np.eye(self.spec.n_labels)[self.y])


class LocalMulticlass(LocalLabels):
    def __init__(
        self, spec: ModelSpec, tasks: np.ndarray, values: np.ndarray, *, allow_empty: bool = False
    ) -> None:
        super().__init__(spec, tasks, values, allow_empty=allow_empty)
        k = spec.n_labels
        self.confusion = np.full((k, k), 1.0 / k)  # [answer, truth]

    def update(self, state: np.ndarray) -> None:
        k = self.spec.n_labels
        counts = np.zeros((k, k))
        np.add.at(counts, self.y, state[self.tasks])
        np.maximum(counts, DS_FLOOR, out=counts)
        self.confusion = counts / counts.sum(axis=0, keepdims=True)

    def contribution(self) -> np.ndarray:
        return self._dense(np.log(self.confusion)[self.y])


class LocalOneCoin(LocalLabels):
    """One accuracy ``s``: right with probability ``s``, else uniformly one of the other labels.

    Its M-step is :class:`~privtd.inference.OneCoinDawidSkene`'s for one worker: ``s`` is the
    mean posterior mass of the labels it gave (``1/K`` without a kept answer), and the two
    confusion entries are clipped to ``[1e-10, 1 - 1e-10]``.
    """

    def __init__(
        self, spec: ModelSpec, tasks: np.ndarray, values: np.ndarray, *, allow_empty: bool = False
    ) -> None:
        super().__init__(spec, tasks, values, allow_empty=allow_empty)
        self.accuracy = 1.0 / spec.n_labels

    def update(self, state: np.ndarray) -> None:
        total = np.array([state[self.tasks, self.y].sum()])
        counts = np.array([self.y.size])
        self.accuracy = float(per_worker(total, counts, 1.0 / self.spec.n_labels)[0])

    def contribution(self) -> np.ndarray:
        """Per answered task and class ``l``: ``log P(own label | truth l)``."""
        right, wrong = OneCoinDawidSkene._log_confusion(  # noqa: SLF001
            np.array([self.accuracy]), self.spec.n_labels
        )
        rows = np.full((self.y.size, self.spec.n_labels), wrong[0])
        rows[np.arange(self.y.size), self.y] = right[0]
        return self._dense(rows)


class LocalReal(LocalModel):
    def __init__(
        self, spec: ModelSpec, tasks: np.ndarray, values: np.ndarray, *, allow_empty: bool = False
    ) -> None:
        super().__init__(spec, tasks, values, allow_empty=allow_empty)
        x = self.values.astype(np.float64)
        if x.size and (not np.isfinite(x).all() or x.min() < spec.low or x.max() > spec.high):
            raise ValidationError(
                "Real answers must be finite and inside the public range "
                f"[{spec.low}, {spec.high}]."
            )
        self.x = (x - spec.low) / (spec.high - spec.low)
        self.precision = spec.gamma  # in units of the range

    def start(self) -> np.ndarray:
        return self._dense(np.column_stack([self.x, np.ones_like(self.x)]))

    def update(self, state: np.ndarray) -> None:
        if self.x.size == 0:  # no answer on a kept task: it contributes zeros
            return
        residual = float(np.mean((self.x - state[self.tasks]) ** 2))
        self.precision = min(1.0 / max(residual, 1e-300), self.spec.gamma)

    def contribution(self) -> np.ndarray:
        # Dividing by the public gamma keeps every contribution in [0, 1] (the weighted mean is
        # unchanged), so the fixed-point range never depends on the data's scale.
        w = self.precision / self.spec.gamma
        return self._dense(np.column_stack([w * self.x, np.full_like(self.x, w)]))


LOCAL_MODELS: dict[str, type[LocalModel]] = {
    "binary": LocalBinary,
    "multiclass": LocalMulticlass,
    "one-coin": LocalOneCoin,
    "real": LocalReal,
}


def local_start(part: LocalModel, previous: Any, arg: Any) -> tuple[None, np.ndarray]:
    """A worker's step in the start round: its contribution to the start sums (votes, or
    answers and counts). The protocol names it ``start`` on the wire."""
    return None, part.start()


def local_step(part: LocalModel, previous: Any, state: np.ndarray) -> tuple[None, np.ndarray]:
    """A worker's step in an EM round: its own M-step from the posteriors (the truths, for the
    real model), then its contribution to the round's sums. Named ``em`` on the wire."""
    part.update(state)
    return None, part.contribution()


# ------------------------------------------------------------------ the requester's half
class AggregateModel(Model, ABC):
    """What the requester computes from the sums: the state it broadcasts and when to stop.

    A :class:`~privtd.inference._em.Model` whose parts are the workers and whose statistics
    are the secure sums: ``init`` makes the first posteriors from the start sums, ``m_step``
    the next from an EM round's sums. The parameters are the posteriors (the truths, for the
    real model), which every worker's own M-step reads. :meth:`check` is the range test every
    round's sums must pass, run by the requester on the sums it receives and, with masking,
    by every worker on the sums it verified.

    ``tol`` is the plain estimator's: the largest change of a posterior (binary), the change of
    the log-likelihood per answer (multiclass, one-coin), the largest change of a truth in
    answer units (real).
    """

    start = staticmethod(local_start)
    step = staticmethod(local_step)
    #: Whether :meth:`objective` is a log-likelihood worth recording (``objective_``).
    records_objective = True

    def __init__(self, spec: ModelSpec, tol: float) -> None:
        super().__init__(tol)
        self.spec = spec
        self.state = np.zeros(0)
        self.n_answers = 0
        #: The largest change of the state in the last M-step (binary, real: their stopping rule).
        self._change = np.inf

    def check(self, phase: str, sums: np.ndarray, n_parties: int) -> None:
        """Refuse a round whose sums no ``n_parties`` honest contributions can give."""
        if phase == "start":
            self._check(sums, 0.0, float(n_parties), "start")
            if not np.allclose(self._counts(sums), np.rint(self._counts(sums))):
                raise ProtocolError(
                    "The answer counts summed to non-integers; a start contribution was altered."
                )
        else:
            self._check(sums, *self._em_range(n_parties), "E-step")

    def init(self, stats: np.ndarray) -> np.ndarray:
        """The first state, from the start sums (votes, or answers and counts), checked."""
        self.n_answers = int(np.rint(self._counts(stats)).sum())
        self.state = self._start(stats)
        return self.state

    def _counts(self, sums: np.ndarray) -> np.ndarray:
        """Each task's answer count, from the start sums."""
        return sums.sum(axis=1) if self.spec.per_class else sums[:, -1]

    def _em_range(self, n_parties: int) -> tuple[float, float]:
        # Each worker adds log-probabilities, each >= -max_abs and all <= 0.
        return -n_parties * self.spec.max_abs - 1e-6, 1e-9

    @abstractmethod
    def _start(self, sums: np.ndarray) -> np.ndarray:
        """The first state from the start sums, checked and counted by ``init``."""

    @staticmethod
    def _check(sums: np.ndarray, low: float, high: float, what: str) -> None:
        bad = ~np.isfinite(sums) | (sums < low) | (sums > high)
        if bad.any():
            first = sums.ravel()[np.flatnonzero(bad.ravel())[0]]
            raise ProtocolError(
                f"{int(bad.sum())} secure sum(s) of the {what} round fall outside [{low}, {high}] "
                f"(first: {first}): some worker's contribution was out of range or altered. "
                "The round is void."
            )


class AggregateBinary(AggregateModel):
    def _start(self, sums: np.ndarray) -> np.ndarray:
        counts = sums[:, 1]
        return np.divide(sums[:, 0], counts, out=np.full(len(counts), 0.5), where=counts > 0)

    def _prior(self) -> float:
        eta = self.spec.eta
        return min(max(float(self.state.mean()), eta), 1.0 - eta)

    def objective(self, stats: np.ndarray) -> float:
        prior, log_a, log_b = self._prior(), stats[:, 0], stats[:, 1]
        return float(np.logaddexp(np.log(prior) + log_a, np.log1p(-prior) + log_b).sum())

    def m_step(self, stats: np.ndarray) -> np.ndarray:
        prior = self._prior()
        new = expit(np.log(prior) - np.log1p(-prior) + stats[:, 0] - stats[:, 1])
        self._change = float(np.max(np.abs(new - self.state)))
        self.state = new
        return new

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return self._change < self.tol


class AggregateMulticlass(AggregateModel):
    """Also one-coin's half: its sums are per-class log-likelihoods as Dawid-Skene's."""

    def _start(self, sums: np.ndarray) -> np.ndarray:
        total = sums.sum(axis=1, keepdims=True)
        k = sums.shape[1]
        return np.divide(sums, total, out=np.full_like(sums, 1.0 / k), where=total > 0)

    def _log_rho(self, sums: np.ndarray) -> np.ndarray:
        prior = self.state.mean(axis=0)
        return sums + np.log(np.maximum(prior, DS_FLOOR))

    def objective(self, stats: np.ndarray) -> float:
        return float(logsumexp(self._log_rho(stats), axis=1).sum()) / max(self.n_answers, 1)

    def m_step(self, stats: np.ndarray) -> np.ndarray:
        self.state = softmax(self._log_rho(stats), axis=1)
        return self.state


class AggregateReal(AggregateModel):
    records_objective = False

    def _start(self, sums: np.ndarray) -> np.ndarray:
        counts = sums[:, 1]
        return np.divide(sums[:, 0], counts, out=np.full(len(counts), 0.5), where=counts > 0)

    def _em_range(self, n_parties: int) -> tuple[float, float]:
        # Contributions are w * x and w with w in (0, 1] and x in [0, 1].
        return -1e-9, n_parties + 1e-9

    def objective(self, stats: np.ndarray) -> float:
        return float("nan")  # the plain estimator stops on the truths' change, not a likelihood

    def m_step(self, stats: np.ndarray) -> np.ndarray:
        num, den = stats[:, 0], stats[:, 1]
        new = np.divide(num, den, out=self.state.copy(), where=den > 0)
        self._change = float(np.max(np.abs(new - self.state))) * (self.spec.high - self.spec.low)
        self.state = new
        return new

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return self._change < self.tol

    def truths(self) -> np.ndarray:
        """Truths in answer units."""
        return self.spec.low + (self.spec.high - self.spec.low) * self.state


AGGREGATE_MODELS: dict[str, type[AggregateModel]] = {
    "binary": AggregateBinary,
    "multiclass": AggregateMulticlass,
    "one-coin": AggregateMulticlass,
    "real": AggregateReal,
}

#: The plain estimator's stopping tolerance, per model.
DEFAULT_TOL = {"binary": 1e-4, "multiclass": 1e-5, "one-coin": 1e-5, "real": 1e-6}
