"""P3's matrix-factorisation perturbation (Sun et al., BigData 2018, Algorithm 2;
docs/algorithms.md#matrix-factorisation).

The requester publishes task profiles ``V`` (d x n, every column with l1 norm <= 1), chosen
independently of the answers. Each worker privately draws ``eta ~ Lap(|Gamma| / eps)^d``,
solves ``min_u sum_{j in T_u} (a_uj - u.v_j)^2 + 2 u.eta`` over the tasks it answered, and sends
the complete row ``u^T V``: a prediction for every task, NULLs included.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd

from .._rng import RNGLike, check_rng
from ..answers import Answers
from ..errors import ValidationError
from ._base import Budget
from ._random import Draws, id_hashes
from .null_aware import ScoreDomain, _check_domain_bounds

_ETA = 31
Solver = Literal["lstsq", "ridge", "gd"]


def task_profiles(n_tasks: int, d: int = 10, rng: RNGLike = None) -> np.ndarray:
    """The requester's public ``V``: entries U(0, 1), each column rescaled to l1 norm 1
    (docs/algorithms.md#mf-parameters). Drawn independently of the answers, as the guarantee
    requires."""
    if n_tasks < 1 or d < 1:
        raise ValidationError(f"task_profiles needs n_tasks >= 1 and d >= 1. Got {n_tasks}, {d}.")
    v = check_rng(rng).random((d, n_tasks))
    return v / v.sum(axis=0, keepdims=True)


@dataclass(frozen=True, eq=False)
class MFPerturbation(ScoreDomain):
    """Objective perturbation of a worker's latent profile (P3 Algorithm 2).

    Guarantee (P3 Theorem 4, as the paper states it)
        ``epsilon = |Gamma| / scale`` per cell. The proof assumes a unique minimiser (at least
        ``d`` answered tasks with independent profiles) and treats NULL <-> value like any cell
        change; we state the paper's claim and do not strengthen it.
    Floating point (not closed)
        The guarantee is for real arithmetic. The noise ``eta`` is a double drawn by inverse
        CDF and the release is a floating-point least-squares solution, so the set of rows a
        worker can release depends on its answers in ways the proof does not cover (Mironov,
        CCS 2012). Unlike ``laplace`` and ``exp-gaussian``, mf is not moved to a grid: a
        neighbouring answer shifts the objective by ``a_j v_j`` with real-valued public
        profiles, which no integer lattice for ``eta`` can absorb, so discrete noise would make
        the neighbours' output sets disjoint rather than equal. A real release draws ``eta``'s
        uniforms from the OS cryptographic generator; the leak through the low-order bits of
        the release remains (docs/privacy.md). So a real release (``rng=None``) is refused
        unless ``allow_float_leak=True`` (CLI: ``privtd perturb --allow-float-leak``); seeded
        simulation is unaffected.
    Solvers
        ``"lstsq"`` (default): the minimum-norm solution of ``G u = sum a v - eta`` with
        ``G = sum v v^T``, which is the unique minimiser whenever there is one; ``"ridge"`` adds
        ``ridge * ||u||^2``; ``"gd"`` runs the paper's gradient descent from 0.
    Utility
        P3 Theorem 5: ``E[MAE] <= q m (sqrt(2/pi) + d |Gamma| / (n eps))``.
    """

    profiles: np.ndarray = field(repr=False)
    scale: float
    low: int
    high: int
    solver: Solver = "lstsq"
    ridge: float = 1e-6
    gd_steps: int = 2000
    #: A real release (no seed) is refused unless this is True: its floating-point leak is
    #: not closed (above), so releasing real data must be the caller's explicit choice.
    allow_float_leak: bool = False
    name: ClassVar[str] = "mf"

    def __post_init__(self) -> None:
        _check_domain_bounds("MFPerturbation", self.low, self.high)
        v = np.asarray(self.profiles, dtype=float)
        if v.ndim != 2 or not np.isfinite(v).all():
            raise ValidationError("profiles must be a finite d x n_tasks matrix (task_profiles).")
        if (np.abs(v).sum(axis=0) > 1 + 1e-9).any():
            raise ValidationError(
                "Every column of profiles must have l1 norm <= 1 (P3's guarantee needs it). "
                "Use task_profiles(...) or rescale the columns."
            )
        if not isinstance(self.scale, (int, float)) or not 0 < self.scale < math.inf:
            raise ValidationError(
                f"The 'scale' parameter of MFPerturbation must be in (0, inf). Got {self.scale!r}."
            )
        if self.solver not in ("lstsq", "ridge", "gd"):
            raise ValidationError(
                f"The 'solver' parameter of MFPerturbation must be 'lstsq', 'ridge' or 'gd'. "
                f"Got {self.solver!r}."
            )

    @property
    def d(self) -> int:
        return int(np.shape(self.profiles)[0])

    @property
    def epsilon(self) -> float:
        return self.domain_size / self.scale

    def params(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["profiles"] = f"{self.d} x {np.shape(self.profiles)[1]} matrix"
        return out

    def _guarantee_note(self) -> str:
        return (
            "P3 Theorem 4 as stated: assumes a unique minimiser; holds for real arithmetic "
            "only, the floating-point leak (Mironov 2012) is not closed"
        )

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, profiles: np.ndarray, low: int, high: int, **kwargs: Any
    ) -> MFPerturbation:
        if not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
            raise ValidationError(
                f"The 'epsilon' parameter of MFPerturbation must be in (0, inf). Got {epsilon!r}."
            )
        return cls(profiles, (high - low + 1) / epsilon, low, high, **kwargs)

    # ------------------------------------------------------------------ running
    def _eta(self, worker_hash: np.ndarray, draws: Draws) -> np.ndarray:
        dims = id_hashes(np.arange(self.d)) if draws.keyed else np.zeros(self.d, np.uint64)
        u = draws.uniform(_ETA, worker_hash[:, None], dims[None, :]) - 0.5
        return -self.scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))

    def _rows(
        self, worker: np.ndarray, task: np.ndarray, value: np.ndarray, eta: np.ndarray
    ) -> np.ndarray:
        """Each worker's released row ``u^T V``, solving the workers in blocks of equal shape."""
        v = np.asarray(self.profiles, dtype=float)
        rows_of_v = np.ascontiguousarray(v.T)  # task -> its profile, gathered row by row
        n_w = eta.shape[0]
        order = np.lexsort((task, worker))
        worker, task, value = worker[order], task[order], value[order]
        counts = np.bincount(worker, minlength=n_w)
        start = np.concatenate(([0], np.cumsum(counts)))
        out = np.empty((n_w, v.shape[1]))
        block = 512
        for lo in range(0, n_w, block):  # blocks of workers, vectorised within
            hi = min(n_w, lo + block)
            t_max = max(1, int(counts[lo:hi].max()))
            # Pad each worker's answered tasks to t_max with zero columns (they add nothing).
            idx = np.zeros((hi - lo, t_max), dtype=np.int64)
            val = np.zeros((hi - lo, t_max))
            live = np.arange(t_max)[None, :] < counts[lo:hi, None]
            pos = start[lo:hi, None] + np.arange(t_max)[None, :]
            idx[live] = task[pos[live]]
            val[live] = value[pos[live]]
            x = rows_of_v[idx] * live[:, :, None]  # (c, t_max, d)
            gram = x.transpose(0, 2, 1) @ x
            rhs = np.einsum("ctd,ct->cd", x, val) - eta[lo:hi]
            out[lo:hi] = self._solve(gram, rhs, counts[lo:hi]) @ v
        return out

    def _solve(self, gram: np.ndarray, rhs: np.ndarray, counts: np.ndarray) -> np.ndarray:
        if self.solver == "ridge":
            eye = np.eye(gram.shape[1]) * self.ridge
            return np.linalg.solve(gram + eye, rhs[..., None])[..., 0]
        if self.solver == "lstsq":
            # A worker with at least d answers has a full-rank Gram matrix (the profiles are
            # continuous draws), where the minimum-norm solution is the plain solve, 20 times
            # cheaper than a pseudo-inverse; the rest (and a block with a singular one) use pinv.
            d = gram.shape[1]
            out = np.empty_like(rhs)
            full = counts >= d
            if full.any():
                try:
                    out[full] = np.linalg.solve(gram[full], rhs[full][..., None])[..., 0]
                except np.linalg.LinAlgError:  # an exactly singular one: pinv for the block
                    full[:] = False
            rest = ~full
            if rest.any():
                pinv = np.linalg.pinv(gram[rest], hermitian=True)
                out[rest] = (pinv @ rhs[rest][..., None])[..., 0]
            return out
        # Gradient descent on L(u) = u^T G u - 2 u^T rhs (+ const), step 1 / (2 trace G).
        step = 0.5 / np.maximum(np.trace(gram, axis1=1, axis2=2), 1e-12)[:, None]
        u = np.zeros_like(rhs)
        for _ in range(self.gd_steps):
            grad = 2.0 * ((gram @ u[..., None])[..., 0] - rhs)
            u -= step * grad
        return u

    def _check_release(self, draws: Draws) -> None:
        if draws.real and not self.allow_float_leak:
            raise ValidationError(
                "A real mf release is refused: mf releases floating-point least-squares rows, "
                "so its guarantee holds for real arithmetic only and the floating-point leak "
                "(Mironov 2012) is not closed (docs/privacy.md). Pass a seed to simulate, use "
                "laplace or krr-null for real data, or set allow_float_leak=True to release "
                "anyway.",
                param="allow_float_leak",
            )

    def perturb(self, answers: Answers, rng: RNGLike = None) -> Answers:
        values = np.asarray(answers.answer_values(), dtype=float)
        self._check_values(values)
        if answers.n_tasks != np.shape(self.profiles)[1]:
            raise ValidationError(
                f"profiles has {np.shape(self.profiles)[1]} task columns; the answers have "
                f"{answers.n_tasks} tasks. Build profiles for exactly these tasks."
            )
        draws = Draws(rng)
        self._check_release(draws)
        worker_hash = (
            id_hashes(answers.workers) if draws.keyed else np.zeros(answers.n_workers, np.uint64)
        )
        rows = self._rows(answers.worker, answers.task, values, self._eta(worker_hash, draws))
        n_w, n_t = rows.shape
        return Answers(
            task=np.tile(np.arange(n_t, dtype=np.int32), n_w),
            worker=np.repeat(np.arange(n_w, dtype=np.int32), n_t),
            value=rows.ravel(),
            tasks=answers.tasks,
            workers=answers.workers,
            notes=answers.notes + (f"mf: every worker's row over all {n_t} tasks",),
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
        """Record-local: ``{task: score}`` in; the released row over ``tasks`` (the columns of
        the public profiles, in order) out."""
        if len(tasks) != np.shape(self.profiles)[1]:
            raise ValidationError(
                f"tasks must list the {np.shape(self.profiles)[1]} tasks of the profiles, in order."
            )
        index = pd.Index(list(tasks))
        cols = index.get_indexer(pd.Index(list(answers)))
        if (cols < 0).any():
            raise ValidationError("Answers name task(s) that are not in the task list.")
        values = np.array([float(a) for a in answers.values()])
        self._check_values(values)
        draws = Draws(rng)
        self._check_release(draws)
        if budget is not None:
            budget.charge(self, len(tasks))
        worker_hash = id_hashes([worker]) if draws.keyed else np.zeros(1, np.uint64)
        row = self._rows(
            np.zeros(len(cols), dtype=np.int64),
            cols.astype(np.int64),
            values,
            self._eta(worker_hash, draws),
        )
        return row[0].tolist()
