"""What a campaign's public parameters allow: building its mechanism, and checking that a
submission holds only what that mechanism can output."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..client import (
    DEFAULT_MAX_LIFETIME_EPSILON,
    MAX_REPORTS,
    largest_release,
    largest_within,
    per_answer_words,
)
from ..errors import ValidationError
from ..inference import METHODS, NO_AWARE_METHOD, RELEASE_METHODS, aware_method
from ..mechanisms import MECHANISMS, Accountant, make_mechanism
from ..mechanisms._base import CellMechanism, Mechanism
from ..mechanisms.exp_gaussian import ExpGaussian
from ..mechanisms.null_aware import KRRNull, LaplaceNull, TwoLayerNull
from ..mechanisms.randomized_response import TwoLayerRR

#: Mechanisms a device can run alone, answer by answer (MF needs the whole matrix's profiles).
SERVED = (
    "one-layer",
    "two-layer",
    "binary-rr",
    "exp-gaussian",
    "krr-null",
    "two-layer-null",
    "laplace",
)


#: The server's default ceiling on a campaign's epsilon per answer (``privtd serve
#: --max-epsilon``). Randomized response over two labels at epsilon 10 keeps the true answer
#: with probability 0.99995: past it the noise hides next to nothing (docs/service.md).
DEFAULT_MAX_EPSILON = 10.0

#: The probability, per report, that an honest release falls outside the range the server
#: accepts (:func:`report_range`).
TAIL = 1e-12

#: Campaigns whose honest reports could reach past this magnitude are refused: float64 holds
#: every integer exactly only up to 2^53 ~ 9e15, and the estimators' sums of squares stay far
#: from overflow below it (docs/service.md).
MAX_MAGNITUDE = 1e15


def _tail_multiple(tail: float) -> tuple[float, float]:
    """``(z_laplace, z_mixture)``: the noise, in units of the Laplace scale ``b``, that an
    honest release passes with probability at most ``tail``.

    Laplace (continuous: ``P(|X| >= z b) = e^-z``; discrete Laplace on a grid of step ``g``:
    ``P(|J| >= k) = 2 e^(-k g / b) / (1 + e^(-g / b)) <= 2 e^-z`` at ``k g = z b``):
    ``z = ln(2 / tail)``. The exp-gaussian mixture (continuous: exactly Laplace, ``e^-z``;
    discrete Gaussian given ``v``: sub-Gaussian, ``P(|J| g >= t) <= 2 e^(-t^2 / 2v)``, Canonne,
    Kamath and Steinke 2020, Corollary 9; mixed over ``v ~ Exp(rate)``:
    ``E[2 e^(-t^2 / 2v)] = 2 z K_1(z)`` with ``z = t / b``): the ``z`` at which the larger of
    ``2 z K_1(z)`` and ``2 e^-z`` is ``tail``."""
    from scipy import optimize, special

    def excess(z: float) -> float:
        return math.log(max(2.0 * z * float(special.kv(1, z)), 2.0 * math.exp(-z))) - math.log(tail)

    return math.log(2.0 / tail), float(optimize.brentq(excess, 1.0, 200.0))


Z_LAPLACE, Z_MIXTURE = _tail_multiple(TAIL)


def answers_per_draw(mech: Mechanism, n_tasks: int, max_answers: int | None = None) -> int:
    """The most answers a worker of a campaign of ``n_tasks`` tasks releases under one private
    draw: its whole row for P3's mechanisms, else every task it may answer (all, or the
    campaign's ``max_answers`` per worker) in one submission (at most :data:`MAX_REPORTS`). An
    honest device draws afresh for each submission."""
    if whole_row(mech):
        return n_tasks
    return min(n_tasks if max_answers is None else min(n_tasks, max_answers), MAX_REPORTS)


def worker_spend(mech: Mechanism, n_answers: int) -> float:
    """The epsilon one worker spends answering ``n_answers`` tasks (the whole row for P3's
    mechanisms), each submission as large as one may be: the sum, over its draws, of each
    draw's whole release (what the server's ``spent_epsilon`` and the worker's ledger count)."""
    return Accountant.draws_cost(mech, n_answers, None if whole_row(mech) else MAX_REPORTS)


def answers_within(mech: Mechanism, limit: float, k: int) -> int:
    """The most of ``k`` tasks one worker can answer, one submission each draw (see
    :func:`worker_spend`), spending at most ``limit``."""
    account = Accountant(limit)
    if whole_row(mech):
        return k if account.allows(worker_spend(mech, k)) else 0
    return largest_within(lambda j: account.allows(worker_spend(mech, j)), k)


def check_worker_spend(
    mech: Mechanism,
    n_tasks: int,
    budget: float,
    max_answers: int | None,
    *,
    raise_ok: bool = False,
    lifetime: float = DEFAULT_MAX_LIFETIME_EPSILON,
) -> tuple[float, int]:
    """``(spend, n)``: the most one worker can spend in the campaign, the smaller of its
    ``budget`` and what answering all ``n`` tasks it may answer costs (:func:`worker_spend`),
    or a ValidationError naming the figures and the remedies if that is past the workers'
    default ``lifetime`` ceiling (unless ``raise_ok``: the requester says its workers raise
    their ceiling). Past it, every worker's device refuses the submission that crosses it."""
    if max_answers is not None and whole_row(mech) and max_answers < n_tasks:
        raise ValidationError(
            f"{mech.name} releases a worker's whole row ({n_tasks} tasks) in one submission: "
            f"a cap of {max_answers} answers per worker cannot hold; drop max_answers_per_worker "
            "or split the campaign."
        )
    n = n_tasks if max_answers is None else min(n_tasks, max_answers)
    cost = worker_spend(mech, n)
    spend = min(float(budget), cost)
    if raise_ok or Accountant(lifetime).allows(spend):
        return spend, n
    fits = answers_within(mech, lifetime, n)
    ways = []
    if whole_row(mech):
        ways.append("use fewer tasks or a smaller epsilon")
    else:
        answer = f" (a worker then answers at most {fits} tasks)" if fits else ""
        ways.append(f"set the budget to at most {lifetime:g}{answer}")
        if fits:
            ways.append(f"cap each worker at {fits} answers (max_answers_per_worker={fits})")
    ways.append("if your workers will raise their ceiling, say so (workers_raise_ceiling=True)")
    if cost <= budget:
        what = (
            f"A worker who answers all {n} tasks of this campaign spends epsilon {cost:.4g} "
            f"{_spend_words(mech, n)}"
        )
    else:
        what = (
            f"A worker of this campaign can spend its whole budget of {budget:g} (answering "
            f"all {n} tasks costs {cost:.4g} {_spend_words(mech, n)})"
        )
    raise ValidationError(
        f"{what}, past the workers' default ceiling of {lifetime:g} over all their campaigns: "
        f"each one's device would refuse the submission that crosses it. Either "
        f"{'; or '.join(ways)}.",
        param=("max_answers_per_worker", "workers_raise_ceiling"),
    )


def _spend_words(mech: Mechanism, n: int) -> str:
    if whole_row(mech) or n <= MAX_REPORTS:
        return f"(all {n} answers in one submission)"
    return f"(in submissions of {MAX_REPORTS}, each one draw)"


def figures(mech: Mechanism, k: int) -> tuple[float, float]:
    """(epsilon per answer given the worker's other ``k - 1`` answers, epsilon of all ``k``
    together) for ``k`` answers released under one draw."""
    return float(mech.answer_epsilon(k)), float(mech.release_epsilon(k))


def _shared_remedy(mech: Mechanism, ceiling: float, k: int) -> str:
    """What a requester can do about a campaign whose shared draw takes a worker's answers
    past ``ceiling`` at ``k`` answers per draw, one sentence."""
    ways = []
    if isinstance(mech, TwoLayerRR):
        # Given a <= f_u <= b, one answer moves the odds at most (1 - a)(s - 1) / a one way and
        # b / ((1 - b)(s - 1)) the other, whatever the worker's other answers say about f_u:
        # bounds on the flip probability bound the loss at any task count.
        s = mech.n_labels
        a = (s - 1) / (s - 1 + math.exp(ceiling))
        b = (s - 1) * math.exp(ceiling) / (1 + (s - 1) * math.exp(ceiling))
        ways.append(
            f"keep two-layer's flip probability within [{a:.4g}, {b:.4g}] (params a, b: given "
            "a <= f_u <= b one answer's loss is at most max(ln((1-a)(s-1)/a), "
            f"ln(b/((1-b)(s-1)))) = {ceiling:g} at any task count)"
        )
    fits = largest_release(mech, ceiling, k)
    if fits > 0:
        ways.append(
            f"use at most {fits} tasks, or cap each worker at {fits} answers "
            "(max_answers_per_worker)"
        )
    if mech.kind == "numeric":
        ways.append("use laplace, whose noise is drawn afresh for every answer")
    else:
        ways.append("use one-layer, whose answers are independent")
    return "Either " + "; or ".join(ways) + "."


def _refusal(mech: Mechanism, k: int, per: float, limit: float, whose: str) -> ValidationError:
    stated = float(mech.epsilon)
    if k > 1 and not per <= stated * (1 + 1e-9):
        return ValidationError(
            f"A worker who answers {k} tasks of this campaign in one submission keeps "
            f"epsilon {per:.4g} {per_answer_words(mech.unit, k)} (the mechanism's {stated:.4g} "
            f"holds for one {mech.unit} alone: the worker's {mech.unit}s share one private "
            f"draw, which the others reveal), above {whose} of {limit:g}. "
            f"{_shared_remedy(mech, limit, k)}"
        )
    return ValidationError(
        f"This campaign's parameters mean epsilon {per:.6g} per {mech.unit}, above {whose} of "
        f"{limit:g}: its noise would hide next to nothing. Choose a smaller epsilon (or natural "
        "parameters that mean one), or ask the server's operator to raise its ceiling "
        "(max_epsilon).",
        param="max_epsilon",
    )


def check_campaign_epsilon(
    mech: Mechanism,
    n_tasks: int,
    max_epsilon: float,
    worker_ceiling: float,
    max_answers: int | None = None,
) -> tuple[float, float]:
    """The figures of a worker who answers every task it may (all, or ``max_answers``) in one
    submission (:func:`figures` of :func:`answers_per_draw`), or a ValidationError naming them
    if the per-answer one is not finite, above the server's ceiling ``max_epsilon``, or past
    the workers' default ceiling ``worker_ceiling`` through the shared draw alone (above both
    it and what the mechanism states for one answer): a campaign that states a figure default
    workers accept while every one who answers all its tasks at once would refuse it."""
    if whole_row(mech) and n_tasks > MAX_REPORTS:
        # Its figures would be those of a release no submission can carry.
        raise ValidationError(
            f"{mech.name} releases a worker's whole row in one submission, which carries at "
            f"most {MAX_REPORTS} reports; this campaign has {n_tasks} tasks. Split it."
        )
    k = answers_per_draw(mech, n_tasks, max_answers)
    per, whole = figures(mech, k)
    if not (math.isfinite(per) and per <= max_epsilon * (1 + 1e-9)):  # 1e-9: float rounding
        raise _refusal(mech, k, per, max_epsilon, "this server's ceiling")
    if per > max(float(mech.epsilon), worker_ceiling) * (1 + 1e-9):
        raise _refusal(mech, k, per, worker_ceiling, "the workers' default ceiling")
    return per, whole


def check_release(mech: Mechanism, k: int, max_epsilon: float) -> tuple[float, float]:
    """:func:`figures` of one submission of ``k`` reports (one draw), or a ValidationError if
    the per-answer one is not finite or above the server's ceiling ``max_epsilon``: a campaign
    made before the ceiling, or under a laxer one, takes nothing past it."""
    per, whole = figures(mech, k)
    if not (math.isfinite(per) and per <= max_epsilon * (1 + 1e-9)):
        fits = largest_release(mech, max_epsilon, k)
        more = (
            f" Send at most {fits} reports per submission (each submission is a fresh draw)."
            if 0 < fits < k and not whole_row(mech)
            else ""
        )
        raise ValidationError(
            f"These {k} reports mean epsilon {per:.6g} {per_answer_words(mech.unit, k)}, above "
            f"this server's ceiling of {max_epsilon:g}.{more}"
        )
    return per, whole


def integer_reports(mech: Mechanism) -> bool:
    """Whether the mechanism's numeric reports are integers (or NULL): P3's KRR and two-layer
    with NULL release a value of their integer domain."""
    return isinstance(mech, KRRNull | TwoLayerNull)


def report_range(mech: Mechanism) -> tuple[float, float] | None:
    """The numeric reports the server accepts for ``mech``: an honest release falls outside
    with probability at most :data:`TAIL` per report, whether its noise is the continuous law
    or the discrete one on the public grid. None for mechanisms whose output domain is finite
    (checked exactly by :func:`encode_values`).

    ``[low - h, high + h]`` with ``h = z b + m``: ``b`` the Laplace scale of one report's noise
    (laplace: ``scale``; exp-gaussian: ``1 / sqrt(2 rate)``, the scale of its per-report
    marginal), ``z`` from :func:`_tail_multiple`, and a margin ``m`` of grid steps (laplace:
    one score; exp-gaussian: three steps of its ``granularity``, covering the answer's rounding
    to the grid, the quantised standard deviation and the discrete tail's last step). The range
    is computed from public parameters only, so refusing what falls outside it is
    post-processing: it costs no privacy."""
    if isinstance(mech, LaplaceNull):
        half = Z_LAPLACE * float(mech.scale) + 1.0
    elif isinstance(mech, ExpGaussian):
        step = getattr(mech, "granularity", None) or (mech.high - mech.low) / 1024
        half = Z_MIXTURE * mech.laplace_scale + 3.0 * float(step)
    else:
        return None
    return float(mech.low) - half, float(mech.high) + half


def check_report_range(mech: Mechanism) -> tuple[float, float] | None:
    """:func:`report_range`, or a ValidationError if honest reports could pass
    :data:`MAX_MAGNITUDE`."""
    bounds = report_range(mech)
    if bounds is not None and max(abs(bounds[0]), abs(bounds[1])) > MAX_MAGNITUDE:
        raise ValidationError(
            f"This campaign's honest reports could reach {max(map(abs, bounds)):.3g}, past the "
            f"{MAX_MAGNITUDE:g} the server accepts; declare a narrower answer range or a larger "
            "epsilon."
        )
    return bounds


def build_mechanism(
    name: str, epsilon: float | None, params: dict[str, Any], labels: Sequence[Any] | None
) -> Mechanism:
    """The campaign's mechanism; a categorical one is sized to the answer domain ``labels``."""
    if name not in SERVED:
        known = ", ".join(SERVED)
        raise ValidationError(
            f"The service runs record-local mechanisms only ({known}); got {name!r}."
        )
    params = dict(params)
    if MECHANISMS[name].kind == "categorical" and labels:
        params.setdefault("n_labels", len(labels))
    return make_mechanism(name, epsilon, **params)


def public_params(mech: Mechanism) -> dict[str, Any]:
    """The mechanism's natural parameters, as JSON (numpy scalars made plain)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in mech.params().items()}


def rebuild(name: str, params: dict[str, Any]) -> Mechanism:
    """The campaign's mechanism from its stored natural parameters."""
    return MECHANISMS[name](**params)


def check_labels(mech: Mechanism, labels: Sequence[Any] | None) -> list[Any] | None:
    if mech.kind == "categorical":
        if not labels or len(set(map(str, labels))) != len(labels):
            raise ValidationError(
                f"The {mech.name} mechanism perturbs labels: pass 'labels', the answer domain, "
                "as a list of distinct labels."
            )
        if isinstance(mech, CellMechanism):
            mech._check_domain(len(labels))
        return list(labels)
    if labels:
        raise ValidationError(f"The {mech.name} mechanism perturbs numbers: drop 'labels'.")
    return None


def pick_method(mech: Mechanism, method: str | None) -> str:
    if method is None:
        method = aware_method(mech)
        if method is None:
            raise ValidationError(
                f"Pass 'method': {mech.name} has no perturbation-aware default "
                f"({NO_AWARE_METHOD.get(mech.name, 'none is implemented')})."
            )
    if method not in METHODS and method not in RELEASE_METHODS:
        raise ValidationError(
            f"Unknown method {method!r}. Choose one of {', '.join([*METHODS, *RELEASE_METHODS])}."
        )
    kinds = (METHODS.get(method) or RELEASE_METHODS[method]).kinds
    if mech.kind not in kinds:
        raise ValidationError(f"Method {method!r} does not fit {mech.kind} answers.")
    return method


def whole_row(mech: Mechanism) -> bool:
    """P3's mechanisms release a worker's whole row, NULLs included, in one submission."""
    return mech.releases_cells


def encode_values(mech: Mechanism, labels: list[Any] | None, values: Sequence[Any]) -> list[Any]:
    """The stored form of reported values (label codes, or floats; None for a NULL report),
    or a ValidationError naming the first value the mechanism cannot output."""
    if mech.kind == "categorical":
        assert labels is not None
        position = {_label_key(label): i for i, label in enumerate(labels)}
        codes = []
        for v in values:
            code = position.get(_label_key(v))
            if code is None:
                raise ValidationError(
                    f"Value {v!r} is not in the campaign's answer domain {labels}."
                )
            codes.append(code)
        return codes
    nullable = integer_reports(mech)
    integral = nullable
    low, high = (
        (mech.low, mech.high) if isinstance(mech, KRRNull | TwoLayerNull) else (-math.inf, math.inf)
    )
    accepted = report_range(mech)
    out: list[Any] = []
    for v in values:
        if v is None:
            if not nullable:
                raise ValidationError(f"The {mech.name} mechanism never outputs NULL (null).")
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValidationError(f"Value {v!r} is not a finite number.")
        if integral and (v != int(v) or not low <= v <= high):
            raise ValidationError(
                f"Value {v!r} is outside {mech.name}'s output domain: integers {low}..{high} "
                "or null."
            )
        if accepted is not None and not accepted[0] <= v <= accepted[1]:
            raise ValidationError(
                f"Value {v!r} is outside [{accepted[0]:.6g}, {accepted[1]:.6g}], the range an "
                f"honest {mech.name} release leaves only with probability {TAIL:g} per report "
                "(docs/service.md); send what the mechanism released."
            )
        out.append(float(v))
    _check_grid(mech, out)
    return out


def public_grid(mech: Mechanism) -> tuple[float, float] | None:
    """``(origin, step)`` of the grid every release of a numeric mechanism lies on
    (``origin + J * step``, ``J`` an integer), as the mechanism defines it; None for the others
    (categorical outputs, and P3's KRR and two-layer, whose outputs are checked as integers)."""
    origin, step = getattr(mech, "grid_origin", None), getattr(mech, "grid_step", None)
    if origin is None or step is None:
        return None
    return float(origin), float(step)


def on_grid(values: np.ndarray, origin: float, step: float) -> np.ndarray:
    """Whether each value is exactly ``origin + J * step`` for an integer ``J``, computed in
    float64 as the mechanisms compute a release (the product, then the sum). The nearest
    ``J`` and its two neighbours are tried: where ``step`` is below the values' float spacing,
    several ``J`` give the same double."""
    x = np.asarray(values, dtype=float)
    j = np.rint((x - origin) / step)
    return np.logical_or.reduce([origin + (j + d) * step == x for d in (-1.0, 0.0, 1.0)])


def _check_grid(mech: Mechanism, values: list[Any]) -> None:
    grid = public_grid(mech)
    if grid is None:
        return
    x = np.array([v for v in values if v is not None], dtype=float)
    off = x[~on_grid(x, *grid)]
    if off.size:
        origin, step = grid
        where = (
            "the integers"
            if (origin, step) == (0.0, 1.0)
            else f"{origin:.17g} + J * {step:.17g} for an integer J"
        )
        raise ValidationError(
            f"Value {float(off[0])!r} is off {mech.name}'s public grid ({where}), where every "
            "release of the mechanism lies; send what the mechanism released."
        )


def _label_key(label: Any) -> str:
    # JSON carries 1 and "1" differently; a label domain of either kind matches both.
    return str(label)
