"""The numba backend's kernels: each one compiled pass over the answer arrays with no
temporaries, which is what makes Dawid-Skene 50x faster than a pandas EM.

Imported when the numba backend first runs a kernel (``_NumbaBackend.kernel``), not with the
package, so a fit on numpy never imports numba. ``KERNELS`` holds, for each name the numpy
backend (``_numpy.KERNELS``) gives, the compiled kernel or a wrapper that adds what only the
compiled form needs (fixed blocks of tasks, a choice between a serial and a threaded kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

#: psi(x) ~ log x - 1 / (2x) - sum_n B_2n / (2n x^2n), the coefficients -B_2n / 2n from n = 7
#: down to 1 (Horner's order).
_PSI_SERIES = (-1 / 12, 691 / 32760, -1 / 132, 1 / 240, -1 / 252, 1 / 120, -1 / 12)


def _cached_jit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)``: each kernel compiles on its first call, once, and
    later processes load it from disk (next to this file, else under ``NUMBA_CACHE_DIR`` or the
    user's cache folder). Where none of those is writable numba refuses ``cache=True``; the
    kernels then compile in every process (seconds) instead of failing."""

    def wrap(func: Callable[..., Any]) -> Any:
        try:
            return numba.njit(cache=True, **options)(func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(**options)(func)

    return wrap


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


# AwareDawidSkene's worker step (numpy reference: _numpy._aware_ds_workers_np): per
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
def _aware_ds_jump_nb(pi0, q0, p0, pi1, q1, p1, pi2, q2, p2, learned, scale, spread, log_h, alpha):
    # AwareDawidSkene's SQUAREM jump (numpy reference: _numpy.squarem_jump, then
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


# AwareNull's per-task variational Bayes (numpy reference: _numpy.null_accelerated_step).
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
    # One E step of one task (_numpy.null_e_step); returns sum_x counts_x log(predicted_x) if
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
    # One accelerated step (SQUAREM in log space, as _numpy.null_accelerated_step) of each
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


def _n_chunks(table_size: int) -> int:
    """Blocks of tasks for the parallel kernels: fixed (not the thread count), so results are
    reproducible across machines; one block when private tables would be large."""
    return 4 if table_size <= 1_000_000 else 1


def _ds_step(
    t: np.ndarray,
    start: np.ndarray,
    wx: np.ndarray,
    log_conf: np.ndarray,
    log_prior: np.ndarray,
    gold: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    return _ds_step_nb(t, start, wx, log_conf, log_prior, gold, _n_chunks(log_conf.size))


def _one_coin_step(
    t: np.ndarray,
    start: np.ndarray,
    w: np.ndarray,
    x: np.ndarray,
    log_right: np.ndarray,
    log_wrong: np.ndarray,
    log_prior: np.ndarray,
    gold: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    chunks = _n_chunks(log_right.size)
    return _one_coin_step_nb(t, start, w, x, log_right, log_wrong, log_prior, gold, chunks)


def _null_task_constants(
    n_q: np.ndarray, rate: np.ndarray, prior: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    # What every compiled step reads besides the tasks' state: the prior's total, per task
    # psi(n_q + rate[0] + rate[1]), and n_q.
    n_q, rate, prior = (np.ascontiguousarray(a, dtype=float) for a in (n_q, rate, prior))
    psi_total, prior_sum = _null_task_constants_nb(n_q, rate, prior)
    return float(prior_sum), psi_total, n_q


#: Tasks still stepping from which AwareNull's compiled step runs its blocks of tasks over the
#: threads, once per step. A task's step costs a few microseconds, and waking the threads at
#: every step cost more than it saved on 2 loaded cores: on 3,000 tasks, 260 ms a fit over the
#: threads against 150 ms on one (``python benchmarks/bench_aware_loops.py time``).
NULL_PARALLEL_TASKS = 20_000


def _aware_null_step(
    counts: np.ndarray,
    channel: np.ndarray,
    rate: np.ndarray,
    prior: np.ndarray,
    constants: tuple[float, np.ndarray, np.ndarray],
    state: tuple[np.ndarray, np.ndarray, np.ndarray],
    low: float,
    median: bool,
    estimate: str,
    tol: float,
) -> tuple[float, float, int]:
    # Over 16 fixed blocks of tasks, on the threads or on one, so that the sums do not depend
    # on the thread count.
    many = state[2].sum() >= NULL_PARALLEL_TASKS
    step = _aware_null_step_par_nb if many else _aware_null_step_nb
    return step(
        counts,
        (float(channel[0, 0]), float(channel[0, 1])),
        rate,
        prior,
        constants,
        state,
        (float(low), bool(median), estimate == "map", float(tol)),
        16,
    )


#: The compiled backend's kernels by the numpy backend's names (``_numpy.KERNELS``), taking the
#: same arguments.
KERNELS: dict[str, Callable[..., Any]] = {
    "label_counts": _label_counts_nb,
    "agreement": _agreement_nb,
    "vote_step": _vote_step_nb,
    "order_by_task_then_value": _order_by_task_then_value_nb,
    "worker_loss": _worker_loss_nb,
    "weighted_task_sums": _weighted_task_sums_nb,
    "ds_step": _ds_step,
    "one_coin_step": _one_coin_step,
    "gather_scatter": _gather_scatter_nb,
    "worker_votes": _worker_votes_nb,
    "pick_sum": _pick_sum_nb,
    "worker_sum": _worker_sum_nb,
    "grid_posterior": _grid_posterior_nb,
    "aware_null_step": _aware_null_step,
    "null_task_constants": _null_task_constants,
    "aware_ds_workers": _aware_ds_workers_nb,
    "aware_ds_jump": _aware_ds_jump_nb,
    "aware_gaussian_step": _aware_gaussian_step_nb,
}
