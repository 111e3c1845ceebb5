"""P1's mechanism for continuous answers: Gaussian noise whose variance each worker draws once
from an exponential distribution (Li et al., ICDCS 2020), released on a public grid with the
discrete Gaussian (Canonne, Kamath, Steinke, NeurIPS 2020) so that floating point leaks nothing
(Mironov, CCS 2012)."""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ..answers import Answers
from ..errors import ValidationError
from ._base import CellMechanism, Unit, _check_release_size
from ._discrete import dgaussian_log_norm, opendp_gaussian, sample_dgaussian
from ._random import Draws, secure_exponential

# Streams: one uniform per worker for its variance; the discrete Gaussian's rejection rounds
# use three streams per round from _NORMAL on.
_WORKER_VAR, _NORMAL = 13, 100
#: The worker's noise standard deviation, in grid steps, is rounded to a multiple of 2^-30.
_SIGMA_QUANTUM = 2.0**30
#: The default grid: the declared range in 1024 steps.
DEFAULT_STEPS = 1024


def _finite_positive(owner: str, name: str, value: float) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not (value > 0 and math.isfinite(value))
    ):
        raise ValidationError(
            f"The '{name}' parameter of {owner} must be a float in (0, inf). Got {value!r}."
        )
    return float(value)


@functools.lru_cache(maxsize=64)
def _cached_figures(mechanism: ExpGaussian, k: int) -> tuple[float, float]:
    """A frozen mechanism's worker-level figures are fixed: compute them once per ``k``."""
    return mechanism._worker_figures(k)


def gaussian_delta(epsilon: float, mu: np.ndarray | float) -> np.ndarray:
    """The exact privacy profile of the Gaussian mechanism with ``mu = sensitivity / sigma``
    (Balle & Wang 2018): ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``."""
    from scipy import stats  # on use: costs ~1 s to import

    mu = np.asarray(mu, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = stats.norm.cdf(mu / 2 - epsilon / mu) - np.exp(epsilon) * stats.norm.cdf(
            -mu / 2 - epsilon / mu
        )
    return np.where(mu > 0, np.clip(out, 0.0, 1.0), 0.0)


@dataclass(frozen=True)
class ExpGaussian(CellMechanism):
    """Each worker privately draws a noise variance ``v_u ~ Exp(rate)`` (mean ``1 / rate``, in
    squared answer units) once, and adds Gaussian noise of that variance to each of its answers
    (Li et al., ICDCS 2020). ``low`` and ``high`` declare the answer range.

    The public grid
        Releases lie on ``low + J * g``, ``g = granularity`` (default ``(high - low) / 1024``),
        ``J`` an integer. An answer ``x`` is coded ``k = floor((x - low) / g + 1/2)`` (within
        ``[0, n]``, ``n = floor((high - low) / g + 1/2)``); the worker's standard deviation in
        grid steps is ``s_u = sqrt(v_u) / g`` rounded to a multiple of 2^-30; each release is
        ``k + N_Z(0, s_u^2)``, the discrete Gaussian, written as ``low + J * g``.
    Guarantee (exact on the grid)
        Per report with ``v_u`` marginalised: ``epsilon = n g sqrt(2 rate)``, which is P1's
        continuous ``(high - low) sqrt(2 rate)`` with the range rounded to whole grid steps.
        Over a continuous ``v_u`` a zero-mean Gaussian of variance ``Exp(rate)`` is exactly
        Laplace of scale ``beta = 1 / (g sqrt(2 rate))`` grid steps; the discrete Gaussian
        divides each component by its normaliser ``Z(s) = sqrt(2 pi) s h(s)^-1`` with ``h``
        increasing (Poisson summation), and since the law of ``s`` given the output ``j + n``
        dominates that given ``j`` (monotone likelihood ratio), the loss
        ``ln m(j) / m(j + n)`` never exceeds ``n / beta`` and tends to it as ``j`` grows.
        :meth:`report_loss` computes that loss numerically (tests check it against
        ``epsilon``); the 2^-30 rounding of ``s_u`` moves it by far less than the quadrature
        error. Every grid point has positive probability under every answer, so no release
        rules an answer out.
    What a worker releasing ``k`` reports under one draw gets (docs/privacy.md)
        All of a worker's reports share ``v_u``, and the other reports tell the server about it.
        :meth:`answer_epsilon` (one report given the other ``k - 1``) and
        :meth:`release_epsilon` (the whole release) are the exact pure figures on the grid,
        computed numerically. They are finite (every grid point has positive probability) but
        enormous and growing with ``k`` and with the grid's resolution, whatever ``epsilon``
        was stated: other reports that land exactly on their answers say ``v_u`` is below a
        grid step, and then one report gives its answer away (with 1,024 steps and stated 1:
        about 3.0 given one other report, 124 given 19, 594 given 99; the whole release of 20,
        152). A worker who knew its ``v_u`` faces a Gaussian mechanism per answer, only
        ``(epsilon, delta(epsilon))`` with :meth:`delta_if_variance_revealed`.
    Sampling
        A real release (``rng=None``): ``v_u`` from the OS cryptographic generator with the
        exponential's whole tail (:func:`~privtd.mechanisms._random.secure_exponential`), the
        discrete Gaussian from OpenDP's exact sampler (extra ``dp``). A seed or Generator runs
        the same law vectorised (Canonne-Kamath-Steinke rejection), for simulation, with
        ``v_u`` from a 53-bit uniform (so at most ``53 ln 2 / rate``).
    Utility
        Noise of mean absolute value about ``1 / sqrt(2 rate)``, plus the grid's rounding of
        the answer (at most ``g / 2``); truth-discovery weights discount the noisy workers.
    """

    rate: float
    low: float
    high: float
    granularity: float | None = None
    name: ClassVar[str] = "exp-gaussian"
    unit: ClassVar[Unit] = "report"
    kind: ClassVar[Literal["categorical", "numeric"]] = "numeric"

    def __post_init__(self) -> None:
        _finite_positive("ExpGaussian", "rate", self.rate)
        for name in ("low", "high"):
            value = getattr(self, name)
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
            ):
                raise ValidationError(
                    f"The '{name}' parameter of ExpGaussian must be a finite float. Got {value!r}."
                )
        if not self.low < self.high:
            raise ValidationError(
                f"ExpGaussian needs low < high (the declared answer range). "
                f"Got low={self.low}, high={self.high}."
            )
        if self.granularity is None:
            object.__setattr__(
                self, "granularity", (float(self.high) - float(self.low)) / DEFAULT_STEPS
            )
        g = _finite_positive("ExpGaussian", "granularity", self.granularity)  # type: ignore[arg-type]
        object.__setattr__(self, "granularity", g)
        steps = (float(self.high) - float(self.low)) / g
        if not 1 <= steps + 0.5 < 2.0**40:
            raise ValidationError(
                f"The 'granularity' of ExpGaussian must split [low, high] into 1 to 2^40 grid "
                f"steps. Got {g!r} for [{self.low}, {self.high}] ({steps:.3g} steps)."
            )

    @property
    def step(self) -> float:
        """The grid step ``g``."""
        assert self.granularity is not None
        return self.granularity

    @property
    def n_steps(self) -> int:
        """``n``: the declared range in grid steps, the sensitivity in grid units."""
        return int(math.floor((float(self.high) - float(self.low)) / self.step + 0.5))

    @property
    def sensitivity(self) -> float:
        """The range rounded to whole grid steps, ``n g``, in answer units."""
        return self.n_steps * self.step

    @property
    def laplace_scale(self) -> float:
        """The scale of the Laplace law one report's noise follows in the continuous limit."""
        return 1.0 / math.sqrt(2.0 * self.rate)

    @property
    def epsilon(self) -> float:
        return self.sensitivity * math.sqrt(2.0 * self.rate)

    @property
    def variance_law(self) -> tuple[str, float]:
        """``("exp", rate)``: each worker's variance ``v_u ~ Exp(rate)``."""
        return "exp", float(self.rate)

    @property
    def noise_std(self) -> float:
        """The standard deviation of one report's noise, ``v_u`` marginalised:
        ``sqrt(E[v_u]) = 1 / sqrt(rate)`` (the grid's rounding, at most ``g / 2``, aside)."""
        return 1.0 / math.sqrt(self.rate)

    @property
    def noise_mae(self) -> float:
        """The mean absolute value of one report's noise: the Laplace scale
        ``1 / sqrt(2 rate)`` of its continuous limit."""
        return self.laplace_scale

    def _guarantee_note(self) -> str:
        return (
            f"one report alone, exact on the grid low + J * {self.step:.6g} (discrete Gaussian, "
            "v_u marginalised; P1's figure), not a worker-level guarantee: reports share v_u "
            "(answer_epsilon(k), release_epsilon(k))"
        )

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, low: float, high: float, granularity: float | None = None
    ) -> ExpGaussian:
        """``rate = epsilon^2 / (2 (n g)^2)``: the grid's exact per-report epsilon."""
        eps = _finite_positive("ExpGaussian", "epsilon", epsilon)
        width = float(high) - float(low)
        if not width > 0:
            raise ValidationError(f"ExpGaussian needs low < high. Got low={low}, high={high}.")
        probe = cls(1.0, float(low), float(high), granularity)
        return cls(eps * eps / (2.0 * probe.sensitivity**2), float(low), float(high), probe.step)

    @classmethod
    def from_noise_level(
        cls,
        noise_level: float,
        error_rate: float,
        low: float,
        high: float,
        granularity: float | None = None,
    ) -> ExpGaussian:
        """P1's noise level ``c = lambda1 / lambda2``: ``rate = lambda1 / c``."""
        c = _finite_positive("ExpGaussian", "noise_level", noise_level)
        lam1 = _finite_positive("ExpGaussian", "error_rate", error_rate)
        return cls(lam1 / c, float(low), float(high), granularity)

    # ------------------------------------------------------------------ the grid's law
    @property
    def grid_origin(self) -> float:
        return float(self.low)

    @property
    def grid_step(self) -> float:
        return self.step

    def grid_code(self, values: np.ndarray) -> np.ndarray:
        """``k = floor((x - low) / g + 1/2)``, within ``[0, n]``."""
        k = np.floor((np.asarray(values, dtype=float) - float(self.low)) / self.step + 0.5)
        return np.clip(k, 0, self.n_steps).astype(np.int64)

    def grid_log_pmf(self, offset: np.ndarray) -> np.ndarray:
        """``log m(j)``: the log-probability that a report lands ``j`` grid steps from its
        answer's code, ``v_u`` marginalised (numerical quadrature over ``v``; finite for every
        integer ``j``)."""
        j = np.abs(np.asarray(offset, dtype=float))
        uniq, inverse = np.unique(j, return_inverse=True)
        return self._log_mixture(uniq)[inverse].reshape(j.shape)

    def _log_mixture(self, j: np.ndarray, nodes: int = 4000) -> np.ndarray:
        """``log E_s[N_Z(0, s^2)(j)]`` with ``s^2 = v / g^2``, ``v ~ Exp(rate)``: trapezoid rule
        in ``log w`` (``w = s^2 ~ Exp(lam)``, ``lam = rate g^2``), which converges geometrically
        for this smooth integrand; log-sum-exp keeps far tails finite."""
        lam = self.rate * self.step**2
        log_w = np.linspace(math.log(1e-16 / lam), math.log(800.0 / lam), nodes)
        w = np.exp(log_w)
        s = np.sqrt(w)
        # Below s = 1e-3, exp(-1 / (2 s^2)) underflows: all the mass sits at 0.
        log_norm = np.array([dgaussian_log_norm(x) if x >= 1e-3 else 0.0 for x in s])
        # density of w in log w: lam w exp(-lam w)
        log_weight = math.log(lam) + log_w - lam * w + math.log(log_w[1] - log_w[0])
        out = np.empty(j.shape)
        for lo in range(0, j.size, 256):
            jj = j[lo : lo + 256, None]
            terms = log_weight[None, :] - jj * jj / (2 * w[None, :]) - log_norm[None, :]
            top = terms.max(axis=1, keepdims=True)
            out[lo : lo + 256] = (top + np.log(np.exp(terms - top).sum(axis=1, keepdims=True)))[
                :, 0
            ]
        return out

    def report_loss(self, offsets: np.ndarray) -> np.ndarray:
        """``ln m(a) / m(a + n)`` for each ``a >= 0``: the privacy loss of a report ``a`` steps
        beyond the nearer of two answers ``n`` steps apart, the worst pair (numerical)."""
        a = np.asarray(offsets, dtype=float)
        return self.grid_log_pmf(a) - self.grid_log_pmf(a + self.n_steps)

    # ------------------------------------------------------------------ a worker's k reports
    def _log_release(self, squares: np.ndarray, k: int, nodes: int = 8000) -> np.ndarray:
        """``l_k(S) = log E_s[exp(-S / (2 s^2)) / Z(s)^k]``: the log-probability of one particular
        set of ``k`` reports whose offsets from the answers' codes have squares summing to
        ``S``, under one shared ``v_u`` (numerical, as :meth:`_log_mixture`). The offsets enter
        through ``S`` alone, so ``S`` is what the reports tell about ``v_u``."""
        squares = np.asarray(squares, dtype=float)
        lam = self.rate * self.step**2
        # The integrand in w peaks near sqrt(S / (2 lam)) for large S: reach well beyond it.
        top = max(800.0 / lam, 50.0 * math.sqrt(float(squares.max(initial=0.0)) / lam))
        log_w = np.linspace(math.log(1e-16 / lam), math.log(top), nodes)
        w = np.exp(log_w)
        log_norm = self._log_norms(np.sqrt(w))
        log_weight = math.log(lam) + log_w - lam * w + math.log(log_w[1] - log_w[0]) - k * log_norm
        out = np.empty(squares.shape)
        flat, result = squares.ravel(), out.reshape(-1)
        for lo in range(0, flat.size, 128):
            terms = log_weight[None, :] - flat[lo : lo + 128, None] / (2 * w[None, :])
            top_term = terms.max(axis=1, keepdims=True)
            result[lo : lo + 128] = (
                top_term + np.log(np.exp(terms - top_term).sum(axis=1, keepdims=True))
            )[:, 0]
        return out

    @staticmethod
    def _log_norms(s: np.ndarray) -> np.ndarray:
        """``log Z(s)`` elementwise; below ``s = 1e-3`` all the mass sits at 0."""
        return np.array([dgaussian_log_norm(x) if x >= 1e-3 else 0.0 for x in s])

    def _offset_candidates(self, k: int) -> np.ndarray:
        """Offsets (grid steps) at which to look for the worst case: every one up to 64, then
        geometrically out to hundreds of noise scales, where the loss has reached its limit."""
        beta = 1.0 / (self.step * math.sqrt(2.0 * self.rate))  # Laplace scale, grid steps
        far = max(8.0 * self.n_steps, 400.0 * beta * math.sqrt(k), 128.0)
        return np.unique(np.concatenate([np.arange(65.0), np.geomspace(65.0, far, 120)]))

    def answer_epsilon(self, k: int) -> float:
        """One report's loss given the worker's other ``k - 1`` reports under the same ``v_u``
        (numerical, pure, on the grid).

        The reports depend on the answers through ``S``, the sum of squared offsets, and
        ``l_k(S)`` is convex in ``S`` (a log-Laplace transform), so the worst other reports are
        those exactly on their answers (``S = 0``: they say ``v_u`` is tiny) and the loss is
        ``max_j l_k(j^2) - l_k((j + n)^2)`` over the report's offset ``j >= 0``, which tends to
        ``epsilon`` as ``j`` grows. For ``k = 1`` it is ``epsilon``."""
        _check_release_size(k)
        if k <= 1:
            return self.epsilon if k else 0.0
        return _cached_figures(self, int(k))[0]

    def release_epsilon(self, k: int) -> float:
        """The loss of the worker's whole release of ``k`` reports under one ``v_u`` (numerical,
        pure, on the grid).

        Over answers ``n`` steps apart in any places, ``S`` against ``S'``: for a given ``S``,
        ``S'`` is largest, ``(sqrt(S) + n sqrt(k))^2``, with every offset equal, so the loss is
        ``max_j l_k(k j^2) - l_k(k (j + n)^2)`` over ``j >= 0``, tending to ``sqrt(k) epsilon``
        as ``j`` grows. For ``k = 1`` it is ``epsilon``."""
        _check_release_size(k)
        if k <= 1:
            return self.epsilon if k else 0.0
        return _cached_figures(self, int(k))[1]

    def _worker_figures(self, k: int) -> tuple[float, float]:
        n = self.n_steps
        j = self._offset_candidates(k)
        # One quadrature grid for all four, reaching past the largest S.
        one_near, one_far, whole_near, whole_far = np.split(
            self._log_release(
                np.concatenate([j * j, (j + n) ** 2, k * j * j, k * (j + n) ** 2]), k
            ),
            4,
        )
        one, whole = one_near - one_far, whole_near - whole_far
        return (
            float(max(one.max(), self.epsilon)),
            float(max(whole.max(), math.sqrt(k) * self.epsilon)),
        )

    def delta_if_variance_revealed(self, epsilon: float) -> float:
        """``delta(eps) = E_v[delta_G(eps; Delta / sqrt(v))]``, ``v ~ Exp(rate)`` (derived;
        docs/algorithms.md#exp-gaussian).

        Computed for the continuous Gaussian: on the grid it is an approximation of the discrete
        Gaussian's profile, which Canonne, Kamath and Steinke (NeurIPS 2020) show to be close.
        """
        from scipy import integrate  # on use: costs ~0.3 s to import

        eps = float(epsilon)
        if eps < 0:
            raise ValidationError(f"epsilon must be >= 0. Got {epsilon}.")

        def integrand(v: float) -> float:
            mu = self.sensitivity / math.sqrt(v) if v > 0 else math.inf
            d = 1.0 if math.isinf(mu) else float(gaussian_delta(eps, mu))
            return d * self.rate * math.exp(-self.rate * v)

        value, _ = integrate.quad(integrand, 0.0, np.inf, limit=200)
        return float(min(1.0, max(0.0, value)))

    def paper_style_epsilon(self, delta_g: float, delta_v: float) -> float:
        """Derived (docs/algorithms.md#exp-gaussian-derived-results, not P1's constants): with
        ``delta = delta_g + delta_v``,
        ``epsilon = Delta sqrt(2 ln(1.25 / delta_g) rate / ln(1 / (1 - delta_v)))``."""
        for name, value in (("delta_g", delta_g), ("delta_v", delta_v)):
            if not 0 < value < 1:
                raise ValidationError(f"{name} must be in (0, 1). Got {value}.")
        return self.sensitivity * math.sqrt(
            2 * math.log(1.25 / delta_g) * self.rate / math.log(1 / (1 - delta_v))
        )

    # ------------------------------------------------------------------ running
    def _check_answers(self, answers: Answers) -> None:
        if answers.is_categorical:
            raise ValidationError("ExpGaussian perturbs numeric answers; these are categorical.")
        self._check_range(answers.value)

    def _check_range(self, values: np.ndarray) -> None:
        out = (values < self.low) | (values > self.high)
        if out.any():
            raise ValidationError(
                f"{int(out.sum())} answer(s) fall outside the declared range [{self.low}, "
                f"{self.high}] (first: {values[out][0]}); the guarantee assumes that range. "
                "Fix the answers or declare a wider range."
            )

    def _encode_local(
        self, answers: Sequence[Hashable] | np.ndarray, labels: Sequence[Hashable] | None
    ) -> np.ndarray:
        try:
            values = np.asarray(answers, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValidationError("ExpGaussian perturbs numbers; got non-numeric answers.") from exc
        if not np.isfinite(values).all():
            raise ValidationError("Answers must be finite numbers.")
        self._check_range(values)
        return values

    def worker_variances(self, worker_hash: np.ndarray, draws: Draws) -> np.ndarray:
        """Each worker's secret ``v_u ~ Exp(rate)``. A real release draws the exponential with
        its whole tail (:func:`secure_exponential`): ``-ln(u)`` of a 53-bit ``u`` stops at
        ``53 ln 2 / rate``, and past about 60 noise scales the report loss of a mixture so
        truncated exceeds ``epsilon`` (``benchmarks/attacks/attack_expgauss_tail.py``).
        Simulation keeps ``-ln(u) / rate`` with ``u`` a 53-bit uniform in (0, 1]."""
        if draws.real:
            return secure_exponential(np.shape(worker_hash)) / self.rate
        u = 1.0 - draws.uniform(_WORKER_VAR, worker_hash, np.zeros(1, dtype=np.uint64))
        return -np.log(u) / self.rate

    def worker_sigmas(self, worker_hash: np.ndarray, draws: Draws) -> np.ndarray:
        """Each worker's noise standard deviation in grid steps, a multiple of 2^-30 (exact)."""
        v = self.worker_variances(worker_hash, draws)
        return np.floor(np.sqrt(v) / self.step * _SIGMA_QUANTUM + 0.5) / _SIGMA_QUANTUM

    def _perturb_codes(self, codes, worker_index, draws, worker_hash, task_hash):
        sigma = self.worker_sigmas(worker_hash, draws)
        k = self.grid_code(codes)
        if draws.real:
            out = np.empty_like(k)
            order = np.argsort(worker_index, kind="stable")
            bounds = np.flatnonzero(np.diff(worker_index[order])) + 1
            for cells in np.split(order, bounds):  # one exact sampler per worker (its own s_u)
                if cells.size:
                    out[cells] = opendp_gaussian(k[cells], sigma[worker_index[cells[0]]])
        else:
            wh = worker_hash[worker_index]
            out = k + sample_dgaussian(sigma[worker_index], draws, _NORMAL, wh, task_hash)
        # low + J * g, in that order, so every release is exactly that grid point.
        return float(self.low) + out.astype(np.float64) * self.step
