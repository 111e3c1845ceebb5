"""The hot loops of the EM estimators, as fused single passes over the answers.

Two backends compute the same things:

- ``numba`` (installed with privtd): each kernel is one compiled pass over the answer
  arrays with no temporaries, which is what makes Dawid-Skene 50x faster than a pandas EM;
- ``numpy``: ``np.bincount`` scatter-adds, with no set-up to pay: used for fits too small to
  earn back numba's set-up (:func:`choose_backend`), when numba is not installed, and when
  ``PRIVTD_BACKEND=numpy`` is set.

Each is a :class:`Backend` object; a fit runs one, picked by ``privtd._config``'s ``backend``
setting (``config_context``, ``set_config``, ``PRIVTD_BACKEND``) or, under ``"auto"``, by the
fit's size. numba itself is imported when its backend first runs a kernel, not with this module.
Tests run every estimator under both (``set_backend``) and compare them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from .. import _config
from ..errors import ValidationError


class _NumbaOnDemand:
    """numba's module before the numba backend first runs: any attribute (``numba.prange``,
    ``_kernels.numba.set_num_threads``) imports it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and inspect probing: not a reason to import
            raise AttributeError(name)
        return getattr(_load_numba(), name)


#: numba's module once imported (:func:`_load_numba`); until then a stand-in that imports it on
#: first use; None where numba is not installed.
numba: Any = _NumbaOnDemand() if _config.NUMBA_INSTALLED else None

__all__ = ["available_backends", "get_backend", "set_backend"]


# ---------------------------------------------------------------------- numpy versions
def _gather_scatter_np(
    dst: np.ndarray, src: np.ndarray, table: np.ndarray, n_out: int
) -> np.ndarray:
    return _gather_scatter_rows_np(
        dst.astype(np.intp, copy=False), src.astype(np.intp, copy=False), table.T, n_out
    ).T.copy()


def _gather_scatter_rows_np(
    dst: np.ndarray, src: np.ndarray, table_t: np.ndarray, n_out: int
) -> np.ndarray:
    """``out[c, dst[i]] += table_t[c, src[i]]``, label by label (K is small): ``(K, n_out)``.

    Works on label-major tables: ``take`` from one contiguous row then one ``bincount`` per
    label, 3 to 4 times faster than gathering ``(n, K)`` rows and passing ``bincount`` their
    strided columns (it copies them), with the same sums in the same order. Indices in
    ``np.intp``: ``take`` and ``bincount`` would otherwise convert them on every call."""
    out = np.empty((table_t.shape[0], n_out))
    for c in range(table_t.shape[0]):
        row = np.ascontiguousarray(table_t[c])
        out[c] = np.bincount(dst, weights=row.take(src), minlength=n_out)
    return out


def _worker_votes_np(
    t: np.ndarray, x: np.ndarray, w: np.ndarray, worker_weight: np.ndarray, n_t: int, k: int
) -> np.ndarray:
    flat = t.astype(np.int64) * k + x
    return np.bincount(flat, weights=worker_weight[w], minlength=n_t * k).reshape(n_t, k)


def _pick_sum_np(
    t: np.ndarray, x: np.ndarray, w: np.ndarray, mu: np.ndarray, n_w: int
) -> np.ndarray:
    return np.bincount(w, weights=mu[t, x], minlength=n_w)


def _worker_sum_np(t: np.ndarray, w: np.ndarray, worker_value: np.ndarray, n_t: int) -> np.ndarray:
    return np.bincount(t, weights=worker_value[w], minlength=n_t)


def _softmax_loglik_np(log_rho: np.ndarray) -> float:
    top = log_rho.max(axis=1, keepdims=True)
    log_rho -= top
    np.exp(log_rho, out=log_rho)
    total = log_rho.sum(axis=1, keepdims=True)
    log_rho /= total
    return float((np.log(total) + top).sum())


def _ds_step_np(
    t: np.ndarray,
    start: np.ndarray,
    wx: np.ndarray,
    log_conf: np.ndarray,
    log_prior: np.ndarray,
    gold: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    # Label-major throughout ((K, tasks) rows, not (tasks, K)): the gathers, the softmax and
    # the sums each run over contiguous rows instead of reducing along a K-wide axis, which
    # numpy does slowly; one transpose back at the end. 3-4x faster per pass at K = 2-4
    # (benchmarks/bench_numpy_ds_step.py).
    n_t = start.shape[0] - 1
    t, wx = t.astype(np.intp, copy=False), wx.astype(np.intp, copy=False)
    rho = _gather_scatter_rows_np(t, wx, log_conf.T, n_t)
    rho += log_prior[:, None]
    top = rho.max(axis=0)
    rho -= top
    np.exp(rho, out=rho)
    total = rho.sum(axis=0)
    rho /= total
    loglik = float((np.log(total) + top).sum())
    fixed = gold >= 0
    if fixed.any():
        rho[:, fixed] = 0.0
        rho[gold[fixed], np.flatnonzero(fixed)] = 1.0
    counts = _gather_scatter_rows_np(wx, t, rho, log_conf.shape[0])
    return rho.T.copy(), counts.T.copy(), rho.sum(axis=1), loglik


def _one_coin_step_np(
    t: np.ndarray,
    start: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    log_right: np.ndarray,
    log_wrong: np.ndarray,
    log_prior: np.ndarray,
    gold: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    n_t, k = start.shape[0] - 1, log_prior.shape[0]
    log_rho = _worker_votes_np(t, x, w, log_right - log_wrong, n_t, k)
    log_rho += _worker_sum_np(t, w, log_wrong, n_t)[:, None] + log_prior
    loglik = _softmax_loglik_np(log_rho)
    _fix_gold(log_rho, gold)
    skill = _pick_sum_np(t, x, w, log_rho, log_right.shape[0])
    return log_rho, skill, log_rho.sum(axis=0), loglik


def _worker_loss_np(
    t: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    truth: np.ndarray,
    inv_scale: np.ndarray,
    squared: bool,
    n_w: int,
) -> np.ndarray:
    resid = x - truth[t]
    d = resid * resid if squared else np.abs(resid)
    return np.bincount(w, weights=d * inv_scale[t], minlength=n_w)


def _weighted_task_sums_np(
    t: np.ndarray, w: np.ndarray, x: np.ndarray, weight: np.ndarray, n_t: int
) -> tuple[np.ndarray, np.ndarray]:
    per_answer = weight[w]
    return (
        np.bincount(t, weights=per_answer * x, minlength=n_t),
        np.bincount(t, weights=per_answer, minlength=n_t),
    )


def _order_by_task_then_value_np(
    task: np.ndarray, value: np.ndarray, start: np.ndarray, is_sorted: bool
) -> np.ndarray:
    return np.lexsort((value, task))


def _vote_step_np(
    t: np.ndarray,
    start: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    weight: np.ndarray,
    truth: np.ndarray,
    gold: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray, float, int]:
    n_t = start.shape[0] - 1
    votes = _worker_votes_np(t, x, w, weight, n_t, k)
    new = votes.argmax(axis=1)
    fixed = gold >= 0
    new[fixed] = gold[fixed]
    top = votes.max(axis=1)
    log_norm = top + np.log(np.exp(votes - top[:, None]).sum(axis=1))
    log_post = float((votes[np.arange(n_t), new] - log_norm).sum())
    matches = np.bincount(w, weights=new[t] == x, minlength=weight.shape[0])
    return new, matches, log_post, int((new != truth).sum())


def _label_counts_np(t: np.ndarray, x: np.ndarray, n_t: int, k: int) -> np.ndarray:
    flat = t.astype(np.int64) * k + x
    return np.bincount(flat, minlength=n_t * k).reshape(n_t, k).astype(np.float64)


def _agreement_np(
    t: np.ndarray, w: np.ndarray, x: np.ndarray, truth: np.ndarray, n_w: int
) -> np.ndarray:
    return np.bincount(w, weights=truth[t] == x, minlength=n_w)


def _fix_gold(mu: np.ndarray, gold: np.ndarray) -> None:
    fixed = gold >= 0
    if fixed.any():
        mu[fixed] = 0.0
        mu[fixed, gold[fixed]] = 1.0


def _grid_posterior_np(
    coef: np.ndarray, basis: np.ndarray, log_prior: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    logp = coef @ basis.T + log_prior
    top = logp.max(axis=1, keepdims=True)
    post = np.exp(logp - top)
    total = post.sum(axis=1, keepdims=True)
    post /= total
    return post @ targets, post.mean(axis=0), (top + np.log(total))[:, 0]


def _aware_gaussian_step_np(
    t: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    counts: np.ndarray,
    truth: np.ndarray,
    post_var: np.ndarray,
    fallback: np.ndarray,
    gold_index: np.ndarray,
    gold_value: np.ndarray,
    conv: np.ndarray,
    prior: np.ndarray,
    tau: np.ndarray,
    share: float,
) -> tuple[np.ndarray, np.ndarray, float, float]:
    n_t, n_w = truth.size, counts.size
    # The workers' expected squared residuals, E[(x - t)^2] = (x - m)^2 + 1 / P.
    sq = _worker_loss_np(t, w, x, truth, np.ones(n_t), True, n_w)
    sq += _worker_sum_np(w, t, post_var, n_w)
    pi = prior @ conv
    basis = np.column_stack([-0.5 * np.log(tau), -0.5 / tau])
    log_prior = np.log(np.maximum(pi, 1e-300))
    coef = np.column_stack([counts, sq])
    expect, mean_post, log_norm = _grid_posterior_np(coef, basis, log_prior, (1.0 / tau)[:, None])
    # G's update: each point's share of the workers' mean posterior, mixed with the uniform
    # start.
    ratio = mean_post / np.maximum(pi, 1e-300)
    uniform = np.full(prior.size, 1.0 / prior.size)
    prior = (1.0 - share) * prior * (conv @ ratio) + share * uniform
    prior /= prior.sum()
    total, precision = _weighted_task_sums_np(t, w, x, np.ascontiguousarray(expect[:, 0]), n_t)
    new = np.divide(total, precision, out=fallback.copy(), where=precision > 0)
    post_var = np.divide(1.0, precision, out=np.full(n_t, np.inf), where=precision > 0)
    new[gold_index] = gold_value
    # In units of each truth's posterior standard deviation, 1 / sqrt(P). (NaN, a task without
    # answers, counts as no change.)
    change = float(np.fmax.reduce(np.abs(new - truth) * np.sqrt(precision), initial=0.0))
    truth[:] = new
    return post_var, prior, float(log_norm.sum()), change


# ---------------------------------------------------------------------- numba versions
#: psi(x) ~ log x - 1 / (2x) - sum_n B_2n / (2n x^2n), the coefficients -B_2n / 2n from n = 7
#: down to 1 (Horner's order).
_PSI_SERIES = (-1 / 12, 691 / 32760, -1 / 132, 1 / 240, -1 / 252, 1 / 120, -1 / 12)


class _Compiled:
    """A numba kernel, jitted when numba is imported (:func:`_load_numba`), which its first
    call does; then compiled once and loaded from disk by later processes (next to this file,
    else under ``NUMBA_CACHE_DIR`` or the user's cache folder). Where none of those is writable
    numba refuses ``cache=True``; the kernels then compile in every process (seconds) instead
    of failing."""

    def __init__(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        self.func, self.options = func, options
        self.dispatcher: Any = None

    def jit(self, module: Any) -> None:
        try:
            self.dispatcher = module.njit(cache=True, **self.options)(self.func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            self.dispatcher = module.njit(**self.options)(self.func)

    def __call__(self, *args: Any) -> Any:
        if self.dispatcher is None:
            _load_numba()
        return self.dispatcher(*args)


#: Every kernel :func:`_cached_jit` wrapped, in definition order.
_COMPILED: list[_Compiled] = []


def _cached_jit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)``, applied on numba's import (:class:`_Compiled`)."""

    def wrap(func: Callable[..., Any]) -> Any:
        _COMPILED.append(_Compiled(func, options))
        return _COMPILED[-1]

    return wrap


if numba is not None:
    # Module-level (not closures) so numba can cache the compiled code on disk.
    _jit = _cached_jit(nogil=True)
    _par = _cached_jit(nogil=True, parallel=True)

    @_jit
    def _gather_scatter_nb(dst, src, table, n_out):
        k = table.shape[1]
        out = np.zeros((n_out, k))
        for i in range(dst.shape[0]):
            d, s = dst[i], src[i]
            for c in range(k):
                out[d, c] += table[s, c]
        return out

    @_jit
    def _worker_votes_nb(t, x, w, worker_weight, n_t, k):
        out = np.zeros((n_t, k))
        for i in range(t.shape[0]):
            out[t[i], x[i]] += worker_weight[w[i]]
        return out

    @_jit
    def _pick_sum_nb(t, x, w, mu, n_w):
        out = np.zeros(n_w)
        for i in range(t.shape[0]):
            out[w[i]] += mu[t[i], x[i]]
        return out

    @_jit
    def _worker_sum_nb(t, w, worker_value, n_t):
        out = np.zeros(n_t)
        for i in range(t.shape[0]):
            out[t[i]] += worker_value[w[i]]
        return out

    @_jit
    def _grid_row_nb(a0, a1, basis, log_prior, targets, row, expect, mean_post):
        # One worker's posterior over the cells, log p[c] = log_prior[c] + a0 basis[c, 0] +
        # a1 basis[c, 1] normalised: writes E[targets] to expect, adds the posterior to
        # mean_post, returns the log of the normaliser.
        n_c, n_m = basis.shape[0], targets.shape[1]
        top = -np.inf
        for c in range(n_c):
            v = log_prior[c] + a0 * basis[c, 0] + a1 * basis[c, 1]
            row[c] = v
            top = max(top, v)
        # A cell 50 below the top weighs under 2e-22 of it: counting it as 0 saves its exp, the
        # kernel's cost, and moves no fit measurably (the numpy path keeps every cell; the
        # backends agree to 1e-9). Only the span from the first to the last cell above that is
        # summed (a worker's posterior is narrow).
        first, last = n_c, -1
        for c in range(n_c):
            row[c] -= top
            if row[c] > -50.0:
                first = min(first, c)
                last = c
        total = 0.0
        for c in range(first, last + 1):
            row[c] = np.exp(row[c]) if row[c] > -50.0 else 0.0
            total += row[c]
        inv = 1.0 / total
        for m in range(n_m):
            acc = 0.0
            for c in range(first, last + 1):
                acc += row[c] * targets[c, m]
            expect[m] = acc * inv
        for c in range(first, last + 1):
            mean_post[c] += row[c] * inv
        return top + np.log(total)

    @_jit
    def _grid_posterior_nb(coef, basis, log_prior, targets):
        n_w = coef.shape[0]
        expect = np.zeros((n_w, targets.shape[1]))
        mean_post = np.zeros(basis.shape[0])
        log_norm = np.empty(n_w)
        row = np.empty(basis.shape[0])
        for u in range(n_w):
            log_norm[u] = _grid_row_nb(
                coef[u, 0], coef[u, 1], basis, log_prior, targets, row, expect[u], mean_post
            )
        return expect, mean_post / max(n_w, 1), log_norm

    @_jit
    def _aware_gaussian_step_nb(
        t,
        w,
        x,
        counts,
        m,
        post_var,
        fallback,
        gold_index,
        gold_value,
        conv,
        g,
        tau,
        share,
        num,
        den,
    ):
        n_t, n_w, n_c, n_k = m.shape[0], counts.shape[0], tau.shape[0], g.shape[0]
        basis = np.empty((n_c, 2))
        targets = np.empty((n_c, 1))
        for c in range(n_c):
            basis[c, 0] = -0.5 * np.log(tau[c])
            basis[c, 1] = -0.5 / tau[c]
            targets[c, 0] = 1.0 / tau[c]
        weight = np.empty((n_w, 1))
        row, pi, log_prior = np.empty(n_c), np.zeros(n_c), np.empty(n_c)
        mean_post, ratio = np.zeros(n_c), np.empty(n_c)
        # The workers' expected squared residuals, E[(x - t)^2] = (x - m)^2 + 1 / P.
        sq = np.zeros(n_w)
        for i in range(t.shape[0]):
            r = x[i] - m[t[i]]
            sq[w[i]] += r * r + post_var[t[i]]
        for k in range(n_k):
            for c in range(n_c):
                pi[c] += g[k] * conv[k, c]
        for c in range(n_c):
            log_prior[c] = np.log(max(pi[c], 1e-300))
        total = 0.0
        for u in range(n_w):
            total += _grid_row_nb(
                counts[u], sq[u], basis, log_prior, targets, row, weight[u], mean_post
            )
        # G's update: each point's share of the workers' mean posterior, mixed with the
        # uniform start.
        for c in range(n_c):
            ratio[c] = mean_post[c] / n_w / max(pi[c], 1e-300)
        new_g = np.empty(n_k)
        g_sum = 0.0
        for k in range(n_k):
            back = 0.0
            for c in range(n_c):
                back += conv[k, c] * ratio[c]
            new_g[k] = (1.0 - share) * g[k] * back + share / n_k
            g_sum += new_g[k]
        new_g /= g_sum
        # num and den: the caller's, reused by every iteration (fresh arrays of a task's size
        # cost page faults more than the pass).
        num[:] = 0.0
        den[:] = 0.0
        for i in range(t.shape[0]):
            v = weight[w[i], 0]
            num[t[i]] += v * x[i]
            den[t[i]] += v
        for q in range(n_t):
            post_var[q] = 1.0 / den[q] if den[q] > 0.0 else np.inf
            num[q] = num[q] / den[q] if den[q] > 0.0 else fallback[q]
        for j in range(gold_index.shape[0]):
            num[gold_index[j]] = gold_value[j]
        change = 0.0  # in units of each truth's posterior standard deviation, 1 / sqrt(P)
        for q in range(n_t):
            if den[q] > 0.0:
                change = max(change, abs(num[q] - m[q]) * np.sqrt(den[q]))
            m[q] = num[q]
        return post_var, new_g, total, change

    @_jit
    def _finish_row_nb(row, k, gold_label):
        """Softmax ``row`` in place (one-hot when gold); returns (max, normaliser).

        The largest entry needs no exp (it is exp(0) = 1), so K = 2 costs one exp per task.
        """
        top_c = 0
        for c in range(1, k):
            if row[c] > row[top_c]:
                top_c = c
        top = row[top_c]
        total = 1.0
        for c in range(k):
            if c != top_c:
                row[c] = np.exp(row[c] - top)
                total += row[c]
        row[top_c] = 1.0
        inv = 1.0 / total
        for c in range(k):
            if gold_label < 0:
                row[c] *= inv
            else:
                row[c] = 1.0 if c == gold_label else 0.0
        return top, total

    @_jit
    def _add_loglik_nb(top, total, state):
        # sum(log total) as a running product with a separate exponent: one multiply per task
        # instead of one log. total is in [1, K], so the product overflows only every ~400 tasks.
        state[0] += top
        state[1] *= total
        if state[1] > 1e200:
            state[1] *= 1e-200
            state[0] += 460.51701859880916  # log(1e200)

    @_par
    def _ds_step_nb(t, start, wx, log_conf, log_prior, gold, n_chunks):
        # One pass per EM iteration. Answers are sorted by task, so each task's E-step sum stays
        # in registers and its posterior goes straight into the next M-step's counts. Tasks are
        # split into a fixed number of blocks (one private count table each), so results do not
        # depend on the number of threads.
        n_t, k = start.shape[0] - 1, log_prior.shape[0]
        mu = np.empty((n_t, k))
        counts = np.zeros((n_chunks, log_conf.shape[0], k))
        prior_sum = np.zeros((n_chunks, k))
        loglik = np.zeros((n_chunks, 2))
        for ch in numba.prange(n_chunks):
            row = np.empty(k)
            state = np.array([0.0, 1.0])
            for q in range(ch * n_t // n_chunks, (ch + 1) * n_t // n_chunks):
                for c in range(k):
                    row[c] = log_prior[c]
                for i in range(start[q], start[q + 1]):
                    s = wx[i]
                    for c in range(k):
                        row[c] += log_conf[s, c]
                top, total = _finish_row_nb(row, k, gold[q])
                _add_loglik_nb(top, total, state)
                for c in range(k):
                    mu[q, c] = row[c]
                    prior_sum[ch, c] += row[c]
                for i in range(start[q], start[q + 1]):
                    s = wx[i]
                    for c in range(k):
                        counts[ch, s, c] += row[c]
            loglik[ch, 0] = state[0] + np.log(state[1])
        return mu, counts.sum(axis=0), prior_sum.sum(axis=0), loglik[:, 0].sum()

    @_par
    def _one_coin_step_nb(t, start, w, x, log_right, log_wrong, log_prior, gold, n_chunks):
        n_t, k = start.shape[0] - 1, log_prior.shape[0]
        mu = np.empty((n_t, k))
        skill = np.zeros((n_chunks, log_right.shape[0]))
        prior_sum = np.zeros((n_chunks, k))
        loglik = np.zeros(n_chunks)
        for ch in numba.prange(n_chunks):
            row = np.empty(k)
            state = np.array([0.0, 1.0])
            for q in range(ch * n_t // n_chunks, (ch + 1) * n_t // n_chunks):
                base = 0.0
                for c in range(k):
                    row[c] = log_prior[c]
                for i in range(start[q], start[q + 1]):
                    u = w[i]
                    base += log_wrong[u]
                    row[x[i]] += log_right[u] - log_wrong[u]
                for c in range(k):
                    row[c] += base
                top, total = _finish_row_nb(row, k, gold[q])
                _add_loglik_nb(top, total, state)
                for c in range(k):
                    mu[q, c] = row[c]
                    prior_sum[ch, c] += row[c]
                for i in range(start[q], start[q + 1]):
                    skill[ch, w[i]] += row[x[i]]
            loglik[ch] = state[0] + np.log(state[1])
        return mu, skill.sum(axis=0), prior_sum.sum(axis=0), loglik.sum()

    @_jit
    def _worker_loss_nb(t, w, x, truth, inv_scale, squared, n_w):
        out = np.zeros(n_w)
        for i in range(t.shape[0]):
            r = x[i] - truth[t[i]]
            out[w[i]] += (r * r if squared else abs(r)) * inv_scale[t[i]]
        return out

    @_jit
    def _weighted_task_sums_nb(t, w, x, weight, n_t):
        num = np.zeros(n_t)
        den = np.zeros(n_t)
        for i in range(t.shape[0]):
            v = weight[w[i]]
            num[t[i]] += v * x[i]
            den[t[i]] += v
        return num, den

    @_jit
    def _order_by_task_then_value_nb(task, value, start, is_sorted):
        # A stable O(n) counting sort by task (skipped when already sorted), then a small sort
        # of each task's few values: far cheaper than a global sort of 1e7 answers.
        n = task.shape[0]
        by_task = np.arange(n)
        if not is_sorted:
            pos = start[:-1].copy()
            for i in range(n):
                q = task[i]
                by_task[pos[q]] = i
                pos[q] += 1
        out = np.empty(n, dtype=np.int64)
        for q in range(start.shape[0] - 1):
            a, b = start[q], start[q + 1]
            seg = by_task[a:b]
            local = np.argsort(value[seg])
            for j in range(b - a):
                out[a + j] = seg[local[j]]
        return out

    @_jit
    def _vote_step_nb(t, start, w, x, weight, truth, gold, k):
        # One weighted-vote iteration in one pass: each task's votes in registers, its new label
        # (ties to the smallest code), its log-posterior, and the _agreement_nb counts of the
        # workers who answered it, which give the next iteration's weights.
        n_t = start.shape[0] - 1
        new = np.empty(n_t, dtype=np.int64)
        matches = np.zeros(weight.shape[0])
        row = np.empty(k)
        log_post = 0.0
        changed = 0
        for q in range(n_t):
            row[:] = 0.0
            for i in range(start[q], start[q + 1]):
                row[x[i]] += weight[w[i]]
            best = 0
            for c in range(1, k):
                if row[c] > row[best]:
                    best = c
            top = row[best]
            if gold[q] >= 0:
                best = gold[q]
            total = 0.0
            for c in range(k):
                total += np.exp(row[c] - top)
            log_post += row[best] - top - np.log(total)
            new[q] = best
            if best != truth[q]:
                changed += 1
            for i in range(start[q], start[q + 1]):
                if x[i] == best:
                    matches[w[i]] += 1.0
        return new, matches, log_post, changed

    @_jit
    def _label_counts_nb(t, x, n_t, k):
        out = np.zeros((n_t, k))
        for i in range(t.shape[0]):
            out[t[i], x[i]] += 1.0
        return out

    @_jit
    def _agreement_nb(t, w, x, truth, n_w):
        out = np.zeros(n_w)
        for i in range(t.shape[0]):
            if x[i] == truth[t[i]]:
                out[w[i]] += 1.0
        return out

    # AwareDawidSkene's worker step (numpy reference: AwareDawidSkene._update_workers): per
    # worker and flip grid point a K x K table, so numpy's cost there is call overhead.
    @_jit
    def _flip_posterior_nb(counts, pi, scale, spread, log_h, log_composed, q):
        # log_composed[s] = log R_s pi (floored), q = the worker's posterior over the flip grid.
        n_s, k = scale.shape[0], pi.shape[0]
        for s in range(n_s):
            total = log_h[s]
            for z in range(k):
                for y in range(k):
                    c = np.log(max(scale[s] * pi[z, y] + spread[s], 1e-300))
                    log_composed[s, z, y] = c
                    total += counts[z, y] * c
            q[s] = total
        _softmax_nb(q)

    @_jit
    def _softmax_nb(x):
        # x <- exp(x - max x) / sum, in place.
        top = x.max()
        total = 0.0
        for i in range(x.shape[0]):
            x[i] = np.exp(x[i] - top)
            total += x[i]
        for i in range(x.shape[0]):
            x[i] /= total

    @_par
    def _aware_ds_workers_nb(counts, pi, q_in, scale, spread, log_h, alpha):
        n_w, k = pi.shape[0], pi.shape[1]
        n_s = scale.shape[0]
        new_pi = np.empty_like(pi)
        q = np.empty((n_w, n_s))
        log_conf = np.zeros_like(pi)
        bound = np.empty(n_w)
        for w in numba.prange(n_w):
            # Own answers behind the channel: N[x, y] = pi[x, y] sum_s q_s (scale_s c[x, y] /
            # comp_s[x, y] + spread_s sum_z c[z, y] / comp_s[z, y]), then the Dirichlet prior.
            own = np.zeros((k, k))
            ratio = np.empty(k)
            for s in range(n_s):
                for y in range(k):
                    column = 0.0
                    for z in range(k):
                        ratio[z] = counts[w, z, y] / max(scale[s] * pi[w, z, y] + spread[s], 1e-300)
                        column += ratio[z]
                    for x in range(k):
                        own[x, y] += q_in[w, s] * (scale[s] * ratio[x] + spread[s] * column)
            for y in range(k):
                total = 0.0
                for x in range(k):
                    own[x, y] = pi[w, x, y] * own[x, y] + alpha[x, y]
                    total += own[x, y]
                for x in range(k):
                    new_pi[w, x, y] = own[x, y] / total
            log_composed = np.empty((n_s, k, k))
            _flip_posterior_nb(counts[w], new_pi[w], scale, spread, log_h, log_composed, q[w])
            for s in range(n_s):
                for z in range(k):
                    for y in range(k):
                        log_conf[w, z, y] += q[w, s] * log_composed[s, z, y]
            bound[w] = _aware_ds_bound_nb(new_pi[w], q[w], log_h, alpha)
        return new_pi, q, log_conf, bound.sum()

    @_jit
    def _aware_ds_bound_nb(pi, q, log_h, alpha):
        # The worker's share of the EM's bound: sum alpha log pi - sum_s q_s (log q_s - log h_s).
        k = pi.shape[0]
        total = 0.0
        for x in range(k):
            for y in range(k):
                total += alpha[x, y] * np.log(max(pi[x, y], 1e-300))
        for s in range(q.shape[0]):
            total -= q[s] * (np.log(max(q[s], 1e-300)) - log_h[s])
        return total

    @_jit
    def _jump_moves_nb(a0, a1, a2, sums):
        # SQUAREM's r = log a1 - log a0 and v = log a2 - 2 log a1 + log a0 (floored at 1e-12):
        # adds |r|^2 and |v|^2 to sums.
        f0, f1, f2 = a0.ravel(), a1.ravel(), a2.ravel()
        for i in range(f0.size):
            l0 = np.log(max(f0[i], 1e-12))
            l1 = np.log(max(f1[i], 1e-12))
            r = l1 - l0
            v = np.log(max(f2[i], 1e-12)) - l1 - r
            sums[0] += r * r
            sums[1] += v * v

    @_jit
    def _jump_rows_nb(a0, a1, a2, step, out):
        # Each row of the jumped state exp(log a0 - 2 step r + step^2 v), renormalised.
        n = out.shape[0]
        for i in range(n):
            l0 = np.log(max(a0[i], 1e-12))
            l1 = np.log(max(a1[i], 1e-12))
            r = l1 - l0
            v = np.log(max(a2[i], 1e-12)) - l1 - r
            out[i] = l0 - 2.0 * step * r + step * step * v
        _softmax_nb(out)

    @_par
    def _aware_ds_jump_nb(
        pi0, q0, p0, pi1, q1, p1, pi2, q2, p2, learned, scale, spread, log_h, alpha
    ):
        # AwareDawidSkene's SQUAREM jump (numpy reference: _squarem_jump, then
        # expected_log_confusions and the bound) in one pass per worker.
        n_w, k, n_s = pi0.shape[0], pi0.shape[1], q0.shape[1]
        sums = np.zeros(2)
        _jump_moves_nb(pi0, pi1, pi2, sums)
        _jump_moves_nb(q0, q1, q2, sums)
        if learned:
            _jump_moves_nb(p0, p1, p2, sums)
        step = -1.0
        if sums[1] > 0:
            step = min(-np.sqrt(sums[0]) / np.sqrt(sums[1]), -1.0)
        pi = np.empty_like(pi0)
        q = np.empty_like(q0)
        log_conf = np.zeros_like(pi0)
        bound = np.empty(n_w)
        for w in numba.prange(n_w):
            column = np.empty(k)
            for y in range(k):
                _jump_rows_nb(pi0[w, :, y], pi1[w, :, y], pi2[w, :, y], step, column)
                pi[w, :, y] = column
            _jump_rows_nb(q0[w], q1[w], q2[w], step, q[w])
            for s in range(n_s):
                for z in range(k):
                    for y in range(k):
                        c = np.log(max(scale[s] * pi[w, z, y] + spread[s], 1e-300))
                        log_conf[w, z, y] += q[w, s] * c
            bound[w] = _aware_ds_bound_nb(pi[w], q[w], log_h, alpha)
        prior = p2.copy()
        if learned:
            _jump_rows_nb(p0, p1, p2, step, prior)
        return pi, q, prior, log_conf, bound.sum()

    # AwareNull's per-task variational Bayes (numpy reference: AwareNull._accelerated_step).
    # A step skips the tasks whose truths have settled, so converged tasks cost nothing.
    # Transcendentals are the cost here (a fit is a few thousand tasks x tens of E steps), so
    # each digamma comes as parts with psi(x) = log(y) + c, and exp(psi(x) + t) = y exp(c + t)
    # needs no logarithm.
    @_jit
    def _psi_parts_nb(x):
        # For x < 6, psi(x) = psi(x + 6) - sum_k 1 / (x + k) with the sum as one fraction; then
        # the asymptotic series (its first omitted term is below 1e-13 from 6 on).
        c = 0.0
        if x < 6.0:
            num, den = 0.0, 1.0
            for k in range(6):
                num = num * (x + k) + den
                den *= x + k
            c = -num / den
            x += 6.0
        f = 1.0 / (x * x)
        series = 0.0
        for coef in _PSI_SERIES:
            series = f * (coef + series)
        return x, c - 0.5 / x + series

    @_jit
    def _null_e_step_nb(
        counts, keep, other, r0, r1, prior, prior_sum, psi_total, n_total, use_map, e, out, w, score
    ):
        # One E step of one task (AwareNull.e_step); returns sum_x counts_x log(predicted_x) if
        # ``score`` (only a step's last E step needs it: the logarithms cost a fifth of a step).
        # Weights: exp(E[log p]) (variational), or the posterior means (map; n_total = n + r0 + r1).
        g = prior.shape[0]
        answered = 0.0
        for s in range(g):
            answered += e[s]
        total = 0.0
        if use_map:
            share = (answered + r0) / (n_total * (answered + prior_sum))
            for s in range(g):
                w[s] = (e[s] + prior[s]) * share
                total += w[s]
            w[g] = (e[g] + r1) / n_total
        else:
            y1, c1 = _psi_parts_nb(answered + r0)
            y2, c2 = _psi_parts_nb(answered + prior_sum)
            shift = np.log(y1 / y2) + c1 - c2 - psi_total
            for s in range(g):
                y, c = _psi_parts_nb(e[s] + prior[s])
                w[s] = y * np.exp(c + shift)
                total += w[s]
            y, c = _psi_parts_nb(e[g] + r1)
            w[g] = y * np.exp(c - psi_total)
        total += w[g]
        # The channel keeps with ``keep`` and reports each other symbol with ``other``.
        gap = keep - other
        ratio_sum, loglik = 0.0, 0.0
        for x in range(g + 1):
            predicted = other * total + gap * w[x]
            out[x] = counts[x] / predicted  # the ratio, for now
            ratio_sum += out[x]
            if score and counts[x] > 0.0:
                loglik += counts[x] * np.log(predicted)
        for z in range(g + 1):
            out[z] = w[z] * (other * ratio_sum + gap * out[z])
        return loglik

    @_jit
    def _null_truth_nb(e, prior, low, median):
        # AwareNull's summary of the posterior predictive e[:g] + prior (grouped median or mean).
        g = prior.shape[0]
        total = 0.0
        for s in range(g):
            total += e[s] + prior[s]
        if not median:
            moment = 0.0
            for s in range(g):
                moment += (e[s] + prior[s]) * s
            return low + moment / total
        below = 0.0
        for s in range(g):
            share = (e[s] + prior[s]) / total
            if below + share >= 0.5 or s == g - 1:
                inside = min(max((0.5 - below) / max(share, 1e-12), 0.0), 1.0)
                return low + s - 0.5 + inside
            below += share
        return low  # unreachable: the last score always returns

    @_par
    def _null_task_constants_nb(n_q, rate, prior):
        # Per task psi(n_q + r0 + r1), which every E step of its variational fit reads, and the
        # prior's total, summed as numba sums an array in a parallel kernel (by thread).
        out = np.empty(n_q.shape[0])
        for q in range(n_q.shape[0]):
            psi_y, psi_c = _psi_parts_nb(n_q[q] + rate[0] + rate[1])
            out[q] = np.log(psi_y) + psi_c
        return out, prior.sum()

    @_jit
    def _null_block_nb(lo, hi, counts, channel, rate, prior, constants, state, out, settings):
        # One accelerated step (SQUAREM in log space, as AwareNull._accelerated_step) of each
        # active task of lo:hi; returns their summed log-likelihood.
        keep, other = channel
        prior_sum, psi_total, n_q = constants
        expected, truth, active = state
        stopped, final = out
        low, median, use_map, tol = settings
        k = counts.shape[1]
        e1, e2, jump, w = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
        log0, r, v = np.empty(k), np.empty(k), np.empty(k)
        r0, r1 = rate[0], rate[1]
        total = 0.0
        for q in range(lo, hi):
            if not active[q]:
                continue
            e0, c = expected[q], counts[q]
            n_total = n_q[q] + r0 + r1
            task = (keep, other, r0, r1, prior, prior_sum, psi_total[q], n_total, use_map)
            _null_e_step_nb(c, *task, e0, e1, w, False)
            _null_e_step_nb(c, *task, e1, e2, w, False)
            r_norm, v_norm = 0.0, 0.0
            for z in range(k):
                log0[z] = np.log(max(e0[z], 1e-300))
                log1 = np.log(max(e1[z], 1e-300))
                r[z] = log1 - log0[z]
                v[z] = np.log(max(e2[z], 1e-300)) - log1 - r[z]
                r_norm += r[z] * r[z]
                v_norm += v[z] * v[z]
            r_norm, v_norm = np.sqrt(r_norm), np.sqrt(v_norm)
            alpha = min(-r_norm / (v_norm if v_norm > 0.0 else 1.0), -1.0)
            finite = True
            for z in range(k):
                jump[z] = np.exp(log0[z] - 2.0 * alpha * r[z] + alpha * alpha * v[z])
                finite = finite and np.isfinite(jump[z])
            if not finite:  # a huge step length overflowed: keep the second E step
                jump[:] = e2
            loglik = _null_e_step_nb(c, *task, jump, e0, w, True)
            total += loglik
            final[q] = loglik
            new = _null_truth_nb(e0, prior, low, median)
            settled = abs(new - truth[q]) < tol
            truth[q] = new
            if settled:
                active[q] = False
                stopped[q] = True
        return total

    @_jit
    def _null_step_sums_nb(sums, stopped, final, active):
        # The blocks' log-likelihoods in block order; the last log-likelihoods of the tasks
        # that stopped, in task order; how many tasks still step.
        total, stopped_sum, left = 0.0, 0.0, 0
        for ch in range(sums.shape[0]):
            total += sums[ch]
        for q in range(final.shape[0]):
            if stopped[q]:
                stopped_sum += final[q]
            if active[q]:
                left += 1
        return total, stopped_sum, left

    @_jit
    def _aware_null_step_nb(counts, channel, rate, prior, constants, state, settings, n_blocks):
        n_t = counts.shape[0]
        sums, stopped, final = np.zeros(n_blocks), np.zeros(n_t, np.bool_), np.zeros(n_t)
        for ch in range(n_blocks):
            lo, hi = ch * n_t // n_blocks, (ch + 1) * n_t // n_blocks
            out = (stopped, final)
            sums[ch] = _null_block_nb(
                lo, hi, counts, channel, rate, prior, constants, state, out, settings
            )
        return _null_step_sums_nb(sums, stopped, final, state[2])

    @_par
    def _aware_null_step_par_nb(counts, channel, rate, prior, constants, state, settings, n_blocks):
        n_t = counts.shape[0]
        sums, stopped, final = np.zeros(n_blocks), np.zeros(n_t, np.bool_), np.zeros(n_t)
        for ch in numba.prange(n_blocks):
            lo, hi = ch * n_t // n_blocks, (ch + 1) * n_t // n_blocks
            out = (stopped, final)
            sums[ch] = _null_block_nb(
                lo, hi, counts, channel, rate, prior, constants, state, out, settings
            )
        return _null_step_sums_nb(sums, stopped, final, state[2])

    _NUMBA_KERNELS: dict[str, Callable[..., Any]] = {
        "label_counts": _label_counts_nb,
        "agreement": _agreement_nb,
        "vote_step": _vote_step_nb,
        "order_by_task_then_value": _order_by_task_then_value_nb,
        "worker_loss": _worker_loss_nb,
        "weighted_task_sums": _weighted_task_sums_nb,
        "ds_step": _ds_step_nb,
        "one_coin_step": _one_coin_step_nb,
        "gather_scatter": _gather_scatter_nb,
        "worker_votes": _worker_votes_nb,
        "pick_sum": _pick_sum_nb,
        "worker_sum": _worker_sum_nb,
        "grid_posterior": _grid_posterior_nb,
        "aware_null_step": _aware_null_step_nb,
        "aware_null_step_par": _aware_null_step_par_nb,
        "null_task_constants": _null_task_constants_nb,
        "aware_ds_workers": _aware_ds_workers_nb,
        "aware_ds_jump": _aware_ds_jump_nb,
        "aware_gaussian_step": _aware_gaussian_step_nb,
    }

_NUMPY: dict[str, Callable[..., Any]] = {
    "label_counts": _label_counts_np,
    "agreement": _agreement_np,
    "vote_step": _vote_step_np,
    "order_by_task_then_value": _order_by_task_then_value_np,
    "worker_loss": _worker_loss_np,
    "weighted_task_sums": _weighted_task_sums_np,
    "ds_step": _ds_step_np,
    "one_coin_step": _one_coin_step_np,
    "gather_scatter": _gather_scatter_np,
    "worker_votes": _worker_votes_np,
    "pick_sum": _pick_sum_np,
    "worker_sum": _worker_sum_np,
    "grid_posterior": _grid_posterior_np,
    "aware_gaussian_step": _aware_gaussian_step_np,
}
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

    def kernel(self, name: str) -> Callable[..., Any]:
        """The function for the kernel ``name`` (a key of ``_NUMPY``)."""
        ...


class _NumpyBackend:
    name = "numpy"

    def kernel(self, name: str) -> Callable[..., Any]:
        return _NUMPY[name]


class _NumbaBackend:
    name = "numba"

    def kernel(self, name: str) -> Callable[..., Any]:
        # The first call imports numba (_load_numba); each kernel compiles on its first call,
        # or loads from the disk cache.
        return _NUMBA_KERNELS[name]


BACKENDS: dict[str, Backend] = {"numpy": _NumpyBackend(), "numba": _NumbaBackend()}

_numba_lock = threading.Lock()
#: The backend of the fit running in each thread (:func:`backend_for`).
_local = threading.local()


def _load_numba() -> Any:
    """numba's module, imported on the first call in the process, with every kernel jitted."""
    global numba
    with _numba_lock:
        if isinstance(numba, _NumbaOnDemand):
            module = importlib.import_module("numba")
            for compiled in _COMPILED:
                compiled.jit(module)
                # Kernels call kernels by their global names: numba must find dispatchers there.
                globals()[compiled.func.__name__] = compiled.dispatcher
            numba = module  # read by the kernels (numba.prange) when they compile, on first call
    return numba


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


def _n_chunks(table_size: int) -> int:
    """Blocks of tasks for the parallel kernels: fixed (not the thread count), so results are
    reproducible across machines; one block when private tables would be large."""
    return 4 if table_size <= 1_000_000 else 1


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
    args: tuple[Any, ...] = (
        layout.task,
        layout.start,
        wx,
        np.ascontiguousarray(log_conf),
        log_prior,
        gold,
    )
    if get_backend() == "numba":
        args += (_n_chunks(log_conf.size),)
    mu, counts, prior_sum, loglik = _kernel("ds_step")(*args)
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
    args: tuple[Any, ...] = (
        layout.task,
        layout.start,
        layout.worker,
        layout.value,
        log_right,
        log_wrong,
        log_prior,
        gold,
    )
    if get_backend() == "numba":
        args += (_n_chunks(log_right.size),)
    mu, skill, prior_sum, loglik = _kernel("one_coin_step")(*args)
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
    """AwareDawidSkene's worker step, compiled (numba only; the numpy path is
    ``AwareDawidSkene._update_workers``): new own confusions, flip posteriors, expected log
    confusions and the workers' part of the EM's bound."""
    if get_backend() != "numba":
        raise ValidationError("aware_ds_workers is compiled only; use the numpy worker step.")
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
    """AwareDawidSkene's SQUAREM jump from three ``(pi, q, class prior)`` states, compiled
    (numba only; the numpy path is ``aware_dawid_skene._jump``): the jumped state with its
    expected log confusions and the workers' part of the EM's bound."""
    if get_backend() != "numba":
        raise ValidationError("aware_ds_jump is compiled only; use the numpy jump.")
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
    args: tuple[Any, ...] = (
        t,
        w,
        *_contiguous_floats(x, counts),
        truth,
        *_contiguous_floats(post_var, fallback),
        np.ascontiguousarray(gold_index, dtype=np.int64),
        *_contiguous_floats(gold_value, conv, prior, tau),
        float(share),
    )
    if get_backend() == "numba":
        args += work
    post_var, prior, log_norm, change = _kernel("aware_gaussian_step")(*args)
    return post_var, prior, float(log_norm), float(change)


#: Tasks still stepping from which AwareNull's compiled step runs its blocks of tasks over the
#: threads, once per step. A task's step costs a few microseconds, and waking the threads at
#: every step cost more than it saved on 2 loaded cores: on 3,000 tasks, 260 ms a fit over the
#: threads against 150 ms on one (``python benchmarks/bench_aware_loops.py time``).
NULL_PARALLEL_TASKS = 20_000


def null_task_constants(
    n_q: np.ndarray, rate: np.ndarray, prior: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """What every compiled step of AwareNull reads besides the tasks' state (numba only): the
    prior's total, per task ``psi(n_q + rate[0] + rate[1])``, and ``n_q``."""
    if get_backend() != "numba":
        raise ValidationError("null_task_constants is compiled only.")
    n_q, rate, prior = _contiguous_floats(n_q, rate, prior)
    psi_total, prior_sum = _kernel("null_task_constants")(n_q, rate, prior)
    return float(prior_sum), psi_total, n_q


def aware_null_step(
    counts: np.ndarray,
    channel: np.ndarray,
    rate: np.ndarray,
    prior: np.ndarray,
    constants: tuple[float, np.ndarray, np.ndarray],
    state: tuple[np.ndarray, np.ndarray, np.ndarray],
    low: float,
    median: bool,
    use_map: bool,
    tol: float,
) -> tuple[float, float, int]:
    """One of AwareNull's accelerated steps on every task still stepping, compiled (numba only;
    the numpy path is ``AwareNull._accelerated_step``; ``constants`` from
    :func:`null_task_constants`), over 16 fixed blocks of tasks, so that the sums do not depend
    on the thread count. Updates the ``state`` (expected counts, truths, which tasks still
    step) in place; returns the summed log-likelihood of the tasks that stepped, that of those
    that stopped (in task order) and how many still step."""
    if get_backend() != "numba":
        raise ValidationError("aware_null_step is compiled only; use AwareNull._accelerated_step.")
    name = "aware_null_step_par" if state[2].sum() >= NULL_PARALLEL_TASKS else "aware_null_step"
    total, stopped, left = _kernel(name)(
        counts,
        (float(channel[0, 0]), float(channel[0, 1])),
        rate,
        prior,
        constants,
        state,
        (float(low), bool(median), bool(use_map), float(tol)),
        16,
    )
    return float(total), float(stopped), int(left)
