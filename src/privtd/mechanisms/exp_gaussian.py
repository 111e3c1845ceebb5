"""P1's mechanism for continuous answers: Gaussian noise whose variance each worker draws once
from an exponential distribution (Li et al., ICDCS 2020; SPEC B1.2, B1.5, C1)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from scipy import integrate, stats

from ..answers import Answers
from ..errors import ValidationError
from ._base import CellMechanism, Unit
from ._random import Draws

# Streams: two uniforms per cell for the normal draw, one per worker for its variance.
_NORMAL_A, _NORMAL_B, _WORKER_VAR = 11, 12, 13


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


def gaussian_delta(epsilon: float, mu: np.ndarray | float) -> np.ndarray:
    """The exact privacy profile of the Gaussian mechanism with ``mu = sensitivity / sigma``
    (Balle & Wang 2018): ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``."""
    mu = np.asarray(mu, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = stats.norm.cdf(mu / 2 - epsilon / mu) - np.exp(epsilon) * stats.norm.cdf(
            -mu / 2 - epsilon / mu
        )
    return np.where(mu > 0, np.clip(out, 0.0, 1.0), 0.0)


@dataclass(frozen=True)
class ExpGaussian(CellMechanism):
    """Each worker privately draws a noise variance ``v_u ~ Exp(rate)`` (mean ``1 / rate``) once,
    and adds ``N(0, v_u)`` noise to each of its answers (SPEC B1.2). ``low`` and ``high`` declare
    the answer range; its width is the sensitivity ``Delta``.

    Guarantee (derived, SPEC B1.5 result 1, exact)
        A zero-mean Gaussian whose variance is Exp(rate) is exactly Laplace with scale
        ``1 / sqrt(2 rate)``, so one report is pure ``epsilon = Delta sqrt(2 rate)`` LDP, tight.
    Caveat (SPEC B1.5 result 2, C3b)
        All of a worker's answers share ``v_u``; an adversary who learns it (for example from
        the worker's other answers) faces a Gaussian mechanism per answer, whose guarantee is
        only ``(epsilon, delta(epsilon))`` with :meth:`delta_if_variance_revealed` (large, as the
        exponential puts mass near 0). P1's own (epsilon, delta) constants could not be
        recovered; :meth:`paper_style_epsilon` is our derivation of its structure (SPEC B1.5).
    Cost
        One uniform per worker, two per answer.
    Utility
        Noise of mean absolute value ``1 / sqrt(2 rate)`` (SPEC B1.2); truth-discovery weights
        discount the noisy workers.
    """

    rate: float
    low: float
    high: float
    name: ClassVar[str] = "exp-gaussian"
    unit: ClassVar[Unit] = "report"
    kind: ClassVar[Literal["categorical", "numeric"]] = "numeric"

    def __post_init__(self) -> None:
        _finite_positive("ExpGaussian", "rate", self.rate)
        for name in ("low", "high"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValidationError(
                    f"The '{name}' parameter of ExpGaussian must be a finite float. Got {value!r}."
                )
        if not self.low < self.high:
            raise ValidationError(
                f"ExpGaussian needs low < high (the declared answer range). "
                f"Got low={self.low}, high={self.high}."
            )

    @property
    def sensitivity(self) -> float:
        return float(self.high - self.low)

    @property
    def laplace_scale(self) -> float:
        """The scale of the Laplace law one report's noise follows."""
        return 1.0 / math.sqrt(2.0 * self.rate)

    @property
    def epsilon(self) -> float:
        return self.sensitivity * math.sqrt(2.0 * self.rate)

    def _guarantee_note(self) -> str:
        return (
            "pure per report while v_u stays hidden; if v_u is learned each answer is only "
            "(epsilon, delta_if_variance_revealed(epsilon)) (SPEC B1.5, derived)"
        )

    @classmethod
    def from_epsilon(  # type: ignore[override]
        cls, epsilon: float, low: float, high: float
    ) -> ExpGaussian:
        """``rate = epsilon^2 / (2 Delta^2)``."""
        eps = _finite_positive("ExpGaussian", "epsilon", epsilon)
        width = float(high) - float(low)
        if not width > 0:
            raise ValidationError(f"ExpGaussian needs low < high. Got low={low}, high={high}.")
        return cls(eps * eps / (2.0 * width * width), float(low), float(high))

    @classmethod
    def from_noise_level(
        cls, noise_level: float, error_rate: float, low: float, high: float
    ) -> ExpGaussian:
        """P1's noise level ``c = lambda1 / lambda2`` (SPEC B1.2): ``rate = lambda1 / c``."""
        c = _finite_positive("ExpGaussian", "noise_level", noise_level)
        lam1 = _finite_positive("ExpGaussian", "error_rate", error_rate)
        return cls(lam1 / c, float(low), float(high))

    def delta_if_variance_revealed(self, epsilon: float) -> float:
        """``delta(eps) = E_v[delta_G(eps; Delta / sqrt(v))]``, ``v ~ Exp(rate)`` (SPEC B1.5, 2)."""
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
        """Derived (SPEC B1.5 Theorem 4.8-D, not the paper's constants): with ``delta = delta_g +
        delta_v``, ``epsilon = Delta sqrt(2 ln(1.25 / delta_g) rate / ln(1 / (1 - delta_v)))``."""
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
        u = draws.uniform(_WORKER_VAR, worker_hash, np.zeros(1, dtype=np.uint64))
        return -np.log1p(-u) / self.rate

    def _perturb_codes(self, codes, worker_index, draws, worker_hash, task_hash):
        var = self.worker_variances(worker_hash, draws)
        wh = worker_hash[worker_index]
        # Box-Muller from two uniforms per cell, so the draw is a function of the cell's ids.
        u1 = 1.0 - draws.uniform(_NORMAL_A, wh, task_hash)  # in (0, 1]
        u2 = draws.uniform(_NORMAL_B, wh, task_hash)
        normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        return np.asarray(codes, dtype=float) + np.sqrt(var[worker_index]) * normal
