"""Per-worker privacy accounting: what each worker's answers cost in total."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..answers import Answers
from ._base import Mechanism


def worker_totals(answers: Answers, mechanism: Mechanism) -> pd.DataFrame:
    """Per worker: answers given, and the epsilon (delta) of all of them together by sequential
    composition of the mechanism's per-unit guarantee."""
    counts = answers.worker_counts()
    g = mechanism.guarantee
    return pd.DataFrame(
        {
            "n_answers": counts,
            "epsilon_per_answer": np.full(counts.size, g.epsilon),
            "epsilon_total": g.epsilon * counts,
            "delta_total": np.minimum(1.0, g.delta * counts),
        },
        index=answers.workers,
    )
