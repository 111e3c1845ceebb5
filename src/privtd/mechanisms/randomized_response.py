"""Randomized response for categorical answers: P0's one-layer and two-layer mechanisms and
P4's binary randomized response (docs/algorithms.md#mechanisms)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from ..errors import ValidationError
from ._base import CellMechanism, Unit, _check_release_size, check_informative
from ._random import Draws, id_hashes
from ._shared_draw import shared_flip_epsilons

# Stream numbers: which uniform each decision uses (cells: flip, replacement; worker: f_u).
_FLIP, _OTHER, _WORKER_F = 1, 2, 3


def _check_epsilon(owner: str, epsilon: float) -> float:
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not epsilon >= 0:
        raise ValidationError(
            f"The 'epsilon' parameter of {owner} must be a float in [0, inf). Got {epsilon!r}."
        )
    return float(epsilon)


def _check_labels(owner: str, n_labels: int) -> None:
    if not isinstance(n_labels, (int, np.integer)) or n_labels < 2:
        raise ValidationError(
            f"The 'n_labels' parameter of {owner} must be an int >= 2. Got {n_labels!r}."
        )


def flip_epsilon(f: float | np.ndarray, n_labels: int) -> float | np.ndarray:
    """``|ln((1 - f)(s - 1) / f)|``: the per-answer epsilon of flipping with probability ``f``
    (P0 Theorem 6.2; infinite at ``f = 0``, 0 at ``f = (s - 1) / s``)."""
    f = np.asarray(f, dtype=float)
    with np.errstate(divide="ignore"):
        eps = np.abs(np.log((1.0 - f) * (n_labels - 1)) - np.log(f))
    return float(eps) if eps.ndim == 0 else eps


def flip_for_epsilon(epsilon: float, n_labels: int) -> float:
    """The flip probability ``(s - 1) / (s - 1 + e^eps)`` with that epsilon (``f <= (s-1)/s``)."""
    return (n_labels - 1) / (n_labels - 1 + math.exp(epsilon))


def flip_channel(f: float, n_labels: int) -> np.ndarray:
    """Randomized response at flip probability ``f`` as a channel ``C[r, a]``: ``1 - f`` on the
    diagonal, ``f / (s - 1)`` elsewhere."""
    matrix = np.full((n_labels, n_labels), f / (n_labels - 1))
    np.fill_diagonal(matrix, 1.0 - f)
    return matrix


def _flip(
    codes: np.ndarray, f: np.ndarray, n_labels: int, u_flip: np.ndarray, u_other: np.ndarray
) -> np.ndarray:
    """Keep each code with probability ``1 - f``, else replace it uniformly by one of the others."""
    shift = 1 + np.minimum((u_other * (n_labels - 1)).astype(np.int64), n_labels - 2)
    return np.where(u_flip < f, (codes + shift) % n_labels, codes)


@dataclass(frozen=True)
class OneLayerRR(CellMechanism):
    """P0's one-layer mechanism: every answer is kept with probability ``1 - f`` and otherwise
    replaced by one of the other ``s - 1`` answers uniformly (P0 Algorithm 1).

    Guarantee
        ``epsilon = |ln((1 - f)(s - 1) / f)|`` per answer, pure, and tight: the ratio of the
        output probabilities of the true answer and any other is exactly ``e^epsilon``.
        A worker who gives ``k`` answers has ``k epsilon`` in total (sequential composition).
    Cost
        One uniform draw for the flip and one for the replacement per answer.
    Utility
        A worker of accuracy ``p`` looks like one of accuracy ``p (1 - f) + (1 - p) f / (s - 1)``.
    """

    f: float
    n_labels: int = 2
    #: Build it even where ``f = (s - 1) / s`` (epsilon 0): its answers are then uniform
    #: draws, independent of the truth; refused unless this is True.
    allow_uninformative: bool = False
    name: ClassVar[str] = "one-layer"
    unit: ClassVar[Unit] = "answer"
    flips_labels: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_labels("OneLayerRR", self.n_labels)
        if not isinstance(self.f, (int, float)) or not 0.0 < self.f < 1.0:
            raise ValidationError(
                f"The 'f' parameter of OneLayerRR must be a float in (0, 1). Got {self.f!r}."
            )
        check_informative(self)

    @property
    def epsilon(self) -> float:
        return float(flip_epsilon(self.f, self.n_labels))

    def channel(self, n_labels: int | None = None) -> np.ndarray:
        """``R_f``: keep with ``1 - f``, each other label with ``f / (s - 1)``."""
        self._check_domain(self.n_labels if n_labels is None else n_labels)
        return flip_channel(float(self.f), self.n_labels)

    def flip_law(self, n_points: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """Every worker flips with ``f``: one point."""
        return np.array([float(self.f)]), np.ones(1)

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, n_labels: int = 2, allow_uninformative: bool = False
    ) -> OneLayerRR:
        _check_labels("OneLayerRR", n_labels)
        eps = _check_epsilon("OneLayerRR", epsilon)
        if math.isinf(eps):
            raise ValidationError("epsilon = inf means no perturbation; pass a finite epsilon.")
        return cls(flip_for_epsilon(eps, n_labels), n_labels, allow_uninformative)

    def _perturb_codes(self, codes, worker_index, draws, worker_hash, task_hash):
        wh = worker_hash[worker_index]
        return _flip(
            codes,
            np.float64(self.f),
            self.n_labels,
            draws.uniform(_FLIP, wh, task_hash),
            draws.uniform(_OTHER, wh, task_hash),
        )


@dataclass(frozen=True)
class BinaryRR(OneLayerRR):
    """P4's binary randomized response: keep the answer with probability ``keep`` (P4 Eq. 9).

    Guarantee
        ``epsilon = |ln(keep / (1 - keep))|`` per attribute (one answer of the worker's vector),
        pure and tight; ``m epsilon`` for a worker who answers ``m`` tasks.
    """

    f: float = 0.5
    n_labels: int = 2
    allow_uninformative: bool = False
    name: ClassVar[str] = "binary-rr"
    unit: ClassVar[Unit] = "attribute"

    @property
    def keep(self) -> float:
        return 1.0 - self.f

    @classmethod
    def from_keep(cls, keep: float, allow_uninformative: bool = False) -> BinaryRR:
        if not isinstance(keep, (int, float)) or not 0.0 < keep < 1.0:
            raise ValidationError(
                f"The 'keep' parameter of BinaryRR must be in (0, 1). Got {keep!r}."
            )
        return cls(1.0 - keep, 2, allow_uninformative)

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, n_labels: int = 2, allow_uninformative: bool = False
    ) -> BinaryRR:
        if n_labels != 2:
            raise ValidationError(f"BinaryRR is for 2 labels. Got n_labels={n_labels}.")
        eps = _check_epsilon("BinaryRR", epsilon)
        if math.isinf(eps):
            raise ValidationError("epsilon = inf means no perturbation; pass a finite epsilon.")
        return cls.from_keep(math.exp(eps) / (math.exp(eps) + 1.0), allow_uninformative)


@dataclass(frozen=True)
class TwoLayerRR(CellMechanism):
    """P0's two-layer mechanism: each worker privately draws ``f_u ~ U(a, b)`` once and flips
    every one of its answers with ``f_u`` (P0 Algorithm 2).

    Guarantee
        ``epsilon`` is P0's figure (Theorem 6.3), the loss of one answer *alone*, with ``f_u``
        unknown to the server: ``|ln((2 - a - b)(s - 1) / (a + b))|``, the same as one-layer with
        ``f = (a + b) / 2``. It is what a worker gets only if it releases a single answer.
    What a worker releasing ``k`` answers under one draw gets (docs/privacy.md)
        Its answers share ``f_u``, so its other reports tell the server about ``f_u``.
        :meth:`answer_epsilon` is the loss of one answer given the other ``k - 1`` reports (about
        ``ln k`` with ``a = 0``, or ``epsilon`` if larger); :meth:`release_epsilon` the loss of the
        whole release (with ``a = 0`` and two labels about ``k ln 2`` for ``epsilon <= ln 3``,
        ``k ln((1 + e^epsilon) / 2)`` above, against ``k epsilon`` by composition). Both are
        exact (``privtd.mechanisms._shared_draw``). Given ``f_u`` itself each answer has
        ``|ln((1 - f_u)(s - 1) / f_u)|`` (:meth:`conditional_epsilons`).
    Cost
        One uniform per worker, two per answer.
    """

    a: float
    b: float
    n_labels: int = 2
    #: Build it even where ``a = b = (s - 1) / s``: every worker then flips with the
    #: probability that makes its answers uniform draws; refused unless this is True.
    allow_uninformative: bool = False
    name: ClassVar[str] = "two-layer"
    unit: ClassVar[Unit] = "answer"
    flips_labels: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_labels("TwoLayerRR", self.n_labels)
        for name in ("a", "b"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValidationError(
                    f"The '{name}' parameter of TwoLayerRR must be a float in [0, 1]. "
                    f"Got {value!r}."
                )
        if self.a > self.b:
            raise ValidationError(f"TwoLayerRR needs a <= b. Got a={self.a}, b={self.b}.")
        if self.a + self.b <= 0.0:
            raise ValidationError("TwoLayerRR needs a + b > 0 (a = b = 0 never perturbs).")
        check_informative(self)

    @property
    def uninformative(self) -> bool:
        """Only where every worker's ``f_u`` is ``(s - 1) / s``: with ``a < b`` and epsilon 0
        one answer alone says nothing, but a worker's answers share ``f_u`` and together
        show which way it flips (docs/algorithms.md#the-two-layer-caveat)."""
        return self.a == self.b and super().uninformative

    @property
    def epsilon(self) -> float:
        return float(flip_epsilon((self.a + self.b) / 2.0, self.n_labels))

    def channel(self, n_labels: int | None = None) -> np.ndarray:
        """One answer alone, ``f_u`` marginalised: ``R_f`` at the mean flip ``(a + b) / 2``."""
        self._check_domain(self.n_labels if n_labels is None else n_labels)
        return flip_channel((self.a + self.b) / 2.0, self.n_labels)

    def shared_channel(self, n_labels: int | None = None) -> np.ndarray:
        """``R_a``. RR channels compose by multiplying their scales ``1 - f s / (s - 1)``, so a
        worker's ``R_{f_u} = R_g R_a`` with a worker-specific ``R_g``: the shared part is
        ``R_a`` (docs/inference.md)."""
        self._check_domain(self.n_labels if n_labels is None else n_labels)
        return flip_channel(float(self.a), self.n_labels)

    def flip_law(self, n_points: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """``n_points`` quantile midpoints of ``U(a, b)``, equally weighted (one point where
        ``a = b``)."""
        a, b = float(self.a), float(self.b)
        if b - a < 1e-12:
            return np.array([a]), np.ones(1)
        points = a + (b - a) * (np.arange(n_points) + 0.5) / n_points
        return points, np.full(n_points, 1.0 / n_points)

    def _guarantee_note(self) -> str:
        return (
            "one answer alone, marginal over the worker's private f_u (P0's figure), not a "
            "worker-level guarantee: answers share f_u (answer_epsilon(k), release_epsilon(k))"
        )

    def answer_epsilon(self, k: int) -> float:
        """One answer's loss given the worker's other ``k - 1`` reports under the same ``f_u``."""
        _check_release_size(k)
        return shared_flip_epsilons(int(k), self.n_labels, self.a, self.b)[0]

    def release_epsilon(self, k: int) -> float:
        """The loss of the whole release of ``k`` answers under one ``f_u``."""
        _check_release_size(k)
        return shared_flip_epsilons(int(k), self.n_labels, self.a, self.b)[1]

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls,
        epsilon: float,
        n_labels: int = 2,
        a: float | None = None,
        allow_uninformative: bool = False,
    ) -> TwoLayerRR:
        """``a + b = 2 f(epsilon)``; with the paper's ``a = 0``, ``b = 2 f``. ``a=None`` takes the
        paper's ``a = 0`` where it is feasible and otherwise the smallest feasible ``a`` (over
        more than two labels a small epsilon needs ``2 f > 1``, so ``b = 1`` and
        ``a = 2 f - 1``). An infeasible ``a`` (b > 1 or b < a) is an error that names the
        feasible range."""
        _check_labels("TwoLayerRR", n_labels)
        eps = _check_epsilon("TwoLayerRR", epsilon)
        if math.isinf(eps):
            raise ValidationError("epsilon = inf means no perturbation; pass a finite epsilon.")
        total = 2.0 * flip_for_epsilon(eps, n_labels)
        if a is None:
            a = max(0.0, total - 1.0)
        b = total - a
        if b > 1.0 + 1e-12 or b < a - 1e-12:
            lo, hi = max(0.0, total - 1.0), total / 2.0
            raise ValidationError(
                f"No U(a, b) with a={a} gives epsilon={eps:g} over {n_labels} labels: it needs "
                f"a + b = {total:.6g}, so b = {b:.6g}. Choose a in [{lo:.6g}, {hi:.6g}], or "
                "leave a unset for the smallest feasible one.",
                param="a",
            )
        return cls(float(a), float(min(max(b, a), 1.0)), n_labels, allow_uninformative)

    def worker_flips(self, worker_hash: np.ndarray, draws: Draws) -> np.ndarray:
        """Each worker's private ``f_u`` (drawn once per worker)."""
        u = draws.uniform(_WORKER_F, worker_hash, np.zeros(1, dtype=np.uint64))
        return self.a + (self.b - self.a) * u

    def _perturb_codes(self, codes, worker_index, draws, worker_hash, task_hash):
        f_u = self.worker_flips(worker_hash, draws)
        wh = worker_hash[worker_index]
        return _flip(
            codes,
            f_u[worker_index],
            self.n_labels,
            draws.uniform(_FLIP, wh, task_hash),
            draws.uniform(_OTHER, wh, task_hash),
        )

    def flips_for(self, answers: Answers, rng: RNGLike) -> np.ndarray:
        """The ``f_u`` that :meth:`perturb` with the same integer seed draws, per worker code.

        Only a simulation knows these; a real server never sees them.
        """
        draws = Draws(rng)
        if not draws.keyed:
            raise ValidationError("flips_for needs the integer seed the perturbation used.")
        return self.worker_flips(id_hashes(answers.workers), draws)

    def conditional_epsilons(self, flips: np.ndarray) -> np.ndarray:
        """Per worker, the per-answer epsilon given its ``f_u``
        (docs/algorithms.md#the-two-layer-caveat)."""
        return np.asarray(flip_epsilon(flips, self.n_labels))
