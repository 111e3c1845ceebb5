"""Synthetic crowds shared by several test files."""

from __future__ import annotations

import numpy as np
import pandas as pd

from privtd import Answers, datasets


def skewed_crowd(seed: int, activity: float | None = None) -> tuple[Answers, pd.Series]:
    """A crowd with the traits of a product-matching set (benchmarks/bench_class_prior.py builds
    the uniform one): 8,315 tasks, 3 answers each, 12% of truths class 1; 176 workers, 45%
    conservative (recall of 1 in 0.1-0.5, of 0 in 0.95-1.0), 35% good (0.75-0.9 / 0.93-0.99),
    12% coin-flippers, 8% adversarial (0.87 / 0.11).

    ``activity``: None draws each task's 3 workers uniformly; a number ``s`` gives the ``r``-th
    worker a weight ``r ** -s`` (Zipf activity) and draws each task's 3 distinct workers in
    proportion to it, so a few workers give most answers, as on real platforms."""
    gen = np.random.default_rng(seed)
    n_tasks, n_workers = 8315, 176
    kind = gen.choice(4, size=n_workers, p=[0.45, 0.35, 0.12, 0.08])
    recall_1 = gen.uniform(
        np.array([0.1, 0.75, 0.5, 0.87])[kind], np.array([0.5, 0.9, 0.5, 0.87])[kind]
    )
    recall_0 = gen.uniform(
        np.array([0.95, 0.93, 0.5, 0.11])[kind], np.array([1.0, 0.99, 0.5, 0.11])[kind]
    )
    if activity is None:
        confusion = np.stack(
            [
                np.stack([recall_0, 1 - recall_0], axis=1),
                np.stack([1 - recall_1, recall_1], axis=1),
            ],
            axis=2,
        )
        answers, truth, _ = datasets.make_categorical(
            n_tasks,
            n_workers,
            2,
            answers_per_task=3,
            confusion=confusion,
            prior=[0.88, 0.12],
            rng=gen,
        )
        return answers, truth
    truth_codes = (gen.random(n_tasks) < 0.12).astype(np.int64)
    # Weighted draws without replacement: the 3 largest of log weight + Gumbel noise.
    log_weight = -activity * np.log(np.arange(1, n_workers + 1))
    keys = log_weight + gen.gumbel(size=(n_tasks, n_workers))
    drawn = np.argpartition(-keys, 3, axis=1)[:, :3].ravel()
    # A worker the draw never picked is not in the data (as in any file of answers).
    present, worker = np.unique(drawn, return_inverse=True)
    worker = worker.astype(np.int32)
    task = np.repeat(np.arange(n_tasks, dtype=np.int32), 3)
    y = truth_codes[task]
    p_one = np.where(y == 1, recall_1[present][worker], 1.0 - recall_0[present][worker])
    answers = Answers(
        task=task,
        worker=worker,
        value=(gen.random(task.size) < p_one).astype(np.int8),
        tasks=pd.Index([f"t{i}" for i in range(n_tasks)]),
        workers=pd.Index([f"w{i}" for i in present]),
        labels=pd.Index([0, 1], name="label"),
    )
    return answers, pd.Series(truth_codes, index=answers.tasks, name="truth")
