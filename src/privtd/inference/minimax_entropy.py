"""Minimax conditional entropy (Zhou, Basu, Mao & Platt, NIPS 2012).

Worker ``i`` answers label ``k`` on task ``j`` whose truth is ``c`` with probability

    P(k | i, j, c) = exp(sigma_i[c, k] + tau_j[c, k]) / Z_ij(c),

the maximum-entropy law that matches each worker's and each task's expected confusion counts
(the paper's dual): ``sigma`` (workers x K x K) is a worker's confusion, ``tau`` (tasks x K x K)
a task's, and ``Z_ij(c)`` sums the numerator over ``k``. With ``tau = 0`` the model is
Dawid-Skene with confusions ``softmax_k sigma_i[c, k]``; ``tau`` lets a task be harder (or
confusable in its own way) for every worker alike.

Fitted by the alternating scheme of the authors' code (and of the Zheng et al. VLDB 2017
survey's copy of it): the E-step gives task posteriors
``q_j(c) ∝ prior(c) prod_i P(x_ij | i, j, c)``, starting from the majority vote's label shares;
the M-step maximises the expected complete log-likelihood minus the penalties
``alpha/2 ||tau||^2 + beta/2 ||sigma||^2`` (the regularised form's penalty on the dual
variables, scaled as in the authors' code) by a few L-BFGS-B iterations over all ``sigma``
and ``tau`` at once, diagonally preconditioned, from the previous step's values. The value and
its gradient are a few passes over one ``(answers, K, K)`` array, one ``np.bincount`` (per
worker) and one sparse product (per task). The derivation is in docs/inference.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..answers import Answers
from ._base import _check_float, _check_int, confusion_frame
from ._em import EMEstimator, Fit, Model, Shape
from ._tags import Tags
from ._truth_step import task_incidence, truth_step

# exp() of a float64 overflows past 709: below this bound on |sigma| + |tau| the normaliser
# needs no max-subtraction, which saves two passes over the (answers, K, K) array per call.
_SAFE_LOGIT = 300.0


def minimax_start(part: Any, previous: Any, penalties: tuple[float, float]) -> tuple[Any, None]:
    """The answers coded for the M-step and E-step, and the majority vote's label shares
    (gold rows one-hot), the first posteriors."""
    coded = _Model(part)
    coded.set_penalties(*penalties)
    return (part.soft_start(), coded), None


def minimax_pass(part: Any, previous: Any, params: tuple[Any, ...]) -> tuple[Any, Any]:
    """One EM iteration over all the answers: the L-BFGS-B M-step from ``x`` (``sigma`` and
    ``tau``, flat) and the posteriors, then the E-step. Statistics: the objective per answer
    and the new ``x``."""
    from scipy.optimize import minimize  # scipy loads on first fit: privtd imports light

    x, log_prior, options = params
    mu, coded = previous[0]
    lin = coded.linear_part(mu)
    values: list[float] = []
    res = minimize(
        coded.scaled_negative_q,
        x * coded.scale,
        args=(mu, lin, values),
        jac=True,
        method="L-BFGS-B",
        options=options,
    )
    # L-BFGS-B's line search only accepts descent; the guard keeps EM's ascent even if a
    # search ends abnormally on a worse point than its start (its first value).
    if res.fun <= values[0]:
        x = res.x / coded.scale
    mu, loglik = truth_step(coded.log_likelihood(x), coded.by_task, log_prior, part.gold)
    return (mu, coded), ((loglik - coded.penalty(x)) / coded.n, x)


def minimax_finish(part: Any, previous: Any, _: Any) -> tuple[Any, None]:
    """The posteriors alone (the labels are their arg-max)."""
    return previous[0][0], None


class MinimaxEntropyModel(Model):
    """Minimax entropy's EM over all the answers at once: the statistics of a step are its
    objective and the ``sigma`` and ``tau`` its M-step found, which are the parameters.
    Stops when the objective per answer rose by less than ``tol``.

    In memory only: each M-step is an L-BFGS-B run over every worker's and every task's
    parameters together, whose line search evaluates the objective over all the answers many
    times; a step summed over parts cannot make it."""

    start = staticmethod(minimax_start)
    step = staticmethod(minimax_pass)
    finish = staticmethod(minimax_finish)

    def __init__(self, est: MinimaxEntropy, shape: Shape) -> None:
        super().__init__(est.tol)
        k = shape.n_labels
        self.size = (shape.n_workers + shape.n_tasks) * k * k
        self.start_arg = est._penalties(shape)
        self.log_prior = np.full(k, -np.log(k))
        self.options = {"maxiter": est.m_step_max_iter, "gtol": est.m_step_tol}

    def init(self, stats: Any) -> np.ndarray:
        return np.zeros(self.size)

    def step_params(self, x: np.ndarray) -> tuple[Any, ...]:
        return x, self.log_prior, self.options

    def m_step(self, stats: Any) -> np.ndarray:
        return np.asarray(stats[1])

    def objective(self, stats: Any) -> float:
        return float(stats[0])


class MinimaxEntropy(EMEstimator):
    """Minimax conditional entropy (Zhou et al., NIPS 2012): worker and task confusions.

    ``P(answer k | worker i, task j, truth c) ∝ exp(sigma_i[c, k] + tau_j[c, k])`` (see the
    module doc and docs/inference.md). EM: the E-step's task posteriors, then an L-BFGS-B
    M-step on the expected complete log-likelihood minus ``alpha/2 ||tau||^2 +
    beta/2 ||sigma||^2``.

    Parameters
    ----------
    max_iter : int, default 100
        EM iterations (each: one M-step, then one E-step).
    tol : float, default 1e-5
        On the change of the objective per answer: the log marginal likelihood minus the two
        penalties (the MAP objective EM climbs), from the E-step's normaliser.
    alpha : float > 0 or None, default None
        Penalty on the task parameters ``tau``. None: ``beta * n_tasks / n_workers``, the
        authors' code's rule (``beta`` times a worker's mean answer count over a task's), over
        the workers who answered (a listed worker without answers changes nothing).
        Large values pin ``tau`` at 0, i.e. a Dawid-Skene model in ``sigma``.
    beta : float > 0 or None, default None
        Penalty on the worker parameters ``sigma``. None: ``K^2 / 4``, the authors' code's
        default. The paper leaves both as tuning constants.
    m_step_max_iter : int, default 5
        L-BFGS-B iterations per M-step (generalised EM: each M-step raises the objective, none
        needs to finish). The authors' code runs up to 25 per block; on AdultContent 5, 10
        and 25 took 38, 37 and 37 EM iterations to the same objective and accuracy (labels
        99.9% the same), 5 in half the time of 25 (docs/inference.md).
    m_step_tol : float, default 1e-7
        L-BFGS-B's tolerance on the largest component of the M-step's preconditioned
        gradient (per answer).

    Notes
    -----
    The class prior is uniform and fixed, as in the authors' code (a task's ``tau`` can shift
    its own labels). The parameters start at 0.

    Fitted: ``truths_``, ``probas_``; ``sigmas_`` (``(workers, K, K)`` array
    ``[worker, truth, answer]``) and ``taus_`` (``(tasks, K, K)``, same order), in
    ``answers.labels`` order; ``confusions_`` (as :class:`DawidSkene`'s: rows (worker, label
    given), columns the true label) is each worker's confusion on a task with ``tau = 0``,
    the penalty's centre, i.e. ``softmax_k sigma_i[c, k]``; ``weights_`` (``weight`` = that
    confusion's accuracy, ``sum_c p_c P_i(c | c)``, weighted by the posterior's label shares
    ``p = probas_.mean()``); ``n_iter_``, ``converged_``, ``objective_``; ``alpha_`` and
    ``beta_``, the penalties used. Takes no warm start: its state is per worker and per task.
    Runs on the EM engine (:class:`MinimaxEntropyModel`) in memory only: see its docstring.

    References
    ----------
    D. Zhou, S. Basu, Y. Mao and J. C. Platt, "Learning from the Wisdom of Crowds by Minimax
    Entropy", NIPS 2012.
    """

    __privtd_tags__ = Tags(
        "minimax",
        not_distributed="an M-step is an L-BFGS-B run that reads all the answers many times",
    )

    def __init__(
        self,
        *,
        max_iter: int = 100,
        tol: float = 1e-5,
        alpha: float | None = None,
        beta: float | None = None,
        m_step_max_iter: int = 5,
        m_step_tol: float = 1e-7,
    ) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.alpha = alpha
        self.beta = beta
        self.m_step_max_iter = m_step_max_iter
        self.m_step_tol = m_step_tol

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        for key in ("alpha", "beta"):
            if getattr(self, key) is not None:
                _check_float(name, key, getattr(self, key), 0.0, low_open=True)
        _check_int(name, "m_step_max_iter", self.m_step_max_iter, low=1)
        _check_float(name, "m_step_tol", self.m_step_tol, 0.0, low_open=True)

    def _penalties(self, shape: Shape) -> tuple[float, float]:
        """``alpha`` and ``beta``: as given, or the authors' code's defaults."""
        k = shape.n_labels
        beta = k * k / 4.0 if self.beta is None else float(self.beta)
        active = max(int(np.count_nonzero(shape.counts)), 1)
        alpha = beta * shape.n_tasks / active if self.alpha is None else float(self.alpha)
        return alpha, beta

    def _model(self, shape: Shape) -> MinimaxEntropyModel:
        return MinimaxEntropyModel(self, shape)

    def _finish(self, answers: Answers, fit: Fit, truth: np.ndarray, mu: np.ndarray | None) -> None:
        assert mu is not None
        sigma, tau = _split(fit.params, answers.n_workers, answers.n_tasks, answers.n_labels)
        confusion = np.exp(sigma - sigma.max(axis=2, keepdims=True))
        confusion /= confusion.sum(axis=2, keepdims=True)  # [worker, truth, answer]
        shares = mu.mean(axis=0)
        self.sigmas_ = sigma
        self.taus_ = tau
        self.alpha_, self.beta_ = self._penalties(Shape.of(answers))
        self.confusions_ = confusion_frame(answers, confusion.transpose(0, 2, 1))
        accuracy = (np.diagonal(confusion, axis1=1, axis2=2) * shares).sum(axis=1)
        self._set_results(
            answers,
            truth,
            proba=mu,
            weight=accuracy,
            n_iter=fit.n_iter,
            converged=fit.converged,
            objective=fit.objective,
        )

    def _summary(self) -> dict[str, Any] | None:
        out = super()._summary()
        if out is not None:
            out["alpha"] = f"{self.alpha_:.4g}"
            out["beta"] = f"{self.beta_:.4g}"
        return out


class _Model:
    """The answers coded once for the M-step and E-step: gathers by worker and task, the
    workers' cell indices and the sparse ``(tasks, answers)`` incidence that sum per-answer
    arrays per worker (one bincount) and per task (one product)."""

    def __init__(self, answers: Answers) -> None:
        self.n = len(answers.task)
        self.k = answers.n_labels
        self.n_w = answers.n_workers
        self.n_t = answers.n_tasks
        self.task = answers.task.astype(np.intp)
        self.worker = answers.worker.astype(np.intp)
        self.value = answers.value.astype(np.intp)
        self.rows = np.arange(self.n)
        self.by_task = task_incidence(self.task, self.n_t)
        # Per answer, its K x K cells' places among the workers' cells: one bincount sums the
        # cells per worker. A worker's answers are scattered, so a sparse product read them at
        # random and took 2x longer; the task product reads answers in task order.
        kk = self.k * self.k
        self.worker_cells = (self.worker[:, None] * kk + np.arange(kk)).ravel()
        self.votes = np.bincount(
            self.task * self.k + self.value, minlength=self.n_t * self.k
        ).reshape(self.n_t, self.k)
        self.cut = self.n_w * self.k * self.k
        self.size = self.cut + self.n_t * self.k * self.k
        self.set_penalties(1.0, 1.0)

    def set_penalties(self, alpha: float, beta: float) -> None:
        """The penalties, and the M-step's diagonal preconditioner: L-BFGS-B runs on
        ``y = scale * x`` with ``scale^2`` about the curvature of each parameter, its block's
        answers times ``(K - 1) / K^3`` (``q(c) P (1 - P)`` at uniform ``q`` and ``P``) plus its
        penalty. Unscaled, a task's curvature (a few answers, or a penalty of 1e8 to pin
        ``tau`` at 0) and a busy worker's (hundreds of answers) differ by orders of
        magnitude, and the few L-BFGS-B iterations per M-step barely moved ``sigma``."""
        self.alpha, self.beta = alpha, beta
        k = self.k
        h = (k - 1) / k**3
        per_worker = np.bincount(self.worker, minlength=self.n_w) * h + beta
        per_task = np.bincount(self.task, minlength=self.n_t) * h + alpha
        self.scale = np.sqrt(
            np.concatenate([np.repeat(per_worker, k * k), np.repeat(per_task, k * k)])
        )

    def scaled_negative_q(
        self, y: np.ndarray, mu: np.ndarray, lin: np.ndarray, values: list[float]
    ) -> tuple[float, np.ndarray]:
        """:meth:`negative_q` in the preconditioned coordinates ``y = scale * x``; each value
        is appended to ``values`` (the first is the M-step's start: no extra evaluation)."""
        value, grad = self.negative_q(y / self.scale, mu, lin)
        values.append(value)
        return value, grad / self.scale

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _split(x, self.n_w, self.n_t, self.k)

    def penalty(self, x: np.ndarray) -> float:
        sigma, tau = self.split(x)
        # Elementwise sums, not BLAS dots: no OpenBLAS threads on a shared machine.
        return 0.5 * (
            self.beta * float((sigma * sigma).sum()) + self.alpha * float((tau * tau).sum())
        )

    def _logits(self, x: np.ndarray) -> tuple[np.ndarray, bool]:
        """Per answer ``sigma_i[c, k] + tau_j[c, k]`` (answers, K, K), and whether the values
        are small enough for an unshifted ``exp``."""
        sigma, tau = self.split(x)
        logits = sigma[self.worker]
        logits += tau[self.task]
        bound = float(np.abs(sigma).max(initial=0.0) + np.abs(tau).max(initial=0.0))
        return logits, bound < _SAFE_LOGIT

    def log_likelihood(self, x: np.ndarray) -> np.ndarray:
        """``log P(x_n | c)`` per answer and truth (answers, K): the E-step's input."""
        logits, safe = self._logits(x)
        given = logits[self.rows, :, self.value]
        _, total, shift = _softmax_parts(logits, safe)
        given -= np.log(total)
        if shift is not None:
            given -= shift
        return given

    def linear_part(self, mu: np.ndarray) -> np.ndarray:
        """The gradient of ``Q``'s linear term, flat like ``x``: per worker (and per task),
        ``sum_n q_{t_n}(c) [x_n = k]``, the expected confusion counts the dual matches."""
        k = self.k
        # Cell (worker, c, x_n) of each answer and truth c, weighted by q_{t_n}(c).
        cells = (self.worker * (k * k) + self.value)[:, None] + k * np.arange(k)
        by_worker = np.bincount(cells.ravel(), weights=mu[self.task].ravel(), minlength=self.cut)
        by_task = mu[:, :, None] * self.votes[:, None, :]
        return np.concatenate([by_worker, by_task.ravel()])

    def negative_q(
        self, x: np.ndarray, mu: np.ndarray, lin: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """Minus (the expected complete log-likelihood minus the penalties), per answer, and
        its gradient: ``lin - sum_n q(c) P(k | c) - penalty'`` per worker and per task."""
        k, n = self.k, self.n
        sigma, tau = self.split(x)
        logits, safe = self._logits(x)
        prob, total, shift = _softmax_parts(logits, safe)
        weight = mu[self.task]  # (answers, K): q_{t_n}(c)
        log_z = np.log(total)
        if shift is not None:
            log_z += shift
        expected_log_z = float((weight * log_z).sum())
        # q(c) P(k | c) = q(c) exp(.) / Z: the division and the weighting in one pass.
        prob *= (weight / total)[:, :, None]
        flat = prob.reshape(n, k * k)
        expected = np.concatenate(
            [
                np.bincount(self.worker_cells, weights=flat.ravel(), minlength=self.cut),
                np.asarray(self.by_task @ flat).ravel(),
            ]
        )
        value = float((lin * x).sum()) - expected_log_z - self.penalty(x)
        grad = lin - expected
        grad[: self.cut] -= self.beta * sigma.ravel()
        grad[self.cut :] -= self.alpha * tau.ravel()
        return -value / n, -grad / n


def _split(x: np.ndarray, n_w: int, n_t: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``sigma`` (workers, K, K) and ``tau`` (tasks, K, K) as views of the flat ``x``."""
    cut = n_w * k * k
    return x[:cut].reshape(n_w, k, k), x[cut:].reshape(n_t, k, k)


def _softmax_parts(
    logits: np.ndarray, safe: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """In place in ``logits``: ``exp(logits - shift)`` (answers, K, K), its sum over the last
    axis (answers, K) and the shift (None where the logits are small enough to need none), so
    ``log Z = log(total) + shift``. The sum adds the K slices: numpy's reduction over a short
    last axis took a quarter of an M-step evaluation."""
    shift = None
    if not safe:
        top = logits.max(axis=2, keepdims=True)
        logits -= top
        shift = top[:, :, 0]
    prob = np.exp(logits, out=logits)
    total = prob[:, :, 0].copy()
    for j in range(1, prob.shape[2]):  # K slices, not a loop over answers
        total += prob[:, :, j]
    return prob, total, shift
