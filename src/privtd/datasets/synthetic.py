"""Seeded synthetic crowds, as the papers simulate them.

Both generators assign each task ``answers_per_task`` distinct workers drawn uniformly (or every
worker when ``answers_per_task`` is None), so they scale to 1e8 answers in O(n) memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .._rng import RNGLike, check_rng
from ..answers import Answers
from ..errors import ValidationError

__all__ = ["make_categorical", "make_numeric"]


def _assign(
    n_tasks: int, n_workers: int, per_task: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(task, worker) codes: ``per_task`` distinct workers per task, or all workers."""
    if n_tasks < 1 or n_workers < 1:
        raise ValidationError(f"n_tasks and n_workers must be >= 1. Got {n_tasks} and {n_workers}.")
    if per_task is None:
        task = np.repeat(np.arange(n_tasks, dtype=np.int32), n_workers)
        worker = np.tile(np.arange(n_workers, dtype=np.int32), n_tasks)
        return task, worker
    if not 1 <= per_task <= n_workers:
        raise ValidationError(
            f"answers_per_task must be in [1, n_workers={n_workers}]. Got {per_task}."
        )
    if 2 * per_task > n_workers:
        # Dense rows: a random permutation per task is cheap enough at this density.
        keys = rng.random((n_tasks, n_workers))
        workers = np.argsort(keys, axis=1)[:, :per_task].astype(np.int32)
    else:
        workers = rng.integers(0, n_workers, size=(n_tasks, per_task), dtype=np.int32)
        # Redraw rows that repeat a worker; with per_task << n_workers this ends in a few rounds.
        while True:
            srt = np.sort(workers, axis=1)
            bad = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
            if not bad.any():
                break
            workers[bad] = rng.integers(
                0, n_workers, size=(int(bad.sum()), per_task), dtype=np.int32
            )
    task = np.repeat(np.arange(n_tasks, dtype=np.int32), per_task)
    return task, workers.ravel()


def _ids(prefix: str, n: int) -> pd.Index:
    return pd.Index([f"{prefix}{i}" for i in range(n)]) if n <= 1_000_000 else pd.RangeIndex(n)


def make_categorical(
    n_tasks: int = 1000,
    n_workers: int = 100,
    n_labels: int = 2,
    *,
    answers_per_task: int | None = 5,
    accuracy: tuple[float, float] | np.ndarray = (0.55, 0.95),
    confusion: np.ndarray | None = None,
    prior: np.ndarray | None = None,
    rng: RNGLike = None,
) -> tuple[Answers, pd.Series, dict[str, Any]]:
    """Categorical answers from workers of known quality.

    Parameters
    ----------
    accuracy : (low, high) or array of shape (n_workers,)
        One-coin workers: each answers correctly with its accuracy and otherwise uniformly among
        the other labels. A pair draws accuracies uniformly from [low, high].
    confusion : array of shape (n_workers, K, K), optional
        Full confusion matrices ``confusion[w, answer, truth]`` (columns sum to 1); overrides
        ``accuracy``.
    prior : array of shape (K,), optional
        Class prior of the truths (default uniform).

    Returns
    -------
    answers, truth, params
        ``truth`` is indexed by task id; ``params`` holds the worker parameters drawn.
    """
    gen = check_rng(rng)
    k = int(n_labels)
    if k < 2:
        raise ValidationError(f"n_labels must be >= 2. Got {n_labels}.")
    p = np.full(k, 1.0 / k) if prior is None else np.asarray(prior, dtype=float)
    if p.shape != (k,) or (p < 0).any() or not np.isclose(p.sum(), 1.0):
        raise ValidationError(
            f"prior must be {k} non-negative numbers summing to 1. Got {prior!r}."
        )
    truth = gen.choice(k, size=n_tasks, p=p).astype(np.int8 if k < 128 else np.int32)
    task, worker = _assign(n_tasks, n_workers, answers_per_task, gen)
    y = truth[task]
    params: dict[str, Any] = {}
    if confusion is not None:
        conf = np.asarray(confusion, dtype=float)
        if conf.shape != (n_workers, k, k) or not np.allclose(conf.sum(axis=1), 1.0):
            raise ValidationError(
                f"confusion must have shape ({n_workers}, {k}, {k}) with columns summing to 1."
            )
        cdf = np.cumsum(conf, axis=1)  # (W, K_answer, K_truth)
        u = np.asarray(gen.random(task.shape[0]))
        cdf_rows: np.ndarray = cdf[worker, :, y]  # (n, K)
        value = (u[:, None] > cdf_rows).sum(axis=1).clip(max=k - 1)
        params["confusion"] = conf
    else:
        if isinstance(accuracy, tuple):
            lo, hi = accuracy
            if not 0.0 <= lo <= hi <= 1.0:
                raise ValidationError(
                    f"accuracy range must satisfy 0 <= low <= high <= 1. Got {accuracy}."
                )
            acc = gen.uniform(lo, hi, size=n_workers)
        else:
            acc = np.asarray(accuracy, dtype=float)
            if acc.shape != (n_workers,) or (acc < 0).any() or (acc > 1).any():
                raise ValidationError(f"accuracy must be {n_workers} probabilities.")
        correct = gen.random(task.shape[0]) < acc[worker]
        # A wrong answer is uniform over the k - 1 other labels.
        shift = gen.integers(1, k, size=task.shape[0])
        value = np.where(correct, y, (y + shift) % k)
        params["accuracy"] = acc
    code = np.int8 if k < 128 else np.int32
    answers = Answers(
        task=task,
        worker=worker,
        value=value.astype(code),
        tasks=_ids("t", n_tasks),
        workers=_ids("w", n_workers),
        labels=pd.Index(np.arange(k), name="label"),
    )
    truth_series = pd.Series(truth.astype(np.int64), index=answers.tasks, name="truth")
    params["prior"] = p
    return answers, truth_series, params


def make_numeric(
    n_tasks: int = 30,
    n_workers: int = 150,
    *,
    answers_per_task: int | None = None,
    truth: tuple[float, float] | np.ndarray = (0.0, 10.0),
    error_rate: float | None = 1.0,
    sigma: np.ndarray | None = None,
    rng: RNGLike = None,
) -> tuple[Answers, pd.Series, dict[str, Any]]:
    """Numeric answers ``truth + N(0, sigma_w^2)``.

    Parameters
    ----------
    truth : (low, high) or array of shape (n_tasks,)
        Truths drawn uniformly from [low, high] (P1's synthetic study uses U(0, 10)), or given.
    error_rate : float
        P1's lambda1: each worker's error variance is drawn from an exponential with this rate
        (mean 1 / error_rate). Ignored when ``sigma`` is given.
    sigma : array of shape (n_workers,), optional
        Per-worker error standard deviations.
    """
    gen = check_rng(rng)
    if isinstance(truth, tuple):
        mu = gen.uniform(truth[0], truth[1], size=n_tasks)
    else:
        mu = np.asarray(truth, dtype=float)
        if mu.shape != (n_tasks,):
            raise ValidationError(f"truth must have shape ({n_tasks},). Got {mu.shape}.")
    if sigma is None:
        if error_rate is None or not error_rate > 0:
            raise ValidationError(f"error_rate must be > 0. Got {error_rate}.")
        variance = gen.exponential(scale=1.0 / error_rate, size=n_workers)
        sd = np.sqrt(variance)
    else:
        sd = np.asarray(sigma, dtype=float)
        if sd.shape != (n_workers,) or (sd < 0).any():
            raise ValidationError(f"sigma must be {n_workers} non-negative numbers.")
    task, worker = _assign(n_tasks, n_workers, answers_per_task, gen)
    value = mu[task] + gen.standard_normal(task.shape[0]) * sd[worker]
    answers = Answers(
        task=task,
        worker=worker,
        value=value,
        tasks=_ids("t", n_tasks),
        workers=_ids("w", n_workers),
    )
    return answers, pd.Series(mu, index=answers.tasks, name="truth"), {"sigma": sd}
