"""The truth step shared by the models whose answers have a per-answer likelihood matrix
(GLAD, MACE, ZenCrowd, plain or through a mechanism's channel): task posteriors from
``log P(report_n | truth l)``, summed per task with one sparse product."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._base import Gold


def task_incidence(task: np.ndarray, n_tasks: int) -> sp.csr_matrix:
    """The ``(tasks, answers)`` 0/1 matrix: one product sums any per-answer array per task."""
    n = task.size
    return sp.csr_matrix((np.ones(n), (task, np.arange(n))), shape=(n_tasks, n))


def truth_step(
    log_lik: np.ndarray, incidence: sp.csr_matrix, log_prior: np.ndarray, gold: Gold | None
) -> tuple[np.ndarray, float]:
    """Posteriors ``mu[t, l] ∝ p_l prod_{n in t} P(r_n | l)`` and the log marginal likelihood
    ``sum_t log sum_l p_l prod_n P(r_n | l)`` (the EM's objective, from the normaliser; a gold
    task contributes the likelihood of its gold label). Gold rows are one-hot."""
    from scipy.special import logsumexp  # on first fit: privtd imports light

    scores = np.asarray(incidence @ log_lik) + log_prior
    if gold is not None:
        # A known truth: only its label's likelihood counts.
        keep = scores[gold.index, gold.value]
        scores[gold.index] = -np.inf
        scores[gold.index, gold.value] = keep
    norm = logsumexp(scores, axis=1, keepdims=True)
    mu = np.exp(scores - norm)
    return mu, float(norm.sum())
