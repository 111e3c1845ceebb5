"""The hot loops of the EM estimators, as fused single passes over the answers.

Two backends compute the same things, each a :class:`Backend` that hands out its kernels by
name; the functions here look each kernel up on the running backend and never ask which one
it is:

- ``numba`` (installed with privtd; :mod:`._numba`): each kernel is one compiled pass over the
  answer arrays with no temporaries, which is what makes Dawid-Skene 50x faster than a pandas
  EM;
- ``numpy`` (:mod:`._numpy`): ``np.bincount`` scatter-adds and array expressions, with no set-up
  to pay: used for fits too small to earn back numba's set-up (:func:`choose_backend`), when
  numba is not installed, and when ``PRIVTD_BACKEND=numpy`` is set.

A fit runs one, picked by ``privtd._config``'s ``backend`` setting (``config_context``,
``set_config``, ``PRIVTD_BACKEND``) or, under ``"auto"``, by the fit's size. Each backend's
module is imported when it first runs a kernel, so numba is never imported by a fit on numpy.
Tests run every estimator under both (``set_backend``) and compare them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from ... import _config

__all__ = ["available_backends", "get_backend", "set_backend"]

#: Under the "auto" setting a fit runs numba's kernels when its work, answers x planned passes
#: (``Estimator._planned_passes``), reaches this, and numpy's below it. numba costs a one-time
#: set-up in each process (importing it, its compiler target, the threading layer, each kernel read
#: from the disk cache: 0.3-0.4 s before a 10,000-answer fit that numpy runs in 0.01 s; 1.1 s, the
#: import included, before a 200,000-answer fit on a busier machine), and seconds of compilation per
#: kernel on the first run after installing; on one thread its passes are about as fast as numpy's
#: at K = 2 and 1.3-1.5x faster at K = 4. Measured with ``PYTHONPATH=src python
#: benchmarks/bench_backend_choice.py`` (each fit in a fresh process, numba on one thread;
#: benchmarks/results/backend_choice.txt): Dawid-Skene at 2.35e7 still ran faster on numpy
#: (0.50-0.75 s against 0.60-0.95 s; with numba's import in the fit, 2.2 s against 2.4 s on a busier
#: machine), MACE broke even about 2e7 (1.1-1.4 s against 1.4 s; 2.6 s against 2.4 s) and numba won
#: at 5.1e7 (2.5 s against 2.7-3.0 s; 4.6 s against 6.3 s). The two backends agree to 1e-9
#: (tests/test_kernels.py).
NUMBA_MIN_WORK = 30_000_000


class Backend(Protocol):
    """A set of kernels that compute the same things: what a fit runs on."""

    name: str
    #: Whether the kernels read each answer's task code (``TaskLayout.task``); the compiled
    #: ones walk each task's slice of ``start`` instead.
    reads_task_codes: bool

    def kernel(self, name: str) -> Callable[..., Any]:
        """The function for the kernel ``name``, taking the arguments that the function of the
        same name here passes."""
        ...

    def use_one_thread(self) -> None:
        """Run the kernels on one thread from now on, in this process (a cluster's worker,
        where the shards are the parallelism)."""
        ...


def _table(module: str) -> dict[str, Callable[..., Any]]:
    kernels: dict[str, Callable[..., Any]] = importlib.import_module(module, __name__).KERNELS
    return kernels


class _NumpyBackend:
    name = "numpy"
    reads_task_codes = True

    def kernel(self, name: str) -> Callable[..., Any]:
        return _table("._numpy")[name]

    def use_one_thread(self) -> None:
        """Nothing to do: numpy's kernels run on one thread."""


class _NumbaBackend:
    name = "numba"
    reads_task_codes = False

    def kernel(self, name: str) -> Callable[..., Any]:
        # The first call imports numba (with ._numba); each kernel compiles on its first call,
        # or loads from the disk cache.
        return _table("._numba")[name]

    def use_one_thread(self) -> None:
        numba = importlib.import_module("numba")
        if numba.get_num_threads() != 1:
            numba.set_num_threads(1)


BACKENDS: dict[str, Backend] = {"numpy": _NumpyBackend(), "numba": _NumbaBackend()}

#: The backend of the fit running in each thread (:func:`backend_for`).
_local = threading.local()


def available_backends() -> list[str]:
    return ["numpy"] + (["numba"] if _config.NUMBA_INSTALLED else [])


def choose_backend(n_answers: int, passes: int = 1) -> str:
    """The backend a fit of ``n_answers`` answers and ``passes`` planned passes over them runs
    on: the configured one (``privtd._config``: ``config_context``, ``set_config``,
    ``PRIVTD_BACKEND``) unless it is "auto"; else numba when installed and the work
    ``n_answers * passes`` reaches :data:`NUMBA_MIN_WORK`, else numpy. The fit's size alone
    decides, not what ran before it in the process. The two backends agree to 1e-9, not bit for
    bit: configure one where fits must repeat exactly."""
    configured: str = _config.get_config()["backend"]
    if configured != "auto":
        return configured
    big = n_answers * passes >= NUMBA_MIN_WORK
    return "numba" if big and _config.NUMBA_INSTALLED else "numpy"


def current_backend() -> Backend:
    """The backend the kernels called from this thread run on now: the running fit's
    (:func:`backend_for`); outside a fit the configured one, and under "auto" numba where
    installed, as for a fit of unknown size (a cluster's passes)."""
    running: Backend | None = getattr(_local, "backend", None)
    if running is not None:
        return running
    configured: str = _config.get_config()["backend"]
    return BACKENDS[available_backends()[-1] if configured == "auto" else configured]


def get_backend() -> str:
    """The name of :func:`current_backend`."""
    return current_backend().name


@contextmanager
def backend_for(n_answers: int, passes: int = 1) -> Iterator[str]:
    """Run the enclosed fit, in this thread, on :func:`choose_backend`'s backend for its
    answers and planned passes; yields the backend's name. A fit started inside another fit
    keeps the outer fit's backend, so that one fit never mixes the two."""
    before: Backend | None = getattr(_local, "backend", None)
    running = before or BACKENDS[choose_backend(n_answers, passes)]
    _local.backend = running
    try:
        yield running.name
    finally:
        _local.backend = before


def set_backend(name: str) -> None:
    """Pick the kernel backend for the fits this thread runs: "numba" (needs numba), "numpy",
    or "auto" (each fit by its size, :func:`choose_backend`). The same as
    ``privtd._config.set_config(backend=name)``; ``config_context`` sets it for a block."""
    _config.set_config(backend=name)


def _kernel(name: str) -> Callable[..., Any]:
    return current_backend().kernel(name)


def gather_scatter(dst: np.ndarray, src: np.ndarray, table: np.ndarray, n_out: int) -> np.ndarray:
    """``out[dst[i], :] += table[src[i], :]`` for every answer ``i``; ``out`` has ``n_out`` rows."""
    return _kernel("gather_scatter")(dst, src, np.ascontiguousarray(table), n_out)


def worker_votes(
    t: np.ndarray, x: np.ndarray, w: np.ndarray, worker_weight: np.ndarray, n_t: int, k: int
) -> np.ndarray:
    """``out[t[i], x[i]] += worker_weight[w[i]]``: a vote matrix weighted per worker."""
    return _kernel("worker_votes")(
        t, x, w, np.ascontiguousarray(worker_weight, dtype=float), n_t, k
    )


def pick_sum(t: np.ndarray, x: np.ndarray, w: np.ndarray, mu: np.ndarray, n_w: int) -> np.ndarray:
    """``out[w[i]] += mu[t[i], x[i]]``: per worker, the posterior mass of the labels it gave."""
    return _kernel("pick_sum")(t, x, w, np.ascontiguousarray(mu), n_w)


def worker_sum(t: np.ndarray, w: np.ndarray, worker_value: np.ndarray, n_t: int) -> np.ndarray:
    """``out[t[i]] += worker_value[w[i]]``: per task, a sum of per-worker values."""
    return _kernel("worker_sum")(t, w, np.ascontiguousarray(worker_value, dtype=float), n_t)


class TaskLayout:
    """The answers sorted by task once per fit, with each task's slice ``start[q]:start[q+1]``.

    Sorting lets the compiled kernels sum a task's answers in registers instead of scattering
    into memory; ``np.argsort(kind="stable")`` is skipped when the input is already sorted.
    """

    def __init__(self, task: np.ndarray, worker: np.ndarray, value: np.ndarray, n_tasks: int):
        if task.size > 1 and not bool(np.all(task[1:] >= task[:-1])):
            order = np.argsort(task, kind="stable")
            task, worker, value = task[order], worker[order], value[order]
        self.task, self.worker, self.value = task, worker, value
        self.start = np.zeros(n_tasks + 1, dtype=np.int64)
        np.cumsum(np.bincount(task, minlength=n_tasks), out=self.start[1:])


def ds_step(
    layout: TaskLayout,
    wx: np.ndarray,
    log_conf: np.ndarray,
    log_prior: np.ndarray,
    gold: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One Dawid-Skene EM iteration: E-step with ``log_conf`` (rows ``w * K + answer``) and
    ``log_prior``, then the M-step counts. Returns posteriors, counts ``(W * K, K)``, the
    posteriors' column sums, and the log-likelihood. ``gold[q] >= 0`` fixes task ``q``."""
    mu, counts, prior_sum, loglik = _kernel("ds_step")(
        layout.task, layout.start, wx, np.ascontiguousarray(log_conf), log_prior, gold
    )
    return mu, counts, prior_sum, float(loglik)


def one_coin_step(
    layout: TaskLayout,
    log_right: np.ndarray,
    log_wrong: np.ndarray,
    log_prior: np.ndarray,
    gold: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One one-coin EM iteration; returns posteriors, per-worker summed posterior of the given
    labels, the posteriors' column sums, and the log-likelihood."""
    mu, skill, prior_sum, loglik = _kernel("one_coin_step")(
        layout.task,
        layout.start,
        layout.worker,
        layout.value,
        log_right,
        log_wrong,
        log_prior,
        gold,
    )
    return mu, skill, prior_sum, float(loglik)


def label_counts(t: np.ndarray, x: np.ndarray, n_t: int, k: int) -> np.ndarray:
    """``out[t, k]`` = number of answers to task ``t`` with label ``k``."""
    return _kernel("label_counts")(t, x, n_t, k)


def agreement(
    t: np.ndarray, w: np.ndarray, x: np.ndarray, truth: np.ndarray, n_w: int
) -> np.ndarray:
    """Per worker, how many of its answers equal the task's current label ``truth[t]``."""
    return _kernel("agreement")(t, w, x, truth, n_w)


def vote_step(
    layout: TaskLayout, weight: np.ndarray, truth: np.ndarray, gold: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """One weighted-vote iteration with per-worker ``weight``: new labels (ties to the smallest
    code, gold fixed), per-worker agreement counts with them, the summed log-posterior of the
    chosen labels, and how many labels changed from ``truth``."""
    new, matches, log_post, changed = _kernel("vote_step")(
        layout.task,
        layout.start,
        layout.worker,
        layout.value,
        np.ascontiguousarray(weight, dtype=float),
        truth,
        gold,
        k,
    )
    return new, matches, float(log_post), int(changed)


def sort_by_task_then_value(task: np.ndarray, value: np.ndarray, n_tasks: int) -> np.ndarray:
    """The permutation sorting answers by task, and by value within a task.

    Compiled: a counting sort by task and a small sort per task, several times faster than
    ``np.lexsort`` (the numpy path) on 1e7 answers.
    """
    start = np.zeros(n_tasks + 1, dtype=np.int64)
    np.cumsum(np.bincount(task, minlength=n_tasks), out=start[1:])
    is_sorted = task.size < 2 or bool(np.all(task[1:] >= task[:-1]))
    return _kernel("order_by_task_then_value")(task, value, start, is_sorted)


def worker_loss(
    t: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    truth: np.ndarray,
    inv_scale: np.ndarray,
    squared: bool,
    n_w: int,
) -> np.ndarray:
    """Per worker, ``sum (x - truth[t])^2 * inv_scale[t]`` (or the absolute deviation)."""
    return _kernel("worker_loss")(t, w, x, truth, inv_scale, bool(squared), n_w)


def weighted_task_sums(
    t: np.ndarray, w: np.ndarray, x: np.ndarray, weight: np.ndarray, n_t: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per task, ``sum weight[w] * x`` and ``sum weight[w]``: a weighted mean's two halves."""
    return _kernel("weighted_task_sums")(t, w, x, np.ascontiguousarray(weight, dtype=float), n_t)


def grid_posterior(
    coef: np.ndarray, basis: np.ndarray, log_prior: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each worker's posterior over a grid of cells, ``log p[u, c] = log_prior[c] + coef[u, 0]
    basis[c, 0] + coef[u, 1] basis[c, 1]`` normalised, reduced without materialising it: per
    worker the expectations of ``targets`` (cells x m, m >= 1), the posterior averaged over
    workers, and the log of each worker's normaliser. Cells below ``exp(-50)`` of a worker's
    top cell count as 0 (under 2e-22 of it)."""
    return _kernel("grid_posterior")(*_contiguous_floats(coef, basis, log_prior, targets))


def _contiguous_floats(*arrays: np.ndarray) -> list[np.ndarray]:
    # The compiled kernels are typed for C-contiguous float64 arrays.
    return [np.ascontiguousarray(a, dtype=float) for a in arrays]


def aware_ds_workers(
    counts: np.ndarray,
    pi: np.ndarray,
    q: np.ndarray,
    channel: tuple[np.ndarray, np.ndarray],
    log_h: np.ndarray,
    alpha: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """AwareDawidSkene's worker step: new own confusions from the flip posteriors ``q`` of the
    last step, then the flip posteriors and expected log confusions under them, and the
    workers' part of the EM's bound there. Each is a coordinate step on the bound; the flips
    are not re-fitted to the new counts before the confusions, as that would cost a second set
    of ``workers x flips x K^2`` logarithms for a step that, at a fixed point, changes
    nothing."""
    scale, spread = channel
    pi, q, log_conf, bound = _kernel("aware_ds_workers")(
        *_contiguous_floats(counts, pi, q, scale, spread, log_h, alpha)
    )
    return pi, q, log_conf, float(bound)


def aware_ds_jump(
    start: tuple[np.ndarray, np.ndarray, np.ndarray],
    first: tuple[np.ndarray, np.ndarray, np.ndarray],
    second: tuple[np.ndarray, np.ndarray, np.ndarray],
    learned_prior: bool,
    channel: tuple[np.ndarray, np.ndarray],
    log_h: np.ndarray,
    alpha: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """AwareDawidSkene's SQUAREM jump from three ``(pi, q, class prior)`` states: the jumped
    state with its expected log confusions and the workers' part of the EM's bound."""
    states = _contiguous_floats(*start, *first, *second)
    pi, q, prior, log_conf, bound = _kernel("aware_ds_jump")(
        *states, bool(learned_prior), *_contiguous_floats(*channel, log_h, alpha)
    )
    return pi, q, prior, log_conf, float(bound)


def aware_gaussian_step(
    t: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    counts: np.ndarray,
    truth: np.ndarray,
    post_var: np.ndarray,
    fallback: np.ndarray,
    gold: tuple[np.ndarray, np.ndarray],
    conv: np.ndarray,
    prior: np.ndarray,
    tau: np.ndarray,
    share: float,
    work: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """One of AwareGaussian's iterations: the workers' expected squared residuals under
    ``truth`` and its posterior variances ``post_var``, their posteriors over the ``tau``
    grid under the prior ``prior @ conv``, G's update, then the truths from the workers'
    weights (``fallback`` where they sum to 0, gold fixed). Updates ``truth`` in place; returns
    the truths' posterior variances, the new G, the summed log normalisers of the workers'
    posteriors and the largest move of a truth in its posterior standard deviations. ``work``:
    two arrays of a task's size for the compiled step to reuse."""
    gold_index, gold_value = gold
    post_var, prior, log_norm, change = _kernel("aware_gaussian_step")(
        t,
        w,
        *_contiguous_floats(x, counts),
        truth,
        *_contiguous_floats(post_var, fallback),
        np.ascontiguousarray(gold_index, dtype=np.int64),
        *_contiguous_floats(gold_value, conv, prior, tau),
        float(share),
        *work,
    )
    return post_var, prior, float(log_norm), float(change)


def null_task_constants(n_q: np.ndarray, rate: np.ndarray, prior: np.ndarray) -> Any:
    """What every step of AwareNull (:func:`aware_null_step`) reads besides the tasks' state,
    computed once a fit from the tasks' report cells ``n_q`` and the prior (``rate``,
    ``prior``): the backend's own, for the caller to pass back unread."""
    return _kernel("null_task_constants")(n_q, rate, prior)


def aware_null_step(
    counts: np.ndarray,
    channel: np.ndarray,
    rate: np.ndarray,
    prior: np.ndarray,
    constants: Any,
    state: tuple[np.ndarray, np.ndarray, np.ndarray],
    low: float,
    median: bool,
    estimate: str,
    tol: float,
) -> tuple[float, float, int]:
    """One of AwareNull's accelerated steps on every task still stepping (``constants`` from
    :func:`null_task_constants`); a task's truth summarises its posterior predictive answer
    over the scores from ``low``, by its median or its mean, and the task stops once that moves
    by less than ``tol``. Updates the ``state`` (expected counts, truths, which tasks still
    step) in place; returns the summed log-likelihood of the tasks that stepped, that of those
    that stopped (in task order) and how many still step."""
    total, stopped, left = _kernel("aware_null_step")(
        counts, channel, rate, prior, constants, state, low, median, estimate, tol
    )
    return float(total), float(stopped), int(left)
