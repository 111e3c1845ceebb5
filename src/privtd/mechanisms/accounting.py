"""Per-worker privacy accounting: what each worker's answers cost in total."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..answers import Answers
from ._base import Mechanism


def worker_totals(answers: Answers, mechanism: Mechanism) -> pd.DataFrame:
    """Per worker, for its whole release under one private draw (as :meth:`Mechanism.perturb`
    draws, once per worker):

    ``n_released``
        Units released: answers, or every task's cell for P3's NULL-aware mechanisms.
    ``epsilon_marginal``
        The paper's per-unit figure: one unit *alone*, the worker's other releases unseen.
    ``epsilon_answer_given_others``
        One unit given the worker's other ``n_released - 1`` (``answer_epsilon``).
    ``epsilon_total``
        The whole release (``release_epsilon``): ``n_released * epsilon`` for mechanisms whose
        units are perturbed independently; the exact figure where they share a private draw.
    ``delta_total``
        ``n_released * delta`` (sequential composition), capped at 1.
    """
    counts = mechanism.cells_per_worker(answers)
    g = mechanism.guarantee
    # One figure per distinct release size: workers share few sizes, and the exact figures of
    # shared-draw mechanisms cost a quadrature each.
    sizes, inverse = np.unique(counts, return_inverse=True)
    one = np.array([mechanism.answer_epsilon(int(k)) for k in sizes], dtype=float)
    whole = np.array([mechanism.release_epsilon(int(k)) for k in sizes], dtype=float)
    return pd.DataFrame(
        {
            "n_released": counts,
            "epsilon_marginal": np.full(counts.size, g.epsilon),
            "epsilon_answer_given_others": one[inverse],
            "epsilon_total": whole[inverse],
            "delta_total": np.minimum(1.0, g.delta * counts),
        },
        index=answers.workers,
    )


def release_figures(mechanism: Mechanism, k: int) -> dict[str, dict[str, float | int | str]]:
    """The three figures of a worker who releases ``k`` units under one private draw, each with
    its unit and what it covers: the paper's marginal (one unit alone), one unit given the
    worker's other ``k - 1``, and the whole release. What ``privtd epsilon --answers``,
    ``perturb`` and ``demo`` print."""
    unit = mechanism.unit
    return {
        "marginal": {
            "epsilon": mechanism.epsilon,
            "unit": unit,
            "covers": f"one {unit} alone, the worker's other releases unseen (the paper's figure)",
        },
        "answer_given_others": {
            "epsilon": mechanism.answer_epsilon(k),
            "unit": unit,
            "covers": f"one {unit} given the worker's other {max(k - 1, 0)}",
            "k": k,
        },
        "release": {
            "epsilon": mechanism.release_epsilon(k),
            "unit": "worker",
            "covers": f"the worker's whole release of {k} {unit}(s), any of them changed",
            "k": k,
        },
    }


def format_release_figures(mechanism: Mechanism, k: int, indent: str = "  ") -> list[str]:
    """:func:`release_figures` as lines of text, one figure a line, each with its unit."""
    lines = []
    for fig in release_figures(mechanism, k).values():
        eps = float(fig["epsilon"])
        shown = "inf" if not np.isfinite(eps) else f"{eps:.4g}"
        lines.append(f"{indent}epsilon={shown} per {fig['unit']}: {fig['covers']}")
    return lines
