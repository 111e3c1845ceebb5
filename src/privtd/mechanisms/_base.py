"""What every local mechanism shares: its guarantee, and the two ways to run it."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from ..errors import BudgetExceededError, ValidationError
from ._random import Draws, id_hashes

Unit = Literal["answer", "cell", "attribute", "report", "worker"]


@dataclass(frozen=True)
class Guarantee:
    """An (epsilon, delta) local-DP guarantee and what it protects.

    ``unit`` says which neighbouring inputs it covers: one answer (P0), one cell including
    NULL <-> value (P3), one attribute (P4), one report (P1), or all of one worker's answers.
    """

    epsilon: float
    delta: float = 0.0
    unit: Unit = "answer"
    note: str = ""

    def compose(self, k: int) -> Guarantee:
        """Sequential composition over ``k`` independently perturbed answers: ``(k eps, k delta)``
        for the worker. Where answers share a private draw (two-layer, two-layer-null,
        exp-gaussian) this is not the worker's figure: use ``Mechanism.release_epsilon(k)``."""
        if k < 0:
            raise ValidationError(f"Cannot compose a guarantee over {k} answers.")
        return Guarantee(
            self.epsilon * k if k else 0.0,
            min(1.0, self.delta * k),
            "worker",
            f"sequential composition of {k} x ({self.epsilon:g}, {self.delta:g}) per {self.unit}",
        )

    def __str__(self) -> str:
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:.6g}"
        delta = f", delta={self.delta:.3g}" if self.delta else ""
        return f"epsilon={eps}{delta} per {self.unit}"


#: Below this epsilon a mechanism's outputs are independent of the answer up to the rounding
#: of its figures (``flip_epsilon`` of the flip ``(s - 1) / s`` is 0 only to about 1e-16).
UNINFORMATIVE_EPSILON = 1e-12


def check_informative(mechanism: Mechanism) -> None:
    """A constructor's refusal of a mechanism whose releases carry no information about the
    answers, unless its ``allow_uninformative`` says that is what is wanted."""
    if mechanism.uninformative and not getattr(mechanism, "allow_uninformative", False):
        shown = ", ".join(
            f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in mechanism.params().items()
        )
        raise ValidationError(
            f"{type(mechanism).__name__}({shown}) releases answers independent of the truth "
            "(epsilon 0: every output is as likely whatever the answer), so nothing can be "
            "inferred from them. Raise epsilon, or pass allow_uninformative=True to release "
            "them anyway.",
            param="allow_uninformative",
        )


def _check_release_size(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValidationError(f"A release counts its answers: an int >= 0. Got {k!r}.")


#: The relative slack every spending check allows: float rounding of a sum of release figures
#: must not refuse a release that lands exactly on the limit.
SPEND_SLACK = 1e-12


class Accountant:
    """A privacy accountant: a limit on the total epsilon (and delta) that releases may spend,
    what they have spent, and what is left. The worker's budget (:class:`Budget`), the worker's
    lifetime ceiling (:class:`privtd.client.Ceiling`) and the service's per-worker budget all
    keep their accounts with it.

    A release's cost is what the worker's whole release under one private draw costs,
    :meth:`Mechanism.release_epsilon` of its size (:meth:`cost`): ``n epsilon`` where the
    answers are perturbed independently, the exact figure where they share a draw (two-layer,
    two-layer-null, exp-gaussian), never ``n`` times one answer's figure there. Releases under
    separate draws add up (basic composition). A spend is allowed while the totals stay within
    the limits (up to a relative :data:`SPEND_SLACK` for rounding); a total that is not a number
    is never allowed.

    Parameters
    ----------
    epsilon, delta : float
        The limits: a finite epsilon >= 0 and a delta in [0, 1].
    spent_epsilon, spent_delta : float
        What was spent before (a worker's state file, the server's record).
    """

    def __init__(
        self,
        epsilon: float,
        delta: float = 0.0,
        *,
        spent_epsilon: float = 0.0,
        spent_delta: float = 0.0,
    ) -> None:
        if not (epsilon >= 0 and math.isfinite(epsilon)) or not 0 <= delta <= 1:
            raise ValidationError(
                f"A budget needs a finite epsilon >= 0 and delta in [0, 1]. Got {epsilon}, {delta}."
            )
        if not (spent_epsilon >= 0 and spent_delta >= 0):
            raise ValidationError(
                f"What was spent must be >= 0. Got epsilon {spent_epsilon}, delta {spent_delta}."
            )
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.spent_epsilon = float(spent_epsilon)
        self.spent_delta = float(spent_delta)

    @property
    def remaining(self) -> float:
        """The epsilon left: the limit less what was spent."""
        return self.epsilon - self.spent_epsilon

    @staticmethod
    def cost(mechanism: Mechanism, n: int) -> tuple[float, float]:
        """``(epsilon, delta)`` of one release of ``n`` units under one draw of ``mechanism``:
        its :meth:`~Mechanism.release_epsilon` and ``n delta`` (capped at 1)."""
        return float(mechanism.release_epsilon(n)), min(1.0, mechanism.delta * n)

    @staticmethod
    def draws_cost(mechanism: Mechanism, n: int, per_draw: int | None = None) -> float:
        """The epsilon of releasing ``n`` units in releases of ``per_draw`` units each (the
        last one smaller), each under a fresh draw: the sum of each release's :meth:`cost`
        (basic composition). ``per_draw`` None: all ``n`` under one draw."""
        if per_draw is None:
            return Accountant.cost(mechanism, n)[0]
        full, rest = divmod(n, per_draw)
        whole = Accountant.cost(mechanism, per_draw)[0] * full if full else 0.0
        return whole + (Accountant.cost(mechanism, rest)[0] if rest else 0.0)

    def after(self, epsilon: float, delta: float = 0.0) -> tuple[float, float]:
        """The totals spending ``(epsilon, delta)`` more would bring."""
        return self.spent_epsilon + epsilon, self.spent_delta + delta

    def allows(self, epsilon: float, delta: float = 0.0) -> bool:
        """Whether spending ``(epsilon, delta)`` more stays within the limits: never for a
        negative spend, which would hand back what earlier releases spent."""
        if not (epsilon >= 0 and delta >= 0):
            return False
        eps, dlt = self.after(epsilon, delta)
        return eps <= self.epsilon * (1 + SPEND_SLACK) and dlt <= self.delta * (1 + SPEND_SLACK)

    def check(self, epsilon: float, delta: float = 0.0) -> None:
        """BudgetExceededError if spending ``(epsilon, delta)`` more would pass the limits; a
        ValidationError for a negative spend (nothing is ever refunded)."""
        if epsilon < 0 or delta < 0:
            raise ValidationError(
                f"A spend is >= 0: nothing a release spent is refunded. Got epsilon {epsilon}, "
                f"delta {delta}."
            )
        if not self.allows(epsilon, delta):
            eps, dlt = self.after(epsilon, delta)
            raise BudgetExceededError(
                f"Spending epsilon {epsilon:.6g} (delta {delta:.3g}) would take the total to "
                f"{eps:.6g} (delta {dlt:.3g}), past the limit of {self.epsilon:g} (delta "
                f"{self.delta:g}); {self.remaining:.6g} is left."
            )

    def spend(self, epsilon: float, delta: float = 0.0) -> None:
        """Record a spend of ``(epsilon, delta)``, after :meth:`check` (nothing recorded if it
        refuses)."""
        self.check(epsilon, delta)
        self.spent_epsilon, self.spent_delta = self.after(epsilon, delta)

    def charge(self, mechanism: Mechanism, n: int) -> float:
        """Charge one release of ``n`` units under one draw of ``mechanism`` (:meth:`cost`);
        returns its epsilon. BudgetExceededError, and nothing charged, if it would pass the
        limits."""
        cost, delta = self.cost(mechanism, n)
        if not self.allows(cost, delta):
            eps, dlt = self.after(cost, delta)
            raise BudgetExceededError(
                f"Releasing {n} {mechanism.unit}(s) under one draw of {mechanism.name} costs "
                f"epsilon {cost:.6g} for all {n} together, which would spend {eps:.6g} (delta "
                f"{dlt:.3g}) of a budget of {self.epsilon:g} (delta {self.delta:g}); "
                f"{self.remaining:.6g} is left. Nothing was perturbed or sent."
            )
        self.spent_epsilon, self.spent_delta = self.after(cost, delta)
        return cost


class Budget(Accountant):
    """A worker's privacy budget: refuses, before anything is perturbed, a release that would
    take the worker's total epsilon (and delta) past it (``perturb_worker(..., budget=)``).

    Each release is charged what the worker's whole release under one private draw costs,
    :meth:`Mechanism.release_epsilon` of its size (one ``perturb_worker`` call with
    ``rng=None`` draws afresh), and releases under separate draws add up. For a mechanism whose
    answers are independent that is ``n epsilon``; for two-layer it is the exact figure of the
    ``n`` answers sharing one flip probability, not ``n`` times one answer's. An
    :class:`Accountant` (the same checks and figures) under its older name.
    """


class Mechanism(ABC):
    """A local mechanism: immutable, built from its natural parameter.

    Subclasses define ``epsilon`` (and ``delta``), ``from_epsilon``, and the two ways to run:
    ``perturb_worker`` (record-local, what a client device runs) and ``perturb`` (batch, for
    simulation); with an integer seed both give identical output.
    """

    name: ClassVar[str]
    unit: ClassVar[Unit] = "answer"
    #: The answers it perturbs.
    kind: ClassVar[Literal["categorical", "numeric"]] = "categorical"

    @property
    @abstractmethod
    def epsilon(self) -> float:
        """The per-``unit`` epsilon this mechanism guarantees."""

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def guarantee(self) -> Guarantee:
        return Guarantee(self.epsilon, self.delta, self.unit, self._guarantee_note())

    def _guarantee_note(self) -> str:
        return ""

    def answer_epsilon(self, k: int) -> float:
        """The epsilon of one ``unit`` given the worker's other ``k - 1`` releases of the same
        draw: what each answer keeps when a worker releases ``k`` together.

        Equal to ``epsilon`` for a mechanism whose answers are perturbed independently; larger
        where the answers share a private draw that the other releases reveal (two-layer)."""
        _check_release_size(k)
        return self.epsilon if k else 0.0

    def release_epsilon(self, k: int) -> float:
        """The epsilon of a worker's whole release of ``k`` units under one draw (any of them may
        differ): ``k epsilon`` by sequential composition, unless the mechanism knows better."""
        _check_release_size(k)
        return self.epsilon * k if k else 0.0

    @classmethod
    @abstractmethod
    def from_epsilon(cls, epsilon: float, **params: Any) -> Mechanism:
        """The mechanism whose guarantee is exactly ``epsilon`` per unit."""

    @property
    def uninformative(self) -> bool:
        """Whether what it releases is independent of the answer, so that nothing about the
        truth can be inferred from it: epsilon 0 (up to rounding) for a mechanism whose
        answers are perturbed independently. A mechanism whose answers share a private draw
        that the other answers reveal says for itself (:class:`TwoLayerRR`)."""
        return self.epsilon <= UNINFORMATIVE_EPSILON

    def params(self) -> dict[str, Any]:
        out = dict(vars(self))
        if not out.get("allow_uninformative", True):
            del out["allow_uninformative"]  # the default: not a parameter of the release
        return out

    def cells_per_worker(self, answers: Answers) -> np.ndarray:
        """How many perturbed units each worker releases (its answers, by default)."""
        return answers.worker_counts()

    # ------------------------------------------------------------------ its channel
    #: Whether it is randomized response over the labels: each answer kept with probability
    #: ``1 - f`` and otherwise replaced by one of the other labels uniformly, with ``f`` drawn
    #: from the law :meth:`flip_law` gives (one-layer, binary, two-layer).
    flips_labels: ClassVar[bool] = False
    #: Whether it releases the worker's whole row, one cell per task of the public task list
    #: (NULL included), in one release, rather than the answers the worker gave.
    releases_cells: ClassVar[bool] = False

    def _no_channel(self, what: str) -> ValidationError:
        return ValidationError(
            f"{type(self).__name__} ({self.name}) has no {what}: the perturbation-aware models "
            "read one from randomized response (one-layer, binary, two-layer), krr-null, "
            "two-layer-null and exp-gaussian only."
        )

    def channel(self, n_labels: int | None = None) -> np.ndarray:
        """The channel ``C[r, a]``: the probability that one unit, alone, is released as symbol
        ``r`` given the true symbol ``a`` (a worker's private draw marginalised out). Over the
        labels for randomized response (``n_labels`` checked against the mechanism's own); over
        the scores then NULL for P3's randomized response with NULL. A ValidationError for a
        mechanism whose releases are not symbols of a finite domain."""
        raise self._no_channel("channel over a finite set of symbols")

    def shared_channel(self, n_labels: int | None = None) -> np.ndarray:
        """The part of :meth:`channel` every worker's release goes through; what is left is
        worker-specific symmetric randomized response, which each worker's own parameters
        absorb. The whole channel where every worker perturbs alike."""
        return self.channel(n_labels)

    def flip_law(self, n_points: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """Randomized response's flip probabilities and their weights: one point where every
        worker flips alike, a grid of ``n_points`` where each draws its own (two-layer). A
        ValidationError where the mechanism is not randomized response (:attr:`flips_labels`)."""
        raise self._no_channel("flip probability (it is not randomized response over labels)")

    def keep_variance(self) -> float:
        """The variance, over the workers' private draws, of the probability that a unit keeps
        its symbol: 0 where every worker perturbs alike."""
        raise self._no_channel("keep probability (it is not randomized response)")

    @property
    def variance_law(self) -> tuple[str, float]:
        """The law of the noise variance each worker draws, as ``(kind, parameter)``:
        ``("exp", rate)`` for P1's exponential-variance Gaussian."""
        raise self._no_channel("noise variance law (it adds no Gaussian noise)")

    # ------------------------------------------------------------------ running
    @abstractmethod
    def perturb(self, answers: Answers, rng: RNGLike = None) -> Answers:
        """Batch: perturb every worker's answers at once (for simulation)."""

    @abstractmethod
    def perturb_worker(self, answers: Any, **kwargs: Any) -> list[Any]:
        """Record-local: one worker's own answers in, what it sends out."""


class CellMechanism(Mechanism):
    """A mechanism that perturbs each answer on its own, given per-cell uniform draws."""

    @abstractmethod
    def _perturb_codes(
        self,
        codes: np.ndarray,
        worker_index: np.ndarray,
        draws: Draws,
        worker_hash: np.ndarray,
        task_hash: np.ndarray,
    ) -> np.ndarray:
        """Perturbed codes for answers ``codes`` (``worker_index`` points into ``worker_hash``)."""

    def perturb(self, answers: Answers, rng: RNGLike = None) -> Answers:
        """Batch: perturb every worker's answers at once (for simulation)."""
        self._check_answers(answers)
        draws = Draws(rng)
        worker_hash = (
            id_hashes(answers.workers) if draws.keyed else np.zeros(answers.n_workers, np.uint64)
        )
        task_hash = (
            id_hashes(answers.tasks) if draws.keyed else np.zeros(answers.n_tasks, np.uint64)
        )
        out = self._perturb_codes(
            answers.value, answers.worker, draws, worker_hash, task_hash[answers.task]
        )
        return answers.with_values(np.asarray(out).astype(answers.value.dtype))

    def perturb_worker(  # type: ignore[override]
        self,
        answers: Sequence[Hashable] | np.ndarray,
        *,
        labels: Sequence[Hashable] | None = None,
        worker: Hashable = "",
        tasks: Sequence[Hashable] | None = None,
        rng: RNGLike = None,
        budget: Budget | None = None,
    ) -> list[Any]:
        """Record-local: one worker's own answers in, their perturbed answers out.

        Needs only public parameters (this mechanism and, for categorical answers, the answer
        domain ``labels``). With an integer ``rng`` seed, pass the worker's id and the task ids so
        the draws match the batch run. With ``rng=None`` (a real release) each call makes a
        fresh private draw (two-layer's flip probability, exp-gaussian's variance): one call is
        one release of ``len(answers)`` answers under one draw. A ``budget`` is charged first,
        ``release_epsilon(len(answers))``; if it would be exceeded nothing is perturbed. (With
        an integer seed every call of the same worker repeats the same draw: simulation only.)
        """
        codes = self._encode_local(answers, labels)
        if tasks is None:
            tasks = list(range(len(codes)))
        if len(tasks) != len(codes):
            raise ValidationError(f"Give one task id per answer: {len(tasks)} for {len(codes)}.")
        if budget is not None:
            budget.charge(self, len(codes))
        draws = Draws(rng)
        worker_hash = id_hashes([worker]) if draws.keyed else np.zeros(1, np.uint64)
        task_hash = id_hashes(tasks) if draws.keyed else np.zeros(len(codes), np.uint64)
        out = self._perturb_codes(
            codes, np.zeros(len(codes), dtype=np.int64), draws, worker_hash, task_hash
        )
        if labels is None:
            return out.tolist()
        domain = list(labels)
        return [domain[i] for i in out]

    def _encode_local(
        self, answers: Sequence[Hashable] | np.ndarray, labels: Sequence[Hashable] | None
    ) -> np.ndarray:
        """A worker's answers as label codes (categorical) or checked floats (numeric)."""
        if labels is None:
            raise ValidationError(
                f"{type(self).__name__} needs the answer domain: pass labels=[...]."
            )
        # One worker's own answers, on its device: a dict lookup beats building pandas indexes.
        position = {label: i for i, label in enumerate(labels)}
        if len(position) != len(labels):
            raise ValidationError(f"labels must be distinct. Got {list(labels)}.")
        codes = np.fromiter((position.get(a, -1) for a in answers), dtype=np.int64)
        if (codes < 0).any():
            bad = [a for a in answers if a not in position][:3]
            raise ValidationError(
                f"Answer(s) {bad} are not in the answer domain {list(labels)}. Fix them first."
            )
        self._check_domain(len(position))
        return codes

    def _check_answers(self, answers: Answers) -> None:
        if not answers.is_categorical:
            raise ValidationError(
                f"{type(self).__name__} perturbs categorical answers; these are numeric."
            )
        self._check_domain(answers.n_labels)

    def _check_domain(self, n_labels: int) -> None:
        """A mechanism built for ``s`` labels only perturbs answers over exactly ``s`` labels."""
        expected = getattr(self, "n_labels", n_labels)
        if n_labels != expected:
            raise ValidationError(
                f"{type(self).__name__} was built for {expected} labels; the answers have "
                f"{n_labels}. Build it with n_labels={n_labels}."
            )
