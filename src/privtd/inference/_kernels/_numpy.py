"""The numpy backend's kernels: ``np.bincount`` scatter-adds and array expressions, with no
set-up to pay. They are also the reference the compiled kernels (``_numba``) are tested
against, so the aware estimators' per-worker and per-task steps are written out here in full.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._channel import compose
from .._ops import squarem_extrapolate


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
    num: np.ndarray,
    den: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float, float]:
    # num and den: room the compiled step reuses for its sums; these array expressions make
    # their own.
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


# ---------------------------------------------------------------------- AwareDawidSkene
# Workers per block of the flip/confusion step: bounds its (workers, flips, K, K) arrays.
_BLOCK_CELLS = 2_000_000


def flip_posterior(
    counts: np.ndarray, composed: np.ndarray, log_h: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The flip step: each worker's posterior ``q[w, s]`` over the flip grid, from its expected
    report-truth counts ``counts[w, z, y]`` and composed confusions; also their logs."""
    log_composed = np.log(composed)
    loglik = (counts[:, None] * log_composed).sum(axis=(2, 3)) + log_h
    q = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    q /= q.sum(axis=1, keepdims=True)
    return q, log_composed


def own_answer_counts(
    counts: np.ndarray,
    pi: np.ndarray,
    q: np.ndarray,
    composed: np.ndarray,
    channel: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """The confusion step's counts ``N[w, x, y]``: each report ``z`` split over the worker's
    possible own answers ``x`` by ``P(x | z, y, f) = R_f[z, x] pi[x, y] / (R_f pi)[z, y]``,
    averaged over the flip posterior."""
    scale, spread = channel
    share = counts[:, None] / composed * q[:, :, None, None]  # [w, s, z, y]
    # sum_z R_s[z, x] share[z, y] = scale_s share[x, y] + spread_s sum_z share[z, y]
    through = np.moveaxis(share, 1, -1) @ scale
    through += share.sum(axis=2, keepdims=True).transpose(0, 2, 3, 1) @ spread
    own: np.ndarray = pi * through
    return own


def expected_log_confusions(
    pi: np.ndarray, q: np.ndarray, channel: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """The truth step's ``L[w, z, y] = E_q log (R_f pi_w)[z, y]``, block by block of workers."""
    scale, spread = channel
    n_w, k, n_s = pi.shape[0], pi.shape[1], q.shape[1]
    block = max(1, _BLOCK_CELLS // (n_s * k * k))
    log_conf = np.empty_like(pi)
    for lo in range(0, n_w, block):
        part = slice(lo, lo + block)
        # [w, z y, s]: the flips last, so that one matrix product takes the expectation.
        log_composed = np.multiply.outer(pi[part].reshape(-1, k * k), scale)
        log_composed += spread
        np.log(np.maximum(log_composed, 1e-300, out=log_composed), out=log_composed)
        log_conf[part] = np.matmul(log_composed, q[part, :, None]).reshape(-1, k, k)
    return log_conf


def squarem_jump(
    start: tuple[np.ndarray, ...],
    first: tuple[np.ndarray, ...],
    second: tuple[np.ndarray, ...],
    learned_prior: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SQUAREM's extrapolation from three successive ``(pi, q, prior)`` states, in log space so
    that every probability stays positive; each distribution is renormalised."""
    parts = 3 if learned_prior else 2

    # The floor: flip grid points a worker's answers rule out have log posteriors in the
    # hundreds below zero that move by tens each pass and change nothing; unfloored they set
    # the step length (on one of P0's releases 38 passes against 13 floored).
    def flat(state: tuple[np.ndarray, ...]) -> np.ndarray:
        return np.concatenate([np.log(np.maximum(a, 1e-12)).ravel() for a in state[:parts]])

    x = squarem_extrapolate(flat(start), flat(first), flat(second))
    pi, q, prior = second
    out = []
    for a, axis in ((pi, 1), (q, 1), (prior, 0))[:parts]:
        log_a, x = x[: a.size].reshape(a.shape), x[a.size :]
        a = np.exp(log_a - log_a.max(axis=axis, keepdims=True))
        out.append(a / a.sum(axis=axis, keepdims=True))
    if not learned_prior:
        out.append(prior)
    return out[0], out[1], out[2]


def bound_terms(pi: np.ndarray, q: np.ndarray, log_h: np.ndarray, alpha: np.ndarray) -> float:
    """The workers' part of the EM's bound: the confusions' Dirichlet log density (up to its
    constant), less the flip posteriors' divergence from the flip law."""
    log_prior = float((alpha * np.log(np.maximum(pi, 1e-300))).sum())
    return log_prior - float((q * (np.log(np.maximum(q, 1e-300)) - log_h)).sum())


def _aware_ds_workers_np(
    counts: np.ndarray,
    pi: np.ndarray,
    q: np.ndarray,
    scale: np.ndarray,
    spread: np.ndarray,
    log_h: np.ndarray,
    alpha: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    # Block by block of workers, so that the (workers, flips, K, K) temporaries stay bounded.
    channel = (scale, spread)
    n_w, k, n_s = pi.shape[0], pi.shape[1], log_h.size
    block = max(1, _BLOCK_CELLS // (n_s * k * k))
    new_pi = np.empty_like(pi)
    new_q = np.empty((n_w, n_s))
    log_conf = np.empty_like(pi)
    for lo in range(0, n_w, block):
        part = slice(lo, lo + block)
        composed = compose(pi[part], channel)
        own = own_answer_counts(counts[part], pi[part], q[part], composed, channel) + alpha
        own /= own.sum(axis=1, keepdims=True)
        new_pi[part] = own
        new_q[part], log_composed = flip_posterior(counts[part], compose(own, channel), log_h)
        # The truth step's L[w, z, y] = E_q log (R_f pi_w)[z, y].
        log_conf[part] = (new_q[part][:, :, None, None] * log_composed).sum(axis=1)
    return new_pi, new_q, log_conf, bound_terms(new_pi, new_q, log_h, alpha)


def _aware_ds_jump_np(
    pi0: np.ndarray,
    q0: np.ndarray,
    p0: np.ndarray,
    pi1: np.ndarray,
    q1: np.ndarray,
    p1: np.ndarray,
    pi2: np.ndarray,
    q2: np.ndarray,
    p2: np.ndarray,
    learned: bool,
    scale: np.ndarray,
    spread: np.ndarray,
    log_h: np.ndarray,
    alpha: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    pi, q, prior = squarem_jump((pi0, q0, p0), (pi1, q1, p1), (pi2, q2, p2), learned)
    log_conf = expected_log_confusions(pi, q, (scale, spread))
    return pi, q, prior, log_conf, bound_terms(pi, q, log_h, alpha)


# ---------------------------------------------------------------------- AwareNull
#: Floor for expected counts taken to log space (the E step keeps them positive, but they can
#: underflow).
_FLOOR = 1e-300


def null_e_step(
    counts: np.ndarray,
    channel: np.ndarray,
    expected: np.ndarray,
    n_q: np.ndarray,
    rate: np.ndarray,
    scores_prior: np.ndarray,
    estimate: str = "variational",
) -> tuple[np.ndarray, np.ndarray]:
    """AwareNull's E step: the expected count of each true symbol per task, given the reported
    counts: a report ``x`` is from ``z`` with probability ``w_z C[x, z] / sum_z' w_z' C[x, z']``,
    where ``w = exp(E[log p_q])`` (``estimate="map"``: the posterior means) comes from the
    current expected counts. Returns them and the predicted report shares ``w C^T``: ``sum_x
    counts_x log (w C^T)_x`` is the task's log-likelihood term, computed only where it is
    reported."""
    if estimate == "map":
        weights = null_posterior_mean(expected, n_q, rate, scores_prior)
    else:
        weights = np.exp(null_expected_log_p(expected, n_q, rate, scores_prior))
    predicted = weights @ channel.T
    return weights * ((counts / predicted) @ channel), predicted


def null_posterior_mean(
    expected: np.ndarray, n_q: np.ndarray, rate: np.ndarray, scores_prior: np.ndarray
) -> np.ndarray:
    """``E[p_q(s)]`` under the nested Dirichlet posterior: EM's M step for the posterior
    mode under the prior with one more pseudo-answer per symbol."""
    g = scores_prior.size
    answered = expected[:, :g].sum(axis=1)
    total = n_q + rate.sum()
    out = np.empty_like(expected)
    share = (answered + rate[0]) / (total * (answered + scores_prior.sum()))
    out[:, :g] = (expected[:, :g] + scores_prior) * share[:, None]
    out[:, g] = (expected[:, g] + rate[1]) / total
    return out


def null_expected_log_p(
    expected: np.ndarray, n_q: np.ndarray, rate: np.ndarray, scores_prior: np.ndarray
) -> np.ndarray:
    """``E[log p_q(s)]`` under the nested Dirichlet posterior: answered-or-NULL first
    (Beta), then the score given answered (Dirichlet)."""
    from scipy.special import digamma  # on use: costs ~0.5 s to import

    g = scores_prior.size
    answered = expected[:, :g].sum(axis=1)
    # One digamma call over every argument: per call overhead dominated on P3's 200 tasks.
    args = np.empty((expected.shape[0], g + 4))
    args[:, :g] = expected[:, :g] + scores_prior
    args[:, g] = expected[:, g] + rate[1]
    args[:, g + 1] = answered + rate[0]
    args[:, g + 2] = answered + scores_prior.sum()
    args[:, g + 3] = n_q + rate.sum()
    psi = digamma(args)
    out = psi[:, : g + 1]
    out[:, :g] += (psi[:, g + 1] - psi[:, g + 2] - psi[:, g + 3])[:, None]
    out[:, g] -= psi[:, g + 3]
    return out


def null_accelerated_step(
    counts: np.ndarray,
    channel: np.ndarray,
    expected: np.ndarray,
    n_q: np.ndarray,
    rate: np.ndarray,
    scores_prior: np.ndarray,
    estimate: str = "variational",
) -> tuple[np.ndarray, np.ndarray]:
    """One SQUAREM step (Varadhan and Roland 2008, scheme S3) per task, in log space: two E
    steps, an extrapolation along them with the task's own step length, and one E step from
    there. Tasks are independent given the fixed prior, so each gets its own step. Plain EM
    crawls where the channel carries little (2,000 iterations at epsilon 0.5). In log space
    the extrapolation stays positive, and the slow mode where the channel carries little, a
    score's expected count decaying geometrically under a weak prior, is a straight line,
    which the extrapolation follows in one step (in count space it left the positive orthant
    and fell back to plain steps: 3-30x more of them). Returns the expected counts and each
    task's log-likelihood."""

    def e_step(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return null_e_step(counts, channel, rows, n_q, rate, scores_prior, estimate)

    first, _ = e_step(expected)
    second, _ = e_step(first)
    log0, log1, log2 = (np.log(np.maximum(x, _FLOOR)) for x in (expected, first, second))
    # A huge step length overflows; those rows keep the second E step.
    with np.errstate(over="ignore", invalid="ignore"):
        jump = np.exp(squarem_extrapolate(log0, log1, log2, axis=1))
    jump = np.where(np.isfinite(jump).all(axis=1, keepdims=True), jump, second)
    expected, predicted = e_step(jump)
    return expected, (counts * np.log(predicted)).sum(axis=1)


def grouped_median(weights: np.ndarray, low: float) -> np.ndarray:
    """Per row, the median of a distribution over the scores ``low, low + 1, ...`` read as
    grouped data: score ``s`` spreads its weight evenly over ``[s - 1/2, s + 1/2]``, so the
    median moves continuously with the weights (a plain median jumps a whole score)."""
    share = weights / weights.sum(axis=1, keepdims=True)
    cdf = np.cumsum(share, axis=1)
    # The bin where the cumulative share crosses one half (the last bin against rounding).
    k = np.minimum((cdf < 0.5).sum(axis=1), share.shape[1] - 1)
    rows = np.arange(share.shape[0])
    below = cdf[rows, k] - share[rows, k]
    inside = (0.5 - below) / np.maximum(share[rows, k], 1e-12)
    return low + k - 0.5 + np.clip(inside, 0.0, 1.0)


def null_truths(
    expected: np.ndarray, scores_prior: np.ndarray, low: float, median: bool
) -> np.ndarray:
    """Per task, AwareNull's truth: its posterior predictive distribution of one answer
    ``expected[:, :g] + scores_prior`` over the scores ``low, low + 1, ...``, summarised by
    its grouped median (``median``) or its mean."""
    g = scores_prior.size
    predictive = expected[:, :g] + scores_prior
    if median:
        return grouped_median(predictive, low)
    return (predictive @ np.arange(low, low + g, dtype=float)) / predictive.sum(axis=1)


def _null_task_constants_np(n_q: np.ndarray, rate: np.ndarray, prior: np.ndarray) -> np.ndarray:
    # The numpy step computes each digamma as it goes: it reads only the tasks' report cells.
    return n_q


def _aware_null_step_np(
    counts: np.ndarray,
    channel: np.ndarray,
    rate: np.ndarray,
    prior: np.ndarray,
    n_q: np.ndarray,
    state: tuple[np.ndarray, np.ndarray, np.ndarray],
    low: float,
    median: bool,
    estimate: str,
    tol: float,
) -> tuple[float, float, int]:
    expected, truth, active = state
    rows = np.flatnonzero(active)
    expected[rows], loglik = null_accelerated_step(
        counts[rows], channel, expected[rows], n_q[rows], rate, prior, estimate
    )
    loglik_sum = float(loglik.sum())
    new = null_truths(expected[rows], prior, low, median)
    still = np.abs(new - truth[rows]) >= tol
    active[rows] = still
    truth[rows] = new
    # Added in task order, one after another (as the objective has always been summed).
    stopped = loglik[~still]
    stopped_sum = float(np.cumsum(stopped)[-1]) if stopped.size else 0.0
    return loglik_sum, stopped_sum, int(active.sum())


#: The numpy backend's kernels by name: the names the compiled backend (``_numba.KERNELS``) gives
#: too, with the same arguments.
KERNELS: dict[str, Callable[..., Any]] = {
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
    "aware_ds_workers": _aware_ds_workers_np,
    "aware_ds_jump": _aware_ds_jump_np,
    "null_task_constants": _null_task_constants_np,
    "aware_null_step": _aware_null_step_np,
}
