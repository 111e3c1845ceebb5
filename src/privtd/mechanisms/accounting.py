"""Per-worker privacy accounting: what each worker's answers cost in total."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..answers import Answers
from ._base import Mechanism


def worker_totals(answers: Answers, mechanism: Mechanism) -> pd.DataFrame:
    """Per worker: units released (answers; every task's cell for P3's NULL-aware mechanisms)
    and the epsilon (delta) of all of them together by sequential composition."""
    counts = mechanism.cells_per_worker(answers)
    g = mechanism.guarantee
    return pd.DataFrame(
        {
            "n_released": counts,
            "epsilon_per_answer": np.full(counts.size, g.epsilon),
            "epsilon_total": g.epsilon * counts,
            "delta_total": np.minimum(1.0, g.delta * counts),
        },
        index=answers.workers,
    )
