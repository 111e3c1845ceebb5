"""run_em's SQUAREM cycle on a toy model: two plain steps, one from the jump, kept or dropped,
every step counted, a cycle only where its three steps fit in max_iter."""

from __future__ import annotations

from typing import Any

import numpy as np

from privtd.inference._em import Model, run_em
from privtd.inference._ops import squarem_extrapolate


def _start(part: Any, previous: Any, arg: Any) -> tuple[Any, Any]:
    return "start", 0.0


def _step(part: Any, previous: Any, x: float) -> tuple[Any, Any]:
    return ("state", x), x


class _Halving(Model):
    """EM whose step maps x to x / 2 + 1 (fixed point 2), objective -|x - 2| at the step's
    parameters. Along a linear map SQUAREM lands on the fixed point in one jump."""

    start = staticmethod(_start)
    step = staticmethod(_step)

    def __init__(self, accelerated: bool, keep: bool = True) -> None:
        super().__init__(1e-9)
        self.accelerated, self.keep, self.jumps = accelerated, keep, 0

    def init(self, stats: Any) -> float:
        return float(stats)

    def update(self, stats: Any, used: float) -> tuple[float, float]:
        return -abs(used - 2.0), used / 2.0 + 1.0

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return len(objective) > 1 and abs(objective[-1] - objective[-2]) < self.tol

    def jump(self, start: float, first: float, second: float) -> float:
        self.jumps += 1
        return float(squarem_extrapolate(*(np.array([x]) for x in (start, first, second)))[0])

    def keep_jump(self, objective: list[float], path: list[Any], jumped: Any, after: Any) -> bool:
        return self.keep


class _Executor:
    def __init__(self) -> None:
        self.outs: Any = None
        self.has_gold = False

    def run(self, fn: Any, params: Any = None) -> Any:
        self.outs = fn(None, self.outs, params)
        return self.outs[1]


def test_a_kept_jump_reaches_the_fixed_point_and_every_step_counts() -> None:
    executor = _Executor()
    fit = run_em(_Halving(accelerated=True), executor, 50)
    # Plain 0 -> 1 -> 1.5, the jump to 2, a plain step there that settles.
    assert fit.objective == [-2.0, -1.0, 0.0, 0.0]
    assert fit.n_iter == 4 and fit.converged and fit.params == 2.0
    assert executor.outs == (("state", 2.0), 2.0)
    plain = run_em(_Halving(accelerated=False), _Executor(), 50)
    assert plain.converged and plain.n_iter > 20


def test_a_dropped_jump_goes_on_from_the_second_plain_step() -> None:
    executor = _Executor()
    model = _Halving(accelerated=True, keep=False)
    fit = run_em(model, executor, 4)
    # Steps: 0 -> 1, 1 -> 1.5, the jump (dropped: its objective popped, the parameters and the
    # parts' state set back to the second plain step's), then 1.5 -> 1.75.
    assert fit.n_iter == 4 and model.jumps == 1
    assert fit.objective == [-2.0, -1.0, -0.5]
    assert fit.params == 1.75 and fit.used == 1.5
    assert executor.outs == (("state", 1.5), 1.5)


def test_a_cycle_starts_only_where_its_three_steps_fit() -> None:
    for max_iter, jumps in [(2, 0), (3, 1), (5, 1), (6, 2)]:
        model = _Halving(accelerated=True, keep=False)
        fit = run_em(model, _Executor(), max_iter)
        assert (fit.n_iter, model.jumps) == (max_iter, jumps)
        assert len(fit.objective) == max_iter - jumps
