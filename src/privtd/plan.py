"""Planning before collection: how well the truths will come out under a mechanism, and how many
answers per task a target needs.

A plan is a measurement made before the answers exist. It fits a crowd model (the class shares,
each worker's confusion, how many tasks each worker takes) from what the requester knows (rough
shares and worker accuracy) or from a small pilot (perturbed or not), then draws fresh crowds
from it (a parametric bootstrap), perturbs them with the real mechanism and runs the real
inference: the perturbation-aware method ``privtd infer --mechanism`` picks by default
(:func:`privtd.inference.aware_method`), with its default decision. The figures are the
replicates' mean; an interval adds the spread between replicates to the binomial error of
scoring ``n_tasks`` tasks (docs/plan.md).

What a plan cannot know: a crowd unlike the one described (a pilot's workers are the crowd it
simulates; workers who join later may differ), and what the model fitted on a small perturbed
pilot got wrong. ``benchmarks/results/plan_validation.txt`` compares plans with measured runs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._rng import RNGLike, check_rng
from .answers import Answers
from .errors import ConvergenceWarning, ValidationError

__all__ = [
    "Crowd",
    "NumericCrowd",
    "Prediction",
    "METRICS",
    "make_plan_mechanism",
    "predict",
    "predict_numeric",
    "answers_needed",
    "compare",
    "recommend",
]

#: What a categorical plan predicts (``--target METRIC=VALUE`` names one of them).
METRICS = ("accuracy", "balanced", "minority")

#: The mechanisms a categorical plan compares by default.
CATEGORICAL_MECHANISMS = ("one-layer", "two-layer", "binary-rr")
NUMERIC_MECHANISMS = ("exp-gaussian", "laplace")

# Two-sided normal quantile of the intervals (nominal 95%).
_Z = 1.96


# ---------------------------------------------------------------------- crowd models
@dataclass(frozen=True)
class _Population:
    """Workers described roughly: each one's recall of class ``c`` is ``recall[c]`` plus its
    own ``U(-spread, spread)``, a wrong answer uniform over the other labels."""

    recall: np.ndarray
    spread: float
    n_workers: int

    def draw(self, gen: np.random.Generator) -> np.ndarray:
        k = self.recall.shape[0]
        offset = gen.uniform(-self.spread, self.spread, size=(self.n_workers, k))
        own = np.clip(self.recall[None, :] + offset, 1e-3, 1 - 1e-3)  # [w, truth]
        conf = np.broadcast_to(((1 - own) / (k - 1))[:, None, :], (self.n_workers, k, k)).copy()
        conf[:, np.arange(k), np.arange(k)] = own
        return conf


@dataclass(frozen=True)
class _Skills:
    """A pilot's workers as posteriors over their accuracy (``post[w, s]`` on ``grid``), with
    the crowd's per-class recall offsets and where wrong answers go (``wrong[answer, truth]``)."""

    grid: np.ndarray
    post: np.ndarray
    offset: np.ndarray
    wrong: np.ndarray

    def confusions(self, accuracy: np.ndarray) -> np.ndarray:
        k = self.offset.shape[0]
        own = np.clip(accuracy[:, None] + self.offset[None, :], 1e-3, 1 - 1e-3)  # [w, truth]
        conf = self.wrong[None] * (1 - own)[:, None, :]
        conf[:, np.arange(k), np.arange(k)] = own
        return conf

    def draw(self, gen: np.random.Generator) -> np.ndarray:
        """One accuracy per worker from its posterior, as confusions."""
        cdf = np.cumsum(self.post, axis=1)
        u = np.asarray(gen.random(self.post.shape[0]))[:, None]
        pick = np.minimum((u > cdf).sum(axis=1), self.grid.shape[0] - 1)
        return self.confusions(self.grid[pick])


@dataclass(frozen=True)
class Crowd:
    """A categorical crowd model to draw fresh crowds from.

    Parameters
    ----------
    shares : array (K,)
        Class shares of the truths.
    confusions : array (W, K, K)
        Each worker's own confusion ``[worker, answer, truth]`` (columns sum to 1), before any
        mechanism.
    activity : array (W,)
        Each worker's share of the answers.
    labels : pandas.Index
        The K labels.
    task_counts : array or None
        Answers per task available (a pilot's); a plan asking for ``r`` answers a task gives each
        simulated task ``min(r, count)`` with ``count`` drawn from these. None: ``r`` for every
        task.
    task_spread : float
        How much tasks differ in difficulty: the standard deviation of a task's shift of every
        worker's recall on it (0: all tasks alike).
    task_shifts : array, optional
        Tasks' shifts to draw from (set by :meth:`from_pilot` from golden tasks) instead of a
        normal law with ``task_spread``.
    refits : tuple of Crowd
        The same crowd fitted again on pilots resampled by task (set by :meth:`from_pilot`):
        how much the fit itself could be off, which widens a prediction's interval.
    skills : optional
        Where each simulated crowd draws its workers from, instead of using ``confusions``:
        a pilot's workers as posteriors over their accuracy (:meth:`from_pilot`), or the
        population a rough description gives (:meth:`from_accuracy`).
    """

    shares: np.ndarray
    confusions: np.ndarray
    activity: np.ndarray
    labels: pd.Index
    task_counts: np.ndarray | None = None
    task_spread: float = 0.0
    skills: _Skills | _Population | None = field(default=None, repr=False)
    task_shifts: np.ndarray | None = field(default=None, repr=False)
    refits: tuple[Crowd, ...] = field(default=(), repr=False)

    @property
    def n_labels(self) -> int:
        return int(self.shares.shape[0])

    @property
    def n_workers(self) -> int:
        return int(self.activity.shape[0])

    @property
    def minority(self) -> int:
        """The code of the rarest class."""
        return int(np.argmin(self.shares))

    @classmethod
    def from_accuracy(
        cls,
        n_labels: int,
        accuracy: float | Sequence[float],
        shares: Sequence[float] | None = None,
        *,
        n_workers: int = 50,
        spread: float = 0.1,
        rng: RNGLike = 0,
    ) -> Crowd:
        """A crowd from rough figures: each worker's recall of class ``c`` is ``recall[c] + d``
        with ``d ~ U(-spread, spread)`` drawn for each worker and class, a wrong answer uniform
        over the other labels; every worker equally active; all tasks alike.

        ``accuracy`` is one number (the same recall for every class) or one recall per class.
        """
        k = _check_labels(n_labels)
        recall = (
            np.broadcast_to(np.asarray(accuracy, dtype=float), (k,)).copy()
            if np.ndim(accuracy) == 0
            else np.asarray(accuracy, dtype=float)
        )
        if recall.shape != (k,) or not ((recall >= 0) & (recall <= 1)).all():
            raise ValidationError(
                f"accuracy must be one number or {k} per-class recalls, each in [0, 1]. "
                f"Got {accuracy!r}."
            )
        share = _check_shares(shares, k)
        if not isinstance(n_workers, (int, np.integer)) or n_workers < 1:
            raise ValidationError(f"n_workers must be an int >= 1. Got {n_workers!r}.")
        if not 0 <= spread <= 1:
            raise ValidationError(f"spread must be in [0, 1]. Got {spread!r}.")
        population = _Population(recall, float(spread), n_workers)
        activity = np.full(n_workers, 1.0 / n_workers)
        conf = population.draw(check_rng(rng))
        # Each simulated crowd draws its own workers: the description is of a population.
        return cls(share, conf, activity, pd.Index(np.arange(k), name="label"), skills=population)

    @classmethod
    def from_pilot(
        cls,
        answers: Answers,
        mechanism: Any = None,
        truth: pd.Series | None = None,
        *,
        refits: int = 5,
        rng: RNGLike = 0,
    ) -> Crowd:
        """A crowd fitted on a pilot's answers (perturbed by ``mechanism``, or None), and on
        the truths of some of its tasks where the requester knows them (``truth``, a Series by
        task id: golden tasks).

        A worker's accuracy read from a few perturbed answers is its true one plus much noise:
        fitted one by one, the workers spread wider than the crowd does, and shrunk to a common
        prior they spread less; either way a simulation from them mispredicts (a crowd of equal
        workers gains nothing from weighting them). So the crowd's distribution of accuracies
        is fitted jointly, through the channel: the perturbation-aware one-coin model learns it
        on a grid (its nonparametric population step), and each simulated crowd gives each
        pilot worker an accuracy drawn from its posterior under that distribution, which draws
        as a whole follow. Perturbation-aware Dawid-Skene on the same pilot gives the class
        shares and how the recall differs by class (its crowd-wide mean recall per class, and
        where wrong answers go). The pilot also gives the workers' activity and the answers per
        task.

        How much tasks differ in difficulty is read from the golden tasks: how far the share of
        each one's answers that match its truth spreads beyond what its workers' recalls and
        the binomial explain, through the channel. Without golden tasks a plan cannot see the
        tasks on which most workers are wrong, and it assumes all tasks alike: its figures are
        then an upper bound that real tasks of uneven difficulty fall short of, most at high
        epsilon and many answers a task (docs/plan.md).
        """
        from .inference import AwareDawidSkene, AwareOneCoin
        from .inference._channel import flip_law

        if not answers.is_categorical:
            raise ValidationError(
                "A categorical plan's pilot needs labels; these answers are numbers. Plan numeric "
                "answers with NumericCrowd.from_noise (their range and a worker's noise).",
                param=("kind", "noise"),
            )
        if answers.n_answers == 0:
            raise ValidationError("The pilot has no answers. Give a pilot with answers.")
        if mechanism is not None and not mechanism.flips_labels:
            raise ValidationError(
                f"A pilot perturbed by {mechanism.name} cannot be fitted here: only randomized "
                "response (one-layer, two-layer, binary-rr) has a channel to take out."
            )
        k, w = answers.n_labels, answers.n_workers
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gold = None if truth is None else truth[truth.index.isin(answers.tasks)]
            # Learned: its class prior is the plan's estimate of the class shares.
            ds = AwareDawidSkene(mechanism, class_prior="learned").fit(answers, gold=gold)
            coin = AwareOneCoin(mechanism).fit(answers, gold=gold)
        conf = ds.confusions_.to_numpy().reshape(w, k, k)
        share = ds.priors_.to_numpy(dtype=float)
        if gold is not None and len(gold):
            # Known truths give the class shares directly (add-one smoothed).
            share = np.bincount(answers.encode_labels(pd.Index(gold.to_numpy())), minlength=k) + 1.0
        share = np.clip(share / share.sum(), 1e-3, None)
        share /= share.sum()
        assert ds.probas_ is not None and coin.probas_ is not None
        # Crowd-wide: each class's mean recall and where wrong answers go.
        mu = ds.probas_.to_numpy()[answers.task]
        n_wc = np.stack(
            [np.bincount(answers.worker, weights=mu[:, c], minlength=w) for c in range(k)], 1
        )
        pooled = np.einsum("wc,wac->ac", n_wc, conf) / np.maximum(n_wc.sum(axis=0), 1e-12)
        idx = np.arange(k)
        recall = pooled[idx, idx]
        wrong = pooled.copy()
        wrong[idx, idx] = 0.0
        wrong /= np.maximum(wrong.sum(axis=0, keepdims=True), 1e-12)
        # Each worker's posterior over its own accuracy under the learned distribution.
        grid = coin.accuracy_prior_.index.to_numpy(dtype=float)
        g = coin.accuracy_prior_.to_numpy(dtype=float)
        match = coin.probas_.to_numpy()[answers.task, answers.value.astype(np.int64)]
        m_u = np.bincount(answers.worker, weights=match, minlength=w)
        n_u = answers.worker_counts().astype(float)
        flips, weight = flip_law(mechanism, k, owner="Crowd.from_pilot")
        seen = grid[:, None] * (1 - flips) + (1 - grid[:, None]) * flips / (k - 1)  # [s, f]
        seen = np.clip(seen, 1e-9, 1 - 1e-9)
        loglik = (
            m_u[:, None, None] * np.log(seen)
            + (n_u - m_u)[:, None, None] * np.log((1 - seen) / (k - 1))
            + np.log(weight)
        )  # [w, s, f]
        top = loglik.max(axis=(1, 2), keepdims=True)
        post = np.exp(loglik - top).sum(axis=2) * g
        post /= post.sum(axis=1, keepdims=True)
        # A worker's recall of class c: its accuracy moved by how class c's recall differs
        # from the crowd's mean accuracy.
        # Over more labels the per-class recalls of a small pilot are too noisy to keep unless
        # golden tasks pin them.
        with_gold = gold is not None and len(gold) > 0
        offset = recall - float(share @ recall) if k == 2 or with_gold else np.zeros(k)
        skills = _Skills(grid, post, offset, wrong)
        mean_conf = skills.confusions(post @ grid)
        shifts = None
        if gold is not None and len(gold):
            shifts = _task_shifts(answers, gold, mean_conf, flips, weight)
        assert answers.labels is not None
        again: list[Crowd] = []
        if refits > 0:
            gen = check_rng(rng)
            for _ in range(refits):
                pilot, gold_again = _resample_tasks(answers, gold, gen)
                again.append(cls.from_pilot(pilot, mechanism, gold_again, refits=0))
        return cls(
            share, mean_conf, n_u / n_u.sum(), answers.labels, answers.task_counts().copy(),
            0.0 if shifts is None else float(np.std(shifts)), skills, shifts, tuple(again),
        )  # fmt: skip

    def sample(
        self, n_tasks: int, per_task: int, rng: RNGLike = None
    ) -> tuple[Answers, np.ndarray]:
        """A fresh crowd's answers (before any mechanism) and the truths' codes."""
        gen = check_rng(rng)
        counts = _task_counts(self.task_counts, n_tasks, per_task, self.n_workers, gen)
        task, worker = _assign(counts, self.activity, gen)
        truth = np.asarray(gen.choice(self.n_labels, size=n_tasks, p=self.shares))
        y = truth[task]
        confusions = self.confusions if self.skills is None else self.skills.draw(gen)
        probs = confusions[worker, :, y]  # [answer, K]: its worker's law given the truth
        if self.task_spread > 0:
            # A task's difficulty moves every worker's recall on it. An easier task takes its
            # gain from the wrong answers in proportion; a harder one gives its loss to one
            # decoy label, the same for all its workers: tasks that most workers get wrong
            # are wrong the same way (one breed taken for another), which is what lets the
            # wrong answer win however many answers a task gets.
            if self.task_shifts is not None:
                shift = np.asarray(gen.choice(self.task_shifts, size=n_tasks))[task]
            else:
                shift = gen.normal(0.0, self.task_spread, size=n_tasks)[task]
            rows = np.arange(task.shape[0])
            own = probs[rows, y]
            moved = np.clip(own + shift, 1e-3, 1 - 1e-3)
            decoy = ((truth + gen.integers(1, self.n_labels, size=n_tasks)) % self.n_labels)[task]
            easier = moved >= own
            scaled = probs * ((1 - moved) / np.maximum(1 - own, 1e-12))[:, None]
            probs = np.where(easier[:, None], scaled, probs)
            harder = ~easier
            probs[rows[harder], decoy[harder]] += (own - moved)[harder]
            probs[rows, y] = moved
        cdf = np.cumsum(probs, axis=1)
        u = np.asarray(gen.random(task.shape[0]))[:, None]
        value = (u > cdf).sum(axis=1).clip(max=self.n_labels - 1)
        used, worker = np.unique(worker, return_inverse=True)
        answers = Answers(
            task=task.astype(np.int32),
            worker=worker.astype(np.int32),
            value=value.astype(np.int8 if self.n_labels < 128 else np.int32),
            tasks=pd.Index([f"t{i}" for i in range(n_tasks)]),
            workers=pd.Index([f"w{i}" for i in used]),
            labels=self.labels,
        )
        return answers, truth


@dataclass(frozen=True)
class NumericCrowd:
    """A numeric crowd model: truths uniform in ``[low, high]``, each worker's answer its
    truth plus Gaussian error of its own standard deviation, clipped to the range (as a worker's
    device clips before the mechanism)."""

    low: float
    high: float
    noise: np.ndarray
    activity: np.ndarray

    @classmethod
    def from_noise(
        cls,
        low: float,
        high: float,
        noise: float,
        *,
        n_workers: int = 50,
        spread: float = 0.5,
        rng: RNGLike = 0,
    ) -> NumericCrowd:
        """Workers whose error standard deviations are ``noise`` times ``U(1 - spread,
        1 + spread)``."""
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValidationError(f"The range needs low < high. Got {low}, {high}.")
        if not noise >= 0:
            raise ValidationError(f"noise must be >= 0. Got {noise!r}.")
        if not 0 <= spread <= 1:
            raise ValidationError(f"spread must be in [0, 1]. Got {spread!r}.")
        gen = check_rng(rng)
        sd = noise * gen.uniform(1 - spread, 1 + spread, size=n_workers)
        return cls(float(low), float(high), sd, np.full(n_workers, 1.0 / n_workers))

    def sample(
        self, n_tasks: int, per_task: int, rng: RNGLike = None, integer: bool = False
    ) -> tuple[Answers, np.ndarray]:
        gen = check_rng(rng)
        counts = _task_counts(None, n_tasks, per_task, self.activity.shape[0], gen)
        task, worker = _assign(counts, self.activity, gen)
        truth = gen.uniform(self.low, self.high, size=n_tasks)
        value = truth[task] + gen.standard_normal(task.shape[0]) * self.noise[worker]
        value = np.clip(np.round(value) if integer else value, self.low, self.high)
        used, worker = np.unique(worker, return_inverse=True)
        answers = Answers(
            task=task.astype(np.int32),
            worker=worker.astype(np.int32),
            value=value.astype(float),
            tasks=pd.Index([f"t{i}" for i in range(n_tasks)]),
            workers=pd.Index([f"w{i}" for i in used]),
        )
        return answers, truth


def _resample_tasks(
    answers: Answers, gold: pd.Series | None, gen: np.random.Generator
) -> tuple[Answers, pd.Series | None]:
    """The pilot resampled by task with replacement (each draw a new task with the drawn one's
    answers), and the golden truths of the drawn tasks under their new ids."""
    n = answers.n_tasks
    pick = gen.integers(0, n, size=n)
    order = np.argsort(answers.task, kind="stable")
    counts = answers.task_counts()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    lens = counts[pick]
    within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    rows = order[np.repeat(starts[pick], lens) + within]
    used, worker = np.unique(answers.worker[rows], return_inverse=True)
    tasks = pd.Index([f"b{i}" for i in range(n)])
    again = Answers(
        task=np.repeat(np.arange(n), lens).astype(np.int32),
        worker=worker.astype(np.int32),
        value=answers.value[rows],
        tasks=tasks,
        workers=answers.workers.take(used),
        labels=answers.labels,
    )
    if gold is None or not len(gold):
        return again, None
    known = answers.tasks.take(pick).isin(gold.index)
    truths = gold.reindex(answers.tasks.take(pick)[known]).to_numpy()
    return again, pd.Series(truths, index=tasks[known])


def _task_shifts(
    answers: Answers, gold: pd.Series, conf: np.ndarray, flips: np.ndarray, weight: np.ndarray
) -> np.ndarray | None:
    """How much each golden task moves its workers' recalls: the share of its answers that
    match its truth less what its workers' recalls predict, read through the channel, and
    pulled towards 0 until the shifts spread only as much as is left once the binomial's
    variance is taken out (Louis's constrained Bayes, JASA 1984). Their shape is kept: a few
    tasks on which most workers are wrong stay a few strongly negative shifts."""
    k = conf.shape[1]
    codes = np.full(answers.n_tasks, -1, dtype=np.int64)
    codes[answers.encode_tasks(gold.index)] = answers.encode_labels(pd.Index(gold.to_numpy()))
    on = codes[answers.task] >= 0
    task, worker, value = answers.task[on], answers.worker[on], answers.value[on]
    y = codes[task]
    scale = float(weight @ (1 - flips * k / (k - 1)))
    expect = scale * conf[worker, y, y] + (1 - scale) / k
    used, task = np.unique(task, return_inverse=True)
    if used.shape[0] < 10:
        return None  # too few golden tasks to read their spread from
    n_q = np.bincount(task).astype(float)
    resid = np.bincount(task, weights=(value == y) - expect) / n_q
    resid -= resid.mean()
    binom = np.bincount(task, weights=expect * (1 - expect)) / n_q**2
    total = float(np.mean(resid**2))
    excess = max(total - float(np.mean(binom)), 0.0)
    keep = math.sqrt(excess / total) if total > 0 else 0.0
    return np.asarray(resid * keep / max(scale, 1e-6))


def _check_labels(n_labels: int) -> int:
    if not isinstance(n_labels, (int, np.integer)) or isinstance(n_labels, bool) or n_labels < 2:
        raise ValidationError(f"The label count must be an int >= 2. Got {n_labels!r}.")
    return int(n_labels)


def _check_shares(shares: Sequence[float] | None, k: int) -> np.ndarray:
    if shares is None:
        return np.full(k, 1.0 / k)
    share = np.asarray(shares, dtype=float)
    if share.shape != (k,) or (share < 0).any() or not share.sum() > 0:
        raise ValidationError(
            f"The class shares must be {k} non-negative numbers (one per label). Got {shares!r}."
        )
    return share / share.sum()


def _task_counts(
    available: np.ndarray | None, n_tasks: int, per_task: int, n_workers: int, gen: Any
) -> np.ndarray:
    if not isinstance(per_task, (int, np.integer)) or per_task < 1:
        raise ValidationError(f"Answers per task must be an int >= 1. Got {per_task!r}.")
    if not isinstance(n_tasks, (int, np.integer)) or n_tasks < 1:
        raise ValidationError(f"The task count must be an int >= 1. Got {n_tasks!r}.")
    counts = np.full(n_tasks, per_task, dtype=np.int64)
    if available is not None:
        counts = np.minimum(counts, gen.choice(available, size=n_tasks))
    return np.minimum(counts, n_workers)


def _assign(counts: np.ndarray, activity: np.ndarray, gen: Any) -> tuple[np.ndarray, np.ndarray]:
    """(task, worker) codes: ``counts[q]`` distinct workers for task ``q``, drawn in proportion
    to their activity (with replacement, the rows that repeat a worker redrawn)."""
    n, width = counts.shape[0], int(counts.max())
    in_row = np.arange(width)[None, :] < counts[:, None]
    chosen = gen.choice(activity.shape[0], size=(n, width), p=activity)
    bad = np.ones(n, dtype=bool)
    for _ in range(50):
        sub = np.where(in_row[bad], chosen[bad], -1 - np.arange(width)[None, :])
        srt = np.sort(sub, axis=1)
        repeat = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        rows = np.flatnonzero(bad)[repeat]
        bad[:] = False
        bad[rows] = True
        if not bad.any():
            break
        chosen[bad] = gen.choice(activity.shape[0], size=(int(bad.sum()), width), p=activity)
    if bad.any():
        # A few very active workers make repeats likely: draw those rows without replacement
        # by the Gumbel top-k (dense over the workers, for these rows only).
        keys = np.log(activity)[None, :] - np.log(
            -np.log(gen.random((int(bad.sum()), len(activity))))
        )
        chosen[bad] = np.argsort(-keys, axis=1)[:, :width]
    task = np.repeat(np.arange(n), counts)
    return task, chosen[in_row]


# ---------------------------------------------------------------------- mechanisms
def make_plan_mechanism(name: str, epsilon: float, n_labels: int = 2, **params: Any) -> Any:
    """The mechanism a plan runs, calibrated to ``epsilon`` (per answer, as stated). Two-layer
    over more than two labels without ``a`` takes the smallest feasible ``a``: the paper's
    ``a = 0`` where the epsilon allows it."""
    from .mechanisms import make_mechanism
    from .mechanisms.randomized_response import flip_for_epsilon

    if name in ("one-layer", "two-layer", "binary-rr"):
        if name == "binary-rr" and n_labels != 2:
            raise ValidationError(
                f"binary-rr is for two labels; these have {n_labels}. Use one-layer."
            )
        if name == "two-layer" and "a" not in params:
            params["a"] = max(0.0, 2.0 * flip_for_epsilon(epsilon, n_labels) - 1.0)
        return make_mechanism(name, epsilon, n_labels=n_labels, **params)
    if name in NUMERIC_MECHANISMS:
        return make_mechanism(name, epsilon, **params)
    raise ValidationError(
        f"A plan runs {', '.join(CATEGORICAL_MECHANISMS + NUMERIC_MECHANISMS)}; got {name!r}."
    )


def _figures(mechanism: Any, k: int) -> tuple[float, float]:
    """The per-answer figure given the worker's other ``k - 1`` answers, and the release's."""
    k = max(1, int(k))
    return float(mechanism.answer_epsilon(k)), float(mechanism.release_epsilon(k))


# ---------------------------------------------------------------------- predictions
@dataclass
class Prediction:
    """What a plan predicts for one mechanism, epsilon and redundancy.

    ``scores`` maps each metric to ``(mean, low, high)``: the replicates' mean and a nominal
    95% interval for one collection of ``n_tasks`` tasks. Categorical: ``accuracy``,
    ``balanced`` (the mean of the per-class recalls) and ``minority`` (the rarest class's
    recall), with ``baseline`` the majority class's share (the accuracy of labelling every task
    with it). Numeric: ``mae``, with ``baseline`` the MAE of the answers' median.
    ``answer_epsilon``/``release_epsilon``: the true figures of a worker giving
    ``answers_per_worker`` answers (one answer given the worker's others; the whole release).
    """

    mechanism: str
    params: dict[str, Any]
    epsilon: float
    per_task: int
    n_tasks: int
    method: str
    scores: dict[str, tuple[float, float, float]]
    baseline: float
    answers_per_worker: float
    answer_epsilon: float
    release_epsilon: float
    replicates: int = field(default=0)

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "per_task": self.per_task,
        }
        for name, (mean, lo, hi) in self.scores.items():
            out[name] = mean
            out[f"{name}_low"] = lo
            out[f"{name}_high"] = hi
        out["baseline"] = self.baseline
        out["answer_epsilon"] = self.answer_epsilon
        out["release_epsilon"] = self.release_epsilon
        out["method"] = self.method
        out.update({f"param_{k}": v for k, v in self.params.items()})
        return out


def _default_method(mechanism: Any) -> str:
    from .inference import NO_AWARE_METHOD, aware_method

    if mechanism is None:
        return "ds"
    method = aware_method(mechanism)
    if method is None:
        # What infer asks for instead (P3's aggregator) where no aware estimator exists.
        if mechanism.name in NO_AWARE_METHOD:
            return "sigma"
        raise ValidationError(f"No inference method to plan the {mechanism.name} mechanism with.")
    return method


def _fit_truths(reports: Answers, mechanism: Any, method: str) -> np.ndarray:
    from .inference import make_estimator, takes_mechanism

    params = {"mechanism": mechanism} if takes_mechanism(method) else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = make_estimator(method, **params).fit(reports)
    truths = est.truths_.reindex(reports.tasks)
    if reports.is_categorical:
        assert reports.labels is not None
        return np.asarray(reports.labels.get_indexer(pd.Index(truths.to_numpy())))
    return truths.to_numpy(dtype=float)


def _class_scores(pred: np.ndarray, truth: np.ndarray, k: int, minority: int) -> np.ndarray:
    hits = pred == truth
    n_c = np.bincount(truth, minlength=k)
    recall = np.bincount(truth, weights=hits, minlength=k) / np.maximum(n_c, 1)
    present = n_c > 0
    balanced = recall[present].mean()
    return np.array([hits.mean(), balanced, recall[minority] if n_c[minority] else np.nan])


def _interval(values: np.ndarray, binomial_sd: np.ndarray) -> list[tuple[float, float, float]]:
    """Mean and nominal 95% interval per column of ``values[replicate, metric]``: the larger of
    the replicates' spread and the binomial error, inflated for the mean's own uncertainty."""
    r = values.shape[0]
    mean = np.nanmean(values, axis=0)
    spread = np.nanstd(values, axis=0, ddof=1) if r > 1 else np.zeros(values.shape[1])
    sd = np.maximum(spread, binomial_sd) * math.sqrt(1.0 + 1.0 / r)
    return [(float(m), float(m - _Z * s), float(m + _Z * s)) for m, s in zip(mean, sd, strict=True)]


def _seed(gen: np.random.Generator) -> int:
    return int(gen.integers(0, 2**31 - 1))


def predict(
    crowd: Crowd,
    mechanism: Any,
    per_task: int,
    *,
    n_tasks: int = 1000,
    replicates: int = 5,
    rng: RNGLike = 0,
    minority: int | None = None,
) -> Prediction:
    """Predict accuracy, balanced accuracy and minority recall for ``mechanism`` (None: no
    perturbation) at ``per_task`` answers a task, over ``n_tasks`` tasks: ``replicates`` fresh
    crowds drawn from ``crowd``, perturbed with the mechanism and inferred with the method
    ``privtd infer --mechanism`` picks by default. ``minority``: the class code whose recall
    is reported (default: the crowd's rarest class)."""
    if not isinstance(replicates, (int, np.integer)) or replicates < 1:
        raise ValidationError(f"replicates must be an int >= 1. Got {replicates!r}.")
    gen = check_rng(rng)
    method = _default_method(mechanism)
    k = crowd.n_labels
    rare = crowd.minority if minority is None else int(minority)

    def run(source: Crowd) -> np.ndarray:
        answers, truth = source.sample(n_tasks, per_task, gen)
        reports = answers if mechanism is None else mechanism.perturb(answers, rng=_seed(gen))
        return _class_scores(_fit_truths(reports, mechanism, method), truth, k, rare)

    values = np.array([run(crowd) for _ in range(replicates)])
    mean = np.nanmean(values, axis=0)
    # The crowds refitted on resampled pilots: their runs spread by the simulation's noise and
    # by how far the fit could be off; the interval takes the wider of the two.
    refit = np.array([run(c) for c in crowd.refits[:replicates]]).reshape(-1, 3)
    share = crowd.shares
    n_c = np.maximum(share * n_tasks, 1.0)
    binom = np.array(
        [
            math.sqrt(mean[0] * (1 - mean[0]) / n_tasks),
            # The balanced accuracy's binomial error, with every class recalled at its mean.
            math.sqrt(float((mean[1] * (1 - mean[1]) / n_c).sum())) / k,
            math.sqrt(mean[2] * (1 - mean[2]) / n_c[rare]) if mean[2] == mean[2] else 0,
        ]
    )
    if refit.shape[0] > 1:
        spread = np.nanstd(refit, axis=0, ddof=1)
        binom = np.maximum(binom, np.sqrt(spread**2 + (np.nanmean(refit, axis=0) - mean) ** 2))
    scores = dict(zip(METRICS, _interval(values, binom), strict=True))
    scores = {m: (v[0], max(0.0, v[1]), min(1.0, v[2])) for m, v in scores.items()}
    per_worker = n_tasks * float(np.mean(np.minimum(per_task, _available(crowd)))) / crowd.n_workers
    return _prediction(
        mechanism, per_task, n_tasks, method, scores, float(share.max()), per_worker, replicates, k
    )


def _available(crowd: Crowd) -> np.ndarray:
    return np.array([np.inf]) if crowd.task_counts is None else crowd.task_counts


def _prediction(
    mechanism: Any,
    per_task: int,
    n_tasks: int,
    method: str,
    scores: dict[str, tuple[float, float, float]],
    baseline: float,
    per_worker: float,
    replicates: int,
    k: int,
) -> Prediction:
    if mechanism is None:
        name, params, eps, figures = "none", {}, math.inf, (math.inf, math.inf)
    else:
        name, params = mechanism.name, _public_params(mechanism)
        eps = round(float(mechanism.epsilon), 10)  # calibration round-trips to 1e-16
        figures = _figures(mechanism, math.ceil(per_worker))
    return Prediction(
        name, params, eps, int(per_task), int(n_tasks), method, scores, baseline,
        per_worker, figures[0], figures[1], replicates,
    )  # fmt: skip


def _public_params(mechanism: Any) -> dict[str, Any]:
    keep = ("f", "a", "b", "rate", "scale", "low", "high")
    return {k: getattr(mechanism, k) for k in keep if hasattr(mechanism, k)}


def predict_numeric(
    crowd: NumericCrowd,
    mechanism: Any,
    per_task: int,
    *,
    n_tasks: int = 500,
    replicates: int = 5,
    rng: RNGLike = 0,
) -> Prediction:
    """Predict the MAE of the truths for a numeric mechanism (``exp-gaussian`` with the aware
    Gaussian model ``infer`` picks; ``laplace``, which has no aware model, with P3's aggregator
    ``sigma``), with the MAE of the answers' median as the baseline."""
    gen = check_rng(rng)
    method = _default_method(mechanism)
    integer = mechanism is not None and mechanism.name == "laplace"
    maes, base = [], []
    for _ in range(replicates):
        answers, truth = crowd.sample(n_tasks, per_task, gen, integer=integer)
        reports = answers if mechanism is None else mechanism.perturb(answers, rng=_seed(gen))
        pred = _fit_truths(reports, mechanism, method)
        maes.append(np.abs(pred - truth).mean())
        base.append(np.abs(np.median(reports.value) - truth).mean())
    values = np.array(maes)[:, None]
    # The binomial term's analogue: the standard error of a mean of n_tasks absolute errors.
    sd = np.array([float(np.mean(maes)) * math.sqrt(math.pi / 2 - 1) / math.sqrt(n_tasks)])
    (mae,) = _interval(values, sd)
    per_worker = n_tasks * per_task / crowd.activity.shape[0]
    return _prediction(
        mechanism, per_task, n_tasks, method, {"mae": (mae[0], max(0.0, mae[1]), mae[2])},
        float(np.mean(base)), per_worker, replicates, 0,
    )  # fmt: skip


# ---------------------------------------------------------------------- questions
def answers_needed(
    crowd: Crowd,
    mechanism: Any,
    metric: str,
    target: float,
    *,
    max_per_task: int = 30,
    n_tasks: int = 1000,
    replicates: int = 3,
    rng: RNGLike = 0,
) -> tuple[int | None, Prediction]:
    """The fewest answers per task whose predicted ``metric`` reaches ``target`` (the
    replicates' mean), searched up to ``max_per_task``; None if none does. Returns it and the
    prediction at the last redundancy tried."""
    if metric not in METRICS:
        raise ValidationError(f"Unknown metric {metric!r}. Choose one of {', '.join(METRICS)}.")
    top = max_per_task
    if crowd.task_counts is not None:
        top = min(top, crowd.n_workers)
    # Doubling, then bisection: a plan tries a handful of redundancies, not every one.
    seen: dict[int, Prediction] = {}

    def at(r: int) -> Prediction:
        if r not in seen:
            seen[r] = predict(crowd, mechanism, r, n_tasks=n_tasks, replicates=replicates, rng=rng)
        return seen[r]

    lo, hi = 0, 1
    while hi < top and at(hi).scores[metric][0] < target:
        lo, hi = hi, min(2 * hi + 1, top)
    if at(hi).scores[metric][0] < target:
        return None, at(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid).scores[metric][0] >= target:
            hi = mid
        else:
            lo = mid
    return hi, at(hi)


def compare(
    crowd: Crowd,
    epsilons: Sequence[float],
    per_task: int,
    *,
    mechanisms: Sequence[str] | None = None,
    params: dict[str, Any] | None = None,
    n_tasks: int = 1000,
    replicates: int = 5,
    rng: RNGLike = 0,
) -> list[Prediction]:
    """One prediction per mechanism and epsilon (default: one-layer, two-layer and, over two
    labels, binary-rr; two-layer over more labels with the smallest feasible ``a``)."""
    k = crowd.n_labels
    names = list(mechanisms or [m for m in CATEGORICAL_MECHANISMS if m != "binary-rr" or k == 2])
    out = []
    for eps in epsilons:
        for name in names:
            mech = make_plan_mechanism(name, float(eps), k, **dict(params or {}))
            out.append(
                predict(crowd, mech, per_task, n_tasks=n_tasks, replicates=replicates, rng=rng)
            )
    return out


def recommend(predictions: Sequence[Prediction], metric: str = "balanced") -> str:
    """Which mechanism to use at each stated epsilon, compared like with like in both units a
    worker can care about: **per answer** (one answer given the worker's other answers, within
    the stated epsilon) and **per worker** (the whole release, within what one-layer's
    composition gives: ``k epsilon`` for ``k`` answers). Two-layer's stated epsilon holds for
    one answer alone: its answers share a private flip, so per answer it loses far more than
    stated, while its whole release can stay below one-layer's."""
    lines = []
    for eps in sorted({p.epsilon for p in predictions}):
        cells = [p for p in predictions if p.epsilon == eps]
        k = max(1, math.ceil(cells[0].answers_per_worker))
        parts = []
        for unit, budget, figure in (
            ("per answer", eps, "answer_epsilon"),
            (f"per worker ({k} answers)", k * eps, "release_epsilon"),
        ):
            fair = [p for p in cells if not getattr(p, figure) > budget * (1 + 1e-6)]
            if not fair:
                parts.append(f"{unit}: none within {budget:.3g}")
                continue
            best = max(fair, key=lambda p: p.scores[metric][0])
            name = best.mechanism
            if name == "two-layer":
                name += f" (a={best.params['a']:.3g})"
            parts.append(
                f"{unit}, within {budget:.3g}: {name}, {metric} {best.scores[metric][0]:.3f} "
                f"(it gives {getattr(best, figure):.3g})"
            )
        unfair = [p for p in cells if p.answer_epsilon > eps * (1 + 1e-6)]
        text = f"epsilon {eps:g}: " + "; ".join(parts)
        for p in unfair:
            text += (
                f". {p.mechanism} states {eps:g} but loses {p.answer_epsilon:.3g} per answer "
                "given the worker's others"
            )
        lines.append(text)
    return "\n".join(lines)
