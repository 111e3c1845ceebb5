"""Every error and warning privtd raises.

Messages follow one pattern: what was wrong, what was given, what to do. They speak in the
library's terms (parameter names); an error about one parameter names it in ``param`` too, so
that a front end can point at its own spelling: the CLI appends the option of the command run.
"""

from __future__ import annotations

__all__ = [
    "PrivtdError",
    "PrivtdWarning",
    "SchemaError",
    "ValidationError",
    "NotNumericError",
    "NotFittedError",
    "BudgetExceededError",
    "CeilingExceededError",
    "ServiceError",
    "ConvergenceWarning",
    "PrivacyLeakWarning",
    "ProtocolError",
    "DropoutError",
]


class PrivtdError(Exception):
    """Base class of every privtd error; the CLI prints its message without a traceback.

    ``param`` names the parameter (or the parameters, a tuple) the error is about, as the
    Python API spells it (``"on_missing"``, ``"method_params"``), or is None.
    """

    def __init__(self, *args: object, param: str | tuple[str, ...] | None = None) -> None:
        super().__init__(*args)
        self.param = param


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

    def __init__(self, found: str, advice: str, *, param: str | None = None) -> None:
        super().__init__(f"{found}. {advice}", param=param)
        self.found, self.advice = found, advice

    def __reduce__(self) -> tuple[type, tuple[str, str], dict[str, object]]:  # across processes
        return type(self), (self.found, self.advice), {"param": self.param}


class NotFittedError(PrivtdError, AttributeError):
    """A fitted attribute was read before ``fit`` was called."""


class BudgetExceededError(PrivtdError):
    """A perturbation would take a worker past their privacy budget; nothing was sent."""


class CeilingExceededError(BudgetExceededError):
    """A campaign or a submission is past the worker's own ceiling; nothing was sent."""


class ServiceError(PrivtdError):
    """The server refused a request (4xx) or could not be reached after the retries.

    ``transient`` is True where the same request may succeed later (no connection, a 5xx, a
    409 sent with ``Retry-After`` because a concurrent request held the row), False for a
    refusal the same request will always get. ``param``: the parameter the server's refusal
    names, where it names one.
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        transient: bool = False,
        param: str | tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(f"server answered {status}: {detail}" if status else detail, param=param)
        self.status = status
        self.detail = detail
        self.transient = transient

    def __reduce__(self) -> tuple[type, tuple[int, str], dict[str, object]]:  # across processes
        return type(self), (self.status, self.detail), dict(self.__dict__)


class ProtocolError(PrivtdError):
    """A party of the secure protocol sent a message that breaks the protocol (malformed, out of
    range, for the wrong round) or stopped answering; the round produces no sum."""


class DropoutError(ProtocolError):
    """A worker dropped out of a secure run, and the run stopped rather than release a sum over
    fewer workers (which, against the earlier sums, would reveal the missing worker's answers)."""


class PrivtdWarning(UserWarning):
    """Base class of privtd's warnings; ``param`` as in :class:`PrivtdError`."""

    def __init__(self, *args: object, param: str | tuple[str, ...] | None = None) -> None:
        super().__init__(*args)
        self.param = param


class ConvergenceWarning(PrivtdWarning):
    """An iterative estimator stopped at ``max_iter`` before meeting ``tol``."""


class PrivacyLeakWarning(PrivtdWarning):
    """A configuration gives weaker protection than a user would likely assume."""
