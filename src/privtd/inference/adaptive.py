"""Adaptive redundancy: which tasks the next worker should answer, from the answers so far.

Uniform redundancy gives every task the same number of answers; most tasks are settled by the
first few and some stay unclear. Adaptive redundancy (Toloka's dynamic overlap; selective
repeated labeling, Ipeirotis, Provost, Sheng and Wang 2014, "Repeated labeling using multiple
noisy labelers", Data Mining and Knowledge Discovery 28(2)) hands the next worker the tasks whose
posterior is least settled, and stops asking about a task once its posterior reaches a target
confidence or its answers a cap.

Under local differential privacy the answers arrive through the mechanism's channel
``C[r, a] = P(report r | answer a)`` (:func:`privtd.inference._channel.channel_matrix`), so how
settled a task is has to be read through it: three reports "yes" at epsilon 1 settle far less
than three raw "yes". The posterior here is a pooled one-coin model through the channel: every
worker answers right with one accuracy ``s`` (wrong answers spread evenly over the other labels),
so a report's likelihood is ``L[r, l] = c C[r, l] + d rho_r`` with ``d = (1 - s) / (K - 1)``,
``c = s - d`` and ``rho_r`` the channel's row sum, and a task's log posterior is its report
counts times ``log L`` (one matrix product over all tasks). ``s`` is fitted by EM on the counts,
shrunk towards ``accuracy`` by ten pseudo-answers; under two-layer randomized response the
channel is its shared part ``R_a`` and the rest of each worker's flip lowers the fitted ``s``.

The posterior is read with a uniform class prior by default: it is then the evidence the
"balanced" decision reads (``privtd.inference.decision``), which the perturbation-aware methods
take under a mechanism, and a skewed learned prior cannot declare every task settled before its
answers say anything (``class_prior="learned"`` reads it with the fitted prior).

The pooled model weighs every report alike. A fitted estimator weighs each worker by its own
accuracy, which matters most under two-layer randomized response (each worker's flip is its
own): :meth:`AdaptiveRedundancy.posteriors_of` reads its posteriors for the policy to rank by
(what the service does by default). ``benchmarks/bench_adaptive.py`` replays the bundled data
sets under both (``benchmarks/results/adaptive.txt``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np

from .._rng import RNGLike, check_rng
from ..errors import ValidationError
from ._channel import channel_matrix
from ._em import InMemory, Model, run_em

__all__ = ["AdaptiveRedundancy", "TaskPosteriors", "report_counts"]

#: How many answers the prior guess of the workers' accuracy is worth in the pooled fit.
PRIOR_ANSWERS = 10.0


def report_counts(task: np.ndarray, value: np.ndarray, n_tasks: int, n_labels: int) -> np.ndarray:
    """Per task, how many reports of each label: an ``(n_tasks, n_labels)`` float array."""
    task = np.asarray(task, dtype=np.int64)
    value = np.asarray(value, dtype=np.int64)
    if task.shape != value.shape:
        raise ValidationError(
            f"report_counts needs one task per report; got {task.size} tasks, {value.size} values."
        )
    if task.size and (task.min() < 0 or task.max() >= n_tasks):
        raise ValidationError(f"A task code is outside 0..{n_tasks - 1}.")
    if value.size and (value.min() < 0 or value.max() >= n_labels):
        raise ValidationError(f"A label code is outside 0..{n_labels - 1}.")
    flat = np.bincount(task * n_labels + value, minlength=n_tasks * n_labels)
    out: np.ndarray = flat.reshape(n_tasks, n_labels).astype(float)
    return out


@dataclass(frozen=True)
class TaskPosteriors:
    """What :meth:`AdaptiveRedundancy.posteriors` fitted.

    Attributes
    ----------
    probas : ndarray, (n_tasks, K)
        Each task's posterior over the labels (the class prior for a task without reports).
    accuracy : float
        The pooled accuracy of a worker's own answer, before the channel (NaN for a fitted
        estimator's posteriors, :meth:`AdaptiveRedundancy.posteriors_of`).
    prior : ndarray, (K,)
        The class prior the posteriors were read with (uniform by default).
    n_iter : int
        EM passes (the estimator's, for :meth:`AdaptiveRedundancy.posteriors_of`).
    """

    probas: np.ndarray
    accuracy: float
    prior: np.ndarray
    n_iter: int

    @property
    def confidence(self) -> np.ndarray:
        """Each task's largest posterior probability."""
        out: np.ndarray = self.probas.max(axis=1)
        return out


@dataclass(frozen=True)
class AdaptiveRedundancy:
    """Hand each worker the least settled tasks, until a target confidence or a cap.

    Parameters
    ----------
    target : float, default 0.95
        A task is settled once its largest posterior probability reaches this; it is then asked
        about no more. In ``(1 / K, 1)`` for ``K`` labels.
    max_per_task : int, default 10
        A task with this many reports is asked about no more, settled or not.
    min_per_task : int, default 1
        Tasks with fewer reports come first, whatever their posterior (a skewed prior or a
        lucky first report does not settle a task that nobody has looked at twice).
    batch : int, default 20
        How many tasks one worker is handed at a time.
    max_answers : int or None, default None
        The campaign's answer budget: no task is handed once this many reports are in.
    accuracy : float, default 0.7
        The prior guess of a worker's accuracy (before the channel), worth ten answers in the
        pooled fit; it matters only while few reports are in.
    class_prior : {"uniform", "learned"}, default "uniform"
        The class prior the posteriors are read with (see the module's docstring).
    max_iter : int, default 100
        EM passes of the pooled fit at most.
    tol : float, default 1e-6
        The fit stops when the accuracy and the class prior move less than this (max norm).

    Examples
    --------
    >>> import numpy as np
    >>> from privtd.mechanisms import OneLayerRR
    >>> policy = AdaptiveRedundancy(target=0.9, max_per_task=6, batch=2)
    >>> counts = np.array([[5.0, 0.0], [2.0, 2.0], [0.0, 0.0]])  # reports of 0 and 1 per task
    >>> policy.next_tasks(counts, OneLayerRR.from_epsilon(2.0), rng=0).tolist()
    [2, 1]
    """

    target: float = 0.95
    max_per_task: int = 10
    min_per_task: int = 1
    batch: int = 20
    max_answers: int | None = None
    accuracy: float = 0.7
    class_prior: str = "uniform"
    max_iter: int = 100
    tol: float = 1e-6

    def __post_init__(self) -> None:
        def _int(name: str, low: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise ValidationError(
                    f"The '{name}' parameter of AdaptiveRedundancy must be an integer >= {low}. "
                    f"Got {value!r}."
                )

        if not isinstance(self.target, int | float) or not 0.0 < float(self.target) < 1.0:
            raise ValidationError(
                "The 'target' parameter of AdaptiveRedundancy must be a confidence in (0, 1). "
                f"Got {self.target!r}."
            )
        _int("max_per_task", 1)
        _int("min_per_task", 0)
        _int("batch", 1)
        _int("max_iter", 1)
        if self.max_answers is not None:
            _int("max_answers", 1)
        if self.min_per_task > self.max_per_task:
            raise ValidationError(
                f"AdaptiveRedundancy needs min_per_task <= max_per_task. Got "
                f"{self.min_per_task} > {self.max_per_task}."
            )
        if not isinstance(self.accuracy, int | float) or not 0.0 < float(self.accuracy) < 1.0:
            raise ValidationError(
                "The 'accuracy' parameter of AdaptiveRedundancy must be a float in (0, 1). "
                f"Got {self.accuracy!r}."
            )
        if self.class_prior not in ("uniform", "learned"):
            raise ValidationError(
                "The 'class_prior' parameter of AdaptiveRedundancy must be 'uniform' or "
                f"'learned'. Got {self.class_prior!r}."
            )
        if not isinstance(self.tol, int | float) or not self.tol > 0:
            raise ValidationError(
                f"The 'tol' parameter of AdaptiveRedundancy must be a float > 0. Got {self.tol!r}."
            )

    def check_labels(self, n_labels: int) -> None:
        """Refuse a target that a task over ``n_labels`` labels holds before any answer."""
        if not float(self.target) > 1.0 / n_labels:
            raise ValidationError(
                f"A target confidence of {self.target:g} over {n_labels} labels is reached with "
                f"no answer at all (1/{n_labels}); choose a target above {1.0 / n_labels:.4g}."
            )

    # ------------------------------------------------------------------ the posteriors
    def posteriors(self, counts: np.ndarray, mechanism: Any = None) -> TaskPosteriors:
        """Each task's posterior from its report counts (``(n_tasks, K)``, :func:`report_counts`)
        under ``mechanism``'s channel (None: raw answers)."""
        counts = _check_counts(counts)
        n_tasks, k = counts.shape
        self.check_labels(k)
        channel = channel_matrix(mechanism, k, owner="AdaptiveRedundancy")
        c_mat = np.eye(k) if channel is None else channel
        rho = c_mat.sum(axis=1)  # P(report r) summed over the answers: 1 for randomized response
        # A task's posterior depends on its counts alone: EM runs over the distinct rows of
        # counts (a few hundred however many tasks), each weighed by how many tasks share it.
        rows, inverse, weight = _distinct_rows(counts)
        part = _Rows(rows, weight.astype(float), c_mat, rho)
        model = _PooledModel(self, part)
        # InMemory runs any part: here the distinct rows of counts, not a MemoryPart.
        executor = InMemory(cast(Any, part))
        fit = run_em(model, executor, self.max_iter)
        executor.run(_estep_pass, fit.params)
        s, prior = fit.params
        return TaskPosteriors(
            probas=executor.state[inverse], accuracy=s, prior=prior, n_iter=fit.n_iter
        )

    def posteriors_of(self, estimator: Any, tasks: Any) -> TaskPosteriors:
        """A fitted estimator's posteriors (its ``probas_``) over ``tasks`` (a task index, in
        the order of the counts; a task the fit did not see gets the uniform posterior),
        read with this policy's class prior: under ``class_prior="uniform"`` the estimator's
        fitted class prior is divided out, as the "balanced" decision does. Workers are then
        weighed as the estimator weighs them, where the pooled model weighs them alike: under
        two-layer randomized response, whose workers' flips differ, that matters most
        (``benchmarks/results/adaptive.txt``)."""
        import pandas as pd

        from .decision import fitted_prior

        probas = getattr(estimator, "probas_", None)
        if not isinstance(probas, pd.DataFrame):
            raise ValidationError(
                f"{type(estimator).__name__} has no posteriors (probas_) to rank tasks by; use "
                "the pooled model (AdaptiveRedundancy.posteriors)."
            )
        mu = probas.reindex(pd.Index(tasks)).to_numpy(dtype=float, copy=True)
        k = mu.shape[1]
        mu[np.isnan(mu).any(axis=1)] = 1.0 / k
        prior = np.full(k, 1.0 / k)
        fitted = fitted_prior(estimator)
        if fitted is not None:
            if self.class_prior == "uniform":
                mu = mu / np.maximum(fitted.reindex(probas.columns).to_numpy(dtype=float), 1e-300)
                mu /= mu.sum(axis=1, keepdims=True)
            else:
                prior = fitted.reindex(probas.columns).to_numpy(dtype=float)
        n_iter = int(getattr(estimator, "n_iter_", 0))
        return TaskPosteriors(probas=mu, accuracy=float("nan"), prior=prior, n_iter=n_iter)

    # ------------------------------------------------------------------ the policy
    def open_tasks(self, counts: np.ndarray, posteriors: TaskPosteriors) -> np.ndarray:
        """Which tasks still want answers: below ``max_per_task`` reports, and below
        ``min_per_task`` or short of the target confidence."""
        n = _check_counts(counts).sum(axis=1)
        unsettled = (posteriors.confidence < self.target) | (n < self.min_per_task)
        out: np.ndarray = unsettled & (n < self.max_per_task)
        return out

    def next_tasks(
        self,
        counts: np.ndarray,
        mechanism: Any = None,
        *,
        posteriors: TaskPosteriors | None = None,
        exclude: np.ndarray | None = None,
        n_answers: int | None = None,
        rng: RNGLike = None,
    ) -> np.ndarray:
        """The task codes to hand the next worker, most needed first (at most ``batch``).

        Parameters
        ----------
        counts : ndarray, (n_tasks, K)
            Report counts per task and label (:func:`report_counts`). In a live campaign, the
            reports of every worker but the one being served (see ``docs/service.md``).
        mechanism : Mechanism or None
            The campaign's mechanism (its channel); None for raw answers.
        posteriors : TaskPosteriors, optional
            The posteriors to rank by: by default the pooled model's (:meth:`posteriors`);
            :meth:`posteriors_of` reads a fitted estimator's, which weigh each worker by its
            own accuracy.
        exclude : bool ndarray (n_tasks,), optional
            Tasks not to hand this worker (those it already answered).
        n_answers : int, optional
            Reports received so far, for ``max_answers`` (default: ``counts.sum()``).
        rng : Generator, int or None
            Breaks ties between equally settled tasks with as many reports, so that workers
            who ask at the same time are spread over them.

        Returns
        -------
        ndarray of int
            Tasks below ``min_per_task`` reports first (fewest first), then the others by
            confidence, least first; empty once nothing is open or the answer budget is spent.
        """
        counts = _check_counts(counts)
        n_tasks = counts.shape[0]
        room = self.batch
        if self.max_answers is not None:
            spent = int(counts.sum()) if n_answers is None else int(n_answers)
            room = min(room, self.max_answers - spent)
        if room <= 0 or n_tasks == 0:
            return np.zeros(0, dtype=np.int64)
        post = self.posteriors(counts, mechanism) if posteriors is None else posteriors
        if post.probas.shape != counts.shape:
            raise ValidationError(
                f"The posteriors cover {post.probas.shape} tasks x labels; the counts "
                f"{counts.shape}. Read them over the same tasks."
            )
        candidate = self.open_tasks(counts, post)
        if exclude is not None:
            exclude = np.asarray(exclude, dtype=bool)
            if exclude.shape != (n_tasks,):
                raise ValidationError(
                    f"'exclude' needs one flag per task ({n_tasks}). Got shape {exclude.shape}."
                )
            candidate &= ~exclude
        idx = np.flatnonzero(candidate)
        if idx.size == 0:
            return idx.astype(np.int64)
        n = counts.sum(axis=1)[idx]
        # Rounded so that tasks with the same counts tie exactly whatever the float noise.
        confidence = np.round(post.confidence[idx], 9)
        below = n < self.min_per_task
        if idx.size > room:
            # Only the first ``room`` in the order below are needed: keep the tasks whose
            # leading key (reports short of the minimum, then confidence) is at most the
            # room-th smallest, ties included, and sort those.
            lead = np.where(below, n - self.min_per_task, confidence)
            kth = np.partition(lead, room - 1)[room - 1]
            keep = lead <= kth
            idx, n, confidence, below = idx[keep], n[keep], confidence[keep], below[keep]
        jitter = check_rng(rng).random(idx.size)
        # lexsort's last key sorts first: below the minimum, then least settled, then fewest
        # reports, then at random.
        order = np.lexsort((jitter, n, confidence, np.where(below, n, 0), ~below))
        out: np.ndarray = idx[order[:room]].astype(np.int64)
        return out


class _Rows(NamedTuple):
    """The pooled fit's one part: the distinct rows of counts, how many tasks share each, and
    the channel with its row sums."""

    rows: np.ndarray
    weight: np.ndarray
    c_mat: np.ndarray
    rho: np.ndarray


def _estep(
    counts: np.ndarray, c_mat: np.ndarray, rho: np.ndarray, s: float, prior: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    k = c_mat.shape[0]
    d = (1.0 - s) / (k - 1)
    lik = np.maximum((s - d) * c_mat + d * rho[:, None], 1e-300)  # [r, l]
    scores = counts @ np.log(lik) + np.log(prior)
    scores -= scores.max(axis=1, keepdims=True)
    mu = np.exp(scores)
    mu /= mu.sum(axis=1, keepdims=True)
    return mu, lik


def _start_pass(part: _Rows, previous: Any, arg: Any) -> tuple[None, None]:
    """Nothing to read: the fit starts from the prior guess of the accuracy."""
    return None, None


def _estep_pass(part: _Rows, previous: Any, params: tuple[float, np.ndarray]) -> tuple[Any, Any]:
    """The rows' posteriors; statistics: the expected reports that are a worker's own answer
    and, over the answered rows, the expected truths."""
    s, prior = params
    mu, lik = _estep(part.rows, part.c_mat, part.rho, s, prior)
    stats = (part.rows * part.weight[:, None]).T @ mu  # [r, l]: expected reports r, truth l
    correct = float((stats * s * part.c_mat / lik).sum())
    answered = part.rows.sum(axis=1) > 0
    return mu, (correct, part.weight[answered] @ mu[answered])


class _PooledModel(Model):
    """The pooled one-coin model through the channel, fitted by EM on the distinct rows of
    counts: the parameters are the accuracy ``s`` (shrunk towards the policy's ``accuracy``)
    and the class prior (learned or uniform). Stops when neither moved by ``tol``."""

    start = staticmethod(_start_pass)
    step = staticmethod(_estep_pass)

    def __init__(self, policy: AdaptiveRedundancy, part: _Rows) -> None:
        super().__init__(policy.tol)
        self.policy = policy
        self.k = part.c_mat.shape[0]
        self.total = float((part.rows * part.weight[:, None]).sum())
        self.n_answered = part.weight[part.rows.sum(axis=1) > 0].sum()

    def init(self, stats: Any) -> tuple[float, np.ndarray]:
        return float(self.policy.accuracy), np.full(self.k, 1.0 / self.k)

    def step_params(self, params: tuple[float, np.ndarray]) -> tuple[float, np.ndarray]:
        self.current = params
        return params

    def objective(self, stats: Any) -> float:
        # The update is made here, where how far it moves (the objective) is known.
        s, prior = self.current
        correct, expected = stats
        k, accuracy = self.k, self.policy.accuracy
        new_s = (correct + PRIOR_ANSWERS * accuracy) / (self.total + PRIOR_ANSWERS)
        # Kept above 1/K: below it the labels' roles swap and the fit explains the answers by
        # workers who mostly pick a wrong label, which a target confidence cannot tell apart.
        new_s = min(max(new_s, 1.0 / k + 1e-3), 1.0 - 1e-9)
        new_prior = prior
        if self.policy.class_prior == "learned":
            new_prior = (expected + 1.0) / (self.n_answered + k)
        self.next = new_s, new_prior
        return max(abs(new_s - s), float(np.abs(new_prior - prior).max()))

    def m_step(self, stats: Any) -> tuple[float, np.ndarray]:
        return self.next

    def converged(self, n_iter: int, objective: list[float], stats: Any) -> bool:
        return objective[-1] < self.tol


def _distinct_rows(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``counts``, each task's row among them, and how many tasks share
    each: whole counts are packed into one integer per task first (one sort of integers,
    not of rows)."""
    top = float(counts.max()) + 1.0 if counts.size else 1.0
    k = counts.shape[1]
    if np.array_equal(counts, np.round(counts)) and k * np.log2(top) < 62:
        key = counts.astype(np.int64) @ (int(top) ** np.arange(k, dtype=np.int64))
        _, first, inverse, weight = np.unique(
            key, return_index=True, return_inverse=True, return_counts=True
        )
        return counts[first], inverse.reshape(-1), weight
    rows, inverse, weight = np.unique(counts, axis=0, return_inverse=True, return_counts=True)
    return rows, inverse.reshape(-1), weight


def _check_counts(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2 or counts.shape[1] < 2:
        raise ValidationError(
            "Report counts must be an (n_tasks, n_labels) array with at least 2 labels. Got "
            f"shape {counts.shape}."
        )
    if counts.size and not (np.isfinite(counts).all() and counts.min() >= 0):
        raise ValidationError("Report counts must be finite and non-negative.")
    return counts
