"""Every error and warning privtd raises.

Messages follow one pattern: what was wrong, what was given, what to do.
"""

from __future__ import annotations

__all__ = [
    "PrivtdError",
    "SchemaError",
    "ValidationError",
    "NotNumericError",
    "NotFittedError",
    "BudgetExceededError",
    "ConvergenceWarning",
    "PrivacyLeakWarning",
    "ProtocolError",
]


class PrivtdError(Exception):
    """Base class of every privtd error; the CLI prints its message without a traceback."""


class SchemaError(PrivtdError, KeyError):
    """A table lacks a required column, or names one twice.

    Subclasses ``KeyError`` so callers that catch a missing column keep working.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ValidationError(PrivtdError, ValueError):
    """A value, a parameter or the shape of the data is not acceptable."""


class NotNumericError(ValidationError):
    """Numeric answers were expected and some are not numbers. ``found`` says which, without
    the advice, for callers whose fix is another (``perturb``: the mechanism fixes the kind)."""

    def __init__(self, found: str, advice: str) -> None:
        super().__init__(f"{found}. {advice}")
        self.found, self.advice = found, advice

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # pickles across processes
        return type(self), (self.found, self.advice)


class NotFittedError(PrivtdError, AttributeError):
    """A fitted attribute was read before ``fit`` was called."""


class BudgetExceededError(PrivtdError):
    """A perturbation would take a worker past their privacy budget; nothing was sent."""


class ProtocolError(PrivtdError):
    """A party of the secure protocol sent a message that breaks the protocol (malformed, out of
    range, for the wrong round) or stopped answering; the round produces no sum."""


class ConvergenceWarning(UserWarning):
    """An iterative estimator stopped at ``max_iter`` before meeting ``tol``."""


class PrivacyLeakWarning(UserWarning):
    """A configuration gives weaker protection than a user would likely assume."""
