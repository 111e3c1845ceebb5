"""P3's mechanisms for sparse answers, which protect whether a worker answered a task too:
every cell of the worker's row over all tasks is perturbed, NULL included (Sun et al., BigData
2018; docs/algorithms.md#laplace, docs/algorithms.md#randomized-response-with-null). Answers
are integer scores on a domain ``Gamma = {low, ..., high}``.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from .._rng import RNGLike
from ..answers import Answers
from ..errors import ValidationError
from ._base import Budget, Mechanism, Unit, _check_release_size, check_informative
from ._discrete import dlaplace_log_pmf, opendp_laplace, sample_dlaplace
from ._random import Draws, id_hashes
from ._shared_draw import shared_budget_epsilons

_PICK, _NOISE, _FILL, _NOISE_B = 21, 22, 23, 24


def _check_domain_bounds(owner: str, low: int, high: int) -> None:
    for name, value in (("low", low), ("high", high)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ValidationError(
                f"The '{name}' parameter of {owner} must be an int. Got {value!r}."
            )
    if not low < high:
        raise ValidationError(f"{owner} needs low < high. Got low={low}, high={high}.")


class ScoreDomain(Mechanism):
    """Mechanisms over integer scores ``Gamma = {low, ..., high}`` that release a worker's whole
    row over the public task list, so a worker's total composes over every task, answered or
    not; the guarantee is per cell (one cell's change, NULL <-> value included)."""

    unit: ClassVar[Unit] = "cell"
    kind: ClassVar[Literal["categorical", "numeric"]] = "numeric"
    low: int
    high: int

    @property
    def domain_size(self) -> int:
        """``|Gamma|``: the number of possible answers."""
        return int(self.high - self.low + 1)

    def cells_per_worker(self, answers: Answers) -> np.ndarray:
        return np.full(answers.n_workers, answers.n_tasks)

    def _check_values(self, values: np.ndarray) -> None:
        present = values[~np.isnan(values)]
        bad = (present < self.low) | (present > self.high) | (present != np.round(present))
        if bad.any():
            raise ValidationError(
                f"{int(bad.sum())} answer(s) are not integers in [{self.low}, {self.high}] "
                f"(first: {present[bad][0]}). {type(self).__name__} perturbs scores on that domain."
            )


class NullAwareMechanism(ScoreDomain):
    """Perturbs every cell of a worker's row independently; unanswered cells enter as NULL."""

    releases_cells: ClassVar[bool] = True

    def _symbol_channel(self, keep: float, other: float, n_labels: int | None) -> np.ndarray:
        """Randomized response over the scores then NULL: ``keep`` on the diagonal, ``other``
        elsewhere; ``n_labels``, if given, must count those ``|Gamma| + 1`` symbols."""
        k = self.domain_size + 1
        if n_labels is not None and n_labels != k:
            raise ValidationError(
                f"{type(self).__name__} releases {k} symbols (the {self.domain_size} scores of "
                f"[{self.low}, {self.high}] and NULL); got n_labels={n_labels}."
            )
        channel = np.full((k, k), other)
        np.fill_diagonal(channel, keep)
        return channel

    @abstractmethod
    def _perturb_cells(
        self,
        values: np.ndarray,
        worker_index: np.ndarray,
        draws: Draws,
        worker_hash: np.ndarray,
        task_hash: np.ndarray,
    ) -> np.ndarray:
        """Perturb cells whose ``values`` are scores or NaN (NULL); NaN outputs mean NULL."""

    def perturb(self, answers: Answers, rng: RNGLike = None) -> Answers:
        """Batch: every worker's full row (all tasks of ``answers``) perturbed at once."""
        values = np.asarray(answers.answer_values(), dtype=float)
        self._check_values(values)
        n_w, n_t = answers.n_workers, answers.n_tasks
        grid = np.full(n_w * n_t, np.nan)
        grid[answers.worker.astype(np.int64) * n_t + answers.task] = values
        worker = np.repeat(np.arange(n_w, dtype=np.int32), n_t)
        task = np.tile(np.arange(n_t, dtype=np.int32), n_w)
        draws = Draws(rng)
        worker_hash = id_hashes(answers.workers) if draws.keyed else np.zeros(n_w, np.uint64)
        task_hash = id_hashes(answers.tasks) if draws.keyed else np.zeros(n_t, np.uint64)
        out = self._perturb_cells(grid, worker, draws, worker_hash, task_hash[task])
        keep = ~np.isnan(out)
        return Answers(
            task=task[keep],
            worker=worker[keep],
            value=out[keep],
            tasks=answers.tasks,
            workers=answers.workers,
            value_range=None,
            notes=answers.notes + (f"{self.name}: every worker's row over all {n_t} tasks",),
        )

    def perturb_worker(  # type: ignore[override]
        self,
        answers: Mapping[Hashable, Any],
        *,
        tasks: Sequence[Hashable],
        worker: Hashable = "",
        rng: RNGLike = None,
        budget: Budget | None = None,
        labels: Sequence[Hashable] | None = None,
    ) -> list[Any]:
        """Record-local: the worker's answers ``{task: score}`` in; its perturbed row over the
        public task list ``tasks`` out (``None`` where the output is NULL)."""
        # One dict of the task list, built once: linear in the tasks and the answers.
        position = {t: i for i, t in enumerate(tasks)}
        if len(position) != len(tasks):
            raise ValidationError(
                f"The task list names {len(tasks) - len(position)} task(s) twice; each task "
                "must appear once (the row has one cell per task)."
            )
        unknown = [t for t in answers if t not in position]
        if unknown:
            raise ValidationError(f"Answers name task(s) {unknown[:3]} not in the task list.")
        values = np.full(len(tasks), np.nan)
        if answers:
            cells = np.fromiter((position[t] for t in answers), dtype=np.int64, count=len(answers))
            try:
                values[cells] = np.fromiter(
                    (float(v) for v in answers.values()), dtype=float, count=len(answers)
                )
            except (TypeError, ValueError):
                raise ValidationError(
                    f"{type(self).__name__} perturbs integer scores; got non-numeric answers."
                ) from None
        self._check_values(values)
        if budget is not None:
            budget.charge(self, len(tasks))
        draws = Draws(rng)
        worker_hash = id_hashes([worker]) if draws.keyed else np.zeros(1, np.uint64)
        task_hash = id_hashes(tasks) if draws.keyed else np.zeros(len(tasks), np.uint64)
        out = self._perturb_cells(
            values, np.zeros(len(tasks), dtype=np.int64), draws, worker_hash, task_hash
        )
        return [None if v != v else v for v in out.tolist()]  # NaN (NULL) -> None


@dataclass(frozen=True)
class KRRNull(NullAwareMechanism):
    """P3's randomized response with NULL: over the ``|Gamma| + 1`` symbols (the scores and
    NULL), a cell keeps its symbol with probability ``e^eps / (|Gamma| + e^eps)`` and becomes each
    other symbol with ``1 / (|Gamma| + e^eps)`` (P3 Eq. 8).

    Guarantee
        ``epsilon = ln(keep |Gamma| / (1 - keep))`` per cell, pure and tight; NULL <-> value is
        a cell change, so whether the worker answered is protected too.
    Cost
        Two uniforms per cell of the full worker x task grid.
    Utility
        NULL outputs are treated as missing by truth inference; values come back on ``Gamma``.
    """

    keep: float
    low: int
    high: int
    #: Build it even where ``keep = 1 / (|Gamma| + 1)`` (epsilon 0): every cell is then a
    #: uniform draw over the symbols, independent of the answer; refused unless this is True.
    allow_uninformative: bool = False
    name: ClassVar[str] = "krr-null"

    def __post_init__(self) -> None:
        _check_domain_bounds("KRRNull", self.low, self.high)
        if not isinstance(self.keep, (int, float)) or not 0 < self.keep < 1:
            raise ValidationError(
                f"The 'keep' parameter of KRRNull must be in (0, 1). Got {self.keep!r}."
            )
        check_informative(self)

    @property
    def epsilon(self) -> float:
        return abs(math.log(self.keep * self.domain_size / (1 - self.keep)))

    def channel(self, n_labels: int | None = None) -> np.ndarray:
        """Keep with ``keep``, each other symbol with ``(1 - keep) / |Gamma|``."""
        keep = float(self.keep)
        return self._symbol_channel(keep, (1.0 - keep) / self.domain_size, n_labels)

    def keep_variance(self) -> float:
        """0: every worker keeps with the same probability."""
        return 0.0

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, low: int, high: int, allow_uninformative: bool = False
    ) -> KRRNull:
        if not isinstance(epsilon, (int, float)) or not 0 <= epsilon < math.inf:
            raise ValidationError(
                f"The 'epsilon' parameter of KRRNull must be a float in [0, inf). Got {epsilon!r}."
            )
        _check_domain_bounds("KRRNull", low, high)
        e = math.exp(epsilon)
        return cls(e / (high - low + 1 + e), low, high, allow_uninformative)

    def _perturb_cells(self, values, worker_index, draws, worker_hash, task_hash):
        k = self.domain_size + 1  # symbols: scores 0..|Gamma|-1, NULL = |Gamma|
        code = np.where(np.isnan(values), k - 1, np.nan_to_num(values) - self.low).astype(np.int64)
        wh = worker_hash[worker_index]
        change = draws.uniform(_PICK, wh, task_hash) >= self.keep
        shift = 1 + np.minimum(
            (draws.uniform(_NOISE, wh, task_hash) * (k - 1)).astype(np.int64), k - 2
        )
        out = np.where(change, (code + shift) % k, code)
        return np.where(out == k - 1, np.nan, out + self.low).astype(float)


@dataclass(frozen=True)
class LaplaceNull(NullAwareMechanism):
    """P3's Laplace perturbation on the integer grid: NULL cells are first filled with a score
    of ``Gamma`` (the integer ``fill``, or a uniform draw), then every cell gets discrete Laplace
    noise ``DL(scale)``, ``P(J = j)`` proportional to ``exp(-|j| / scale)``; the output is a
    complete row of integers (written as floats) (Sun et al., BigData 2018, with the noise made
    exact on the grid as Mironov, CCS 2012, requires; Canonne, Kamath, Steinke, NeurIPS 2020).

    Guarantee
        ``epsilon = (high - low) / scale`` per cell, pure, exact and tight on the grid: a cell's
        base moves by at most ``high - low`` steps (NULL included, since a fill is a score),
        and ``P(y - k) / P(y - k') = exp((|y - k'| - |y - k|) / scale)`` reaches
        ``exp((high - low) / scale)`` for every ``y`` beyond both. P3 states ``|Gamma| / scale``
        (``|Gamma| = high - low + 1``), a valid but loose bound; privtd states the tight value,
        and :meth:`from_epsilon` calibrates to it. Every integer has positive probability under
        every answer, so no release rules an answer out.
    Sampling
        A real release (``rng=None``) draws ``DL(scale)`` with OpenDP's exact sampler (extra
        ``dp``) and the fill from the OS cryptographic generator; a seed or Generator runs the
        same law vectorised (two geometric draws per cell), for simulation.
    Utility
        Filled NULLs bias truths towards the fill's mean (P3 Theorem 2); the noise has variance
        ``2 p / (1 - p)^2``, ``p = exp(-1 / scale)``.
    """

    scale: float
    low: int
    high: int
    fill: float | None = None
    name: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        _check_domain_bounds("LaplaceNull", self.low, self.high)
        if (
            not isinstance(self.scale, (int, float))
            or isinstance(self.scale, bool)
            or not (0 < self.scale < math.inf)
        ):
            raise ValidationError(
                "The 'scale' parameter of LaplaceNull must be a float in (0, inf). "
                f"Got {self.scale!r}."
            )
        if self.fill is not None and (
            not isinstance(self.fill, (int, float, np.integer, np.floating))
            or isinstance(self.fill, bool)
            or not self.low <= self.fill <= self.high
            or not float(self.fill).is_integer()
        ):
            raise ValidationError(
                f"The 'fill' of LaplaceNull must be an integer in [{self.low}, {self.high}] "
                f"(releases lie on the integer grid) or None (uniform). Got {self.fill!r}."
            )

    @property
    def epsilon(self) -> float:
        return (self.high - self.low) / self.scale

    @property
    def noise_std(self) -> float:
        """The standard deviation of one cell's noise, ``sqrt(2 p) / (1 - p)``,
        ``p = exp(-1 / scale)`` (discrete Laplace)."""
        p = math.exp(-1.0 / self.scale)
        return math.sqrt(2.0 * p) / (1.0 - p)

    @property
    def noise_mae(self) -> float:
        """The mean absolute value of one cell's noise, ``2 p / (1 - p^2)``."""
        p = math.exp(-1.0 / self.scale)
        return 2.0 * p / (1.0 - p * p)

    def _guarantee_note(self) -> str:
        return (
            "exact on the integer grid: discrete Laplace noise, tight; P3 states |Gamma|/scale, "
            f"{self.domain_size / self.scale:.6g} here"
        )

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, low: int, high: int, fill: float | None = None
    ) -> LaplaceNull:
        """``scale = (high - low) / epsilon`` (the tight guarantee; P3's calibration is
        ``LaplaceNull(|Gamma| / epsilon, ...)``)."""
        if not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
            raise ValidationError(
                "The 'epsilon' parameter of LaplaceNull must be a float in (0, inf). "
                f"Got {epsilon!r}."
            )
        _check_domain_bounds("LaplaceNull", low, high)
        return cls((high - low) / epsilon, low, high, fill)

    # The public grid, for checks and attacks: releases are ``grid_origin + J * grid_step``.
    grid_origin: ClassVar[float] = 0.0
    grid_step: ClassVar[float] = 1.0

    def grid_code(self, values: np.ndarray) -> np.ndarray:
        """An answer's grid code: the score itself."""
        return np.asarray(values, dtype=np.int64)

    def grid_log_pmf(self, offset: np.ndarray) -> np.ndarray:
        """``log P(release - answer = offset)`` under ``DL(scale)``, exactly."""
        return dlaplace_log_pmf(offset, self.scale)

    def _perturb_cells(self, values, worker_index, draws, worker_hash, task_hash):
        wh = worker_hash[worker_index]
        if self.fill is None:
            pick = draws.uniform(_FILL, wh, task_hash)
            filler = self.low + np.minimum(
                (pick * self.domain_size).astype(np.int64), self.domain_size - 1
            )
        else:
            filler = np.full(values.shape, int(self.fill), dtype=np.int64)
        base = np.where(np.isnan(values), filler, np.nan_to_num(values)).astype(np.int64)
        if draws.real:
            return opendp_laplace(base, self.scale).astype(float)
        noise = sample_dlaplace(self.scale, draws, (_NOISE, _NOISE_B), wh, task_hash)
        return (base + noise).astype(float)


@dataclass(frozen=True)
class TwoLayerNull(NullAwareMechanism):
    """P3's adaptation of the two-layer idea to NULLs (P3 Sec. VI;
    docs/algorithms.md#two-layer-with-null): each worker privately draws its own budget
    ``eps_u ~ U(0, 2 mean_epsilon)`` once, then applies RR with NULL with it.

    Guarantee
        Per cell with ``eps_u`` marginalised out (it is private): the output law keeps a symbol
        with ``E[e^eps_u / (|Gamma| + e^eps_u)]`` and moves to each other one with
        ``E[1 / (|Gamma| + e^eps_u)]``; ``epsilon`` is the log of their ratio, computed exactly.
        It is the loss of one cell *alone* (P3's figure), not a worker-level guarantee.
    What a worker's row of ``k`` cells under one draw gets (docs/privacy.md)
        The cells share ``eps_u``, so the other cells tell the server about it.
        :meth:`answer_epsilon` is the loss of one cell given the other ``k - 1`` (it grows
        towards ``2 mean_epsilon`` as ``k`` grows); :meth:`release_epsilon` the loss of the
        whole row (towards ``2 k mean_epsilon``, against ``k epsilon`` by composition). Both are
        exact (``privtd.mechanisms._shared_draw``). Given ``eps_u`` itself a cell has ``eps_u``.
    """

    mean_epsilon: float
    low: int
    high: int
    name: ClassVar[str] = "two-layer-null"

    def __post_init__(self) -> None:
        _check_domain_bounds("TwoLayerNull", self.low, self.high)
        if not isinstance(self.mean_epsilon, (int, float)) or not 0 < self.mean_epsilon < 50:
            raise ValidationError(
                "The 'mean_epsilon' parameter of TwoLayerNull must be a float in (0, 50). "
                f"Got {self.mean_epsilon!r}."
            )

    def _marginal(self) -> tuple[float, float]:
        """``E[keep]`` and ``E[other]`` over ``eps_u ~ U(0, 2 mean_epsilon)``, in closed form:
        ``int 1 / (g + e^x) dx = (x - ln(g + e^x)) / g``."""
        g, top = float(self.domain_size), 2.0 * self.mean_epsilon
        other = ((top - math.log(g + math.exp(top))) - (0.0 - math.log(g + 1.0))) / (g * top)
        return 1.0 - g * other, other

    def keep_variance(self) -> float:
        """``Var[keep]`` over ``eps_u ~ U(0, 2 mean_epsilon)``, in closed form: with
        ``u = e^x``, ``int e^2x / (g + e^x)^2 dx = ln(g + u) + g / (g + u)``. The workers'
        budgets differ, so a task's report counts vary less than the marginal channel says."""
        g, top = float(self.domain_size), 2.0 * self.mean_epsilon

        def antiderivative(u: float) -> float:
            return math.log(g + u) + g / (g + u)

        second = (antiderivative(math.exp(top)) - antiderivative(1.0)) / top
        keep, _ = self._marginal()
        return max(second - keep * keep, 0.0)

    @property
    def epsilon(self) -> float:
        keep, other = self._marginal()
        return math.log(keep / other)

    def channel(self, n_labels: int | None = None) -> np.ndarray:
        """One cell alone, ``eps_u`` marginalised: keep with ``E[keep]``, each other symbol
        with ``E[other]``."""
        keep, other = self._marginal()
        return self._symbol_channel(keep, other, n_labels)

    def _guarantee_note(self) -> str:
        return (
            f"one cell alone, marginal over the worker's private eps_u ~ U(0, "
            f"{2 * self.mean_epsilon:g}) (P3's figure), not a worker-level guarantee: a row's "
            "cells share eps_u (answer_epsilon(k), release_epsilon(k))"
        )

    def answer_epsilon(self, k: int) -> float:
        """One cell's loss given the worker's other ``k - 1`` cells under the same ``eps_u``."""
        _check_release_size(k)
        return shared_budget_epsilons(int(k), self.domain_size, 2.0 * self.mean_epsilon)[0]

    def release_epsilon(self, k: int) -> float:
        """The loss of the worker's whole row of ``k`` cells under one ``eps_u``."""
        _check_release_size(k)
        return shared_budget_epsilons(int(k), self.domain_size, 2.0 * self.mean_epsilon)[1]

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, low: int, high: int
    ) -> TwoLayerNull:
        """P3 calibrates by the mean budget: ``mean_epsilon = epsilon``."""
        return cls(float(epsilon), low, high)

    def worker_epsilons(self, worker_hash: np.ndarray, draws: Draws) -> np.ndarray:
        u = draws.uniform(_FILL, worker_hash, np.zeros(1, dtype=np.uint64))
        return 2.0 * self.mean_epsilon * u

    def _perturb_cells(self, values, worker_index, draws, worker_hash, task_hash):
        eps_u = self.worker_epsilons(worker_hash, draws)
        keep = np.exp(eps_u) / (self.domain_size + np.exp(eps_u))
        k = self.domain_size + 1
        code = np.where(np.isnan(values), k - 1, np.nan_to_num(values) - self.low).astype(np.int64)
        wh = worker_hash[worker_index]
        change = draws.uniform(_PICK, wh, task_hash) >= keep[worker_index]
        step = (draws.uniform(_NOISE, wh, task_hash) * (k - 1)).astype(np.int64)
        out = np.where(change, (code + 1 + np.minimum(step, k - 2)) % k, code)
        return np.where(out == k - 1, np.nan, out + self.low).astype(float)
