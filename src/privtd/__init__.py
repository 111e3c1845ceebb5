"""privtd: privacy-preserving truth discovery for crowdsourcing.

Answers come in (:class:`Answers`, :mod:`privtd.io` for platform exports,
:mod:`privtd.datasets`), are aggregated on the server's side (:mod:`privtd.inference`) and are
measured (:func:`evaluate`).

Submodules and the names below load on first use (PEP 562), so ``import privtd`` and
``privtd --help`` stay fast; ``privtd.Answers`` and ``from privtd import inference`` work as
usual.
"""

# No ``from __future__ import annotations`` and no bare helper imports here: each would show up
# as a public name (``privtd.annotations``); the helpers below go by private aliases.
import importlib as _importlib
import importlib.util as _importlib_util
import typing as _typing

from .errors import (
    BudgetExceededError,
    ConvergenceWarning,
    NotFittedError,
    PrivacyLeakWarning,
    SchemaError,
    ValidationError,
)

if _typing.TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers
    from . import datasets, inference
    from ._config import config_context, get_config, set_config
    from .answers import Answers, as_answers
    from .evaluation import evaluate
    from .inference import METHODS, make_estimator

__version__ = "0.1.0"

__all__ = [
    "Answers",
    "as_answers",
    "datasets",
    "inference",
    "evaluate",
    "METHODS",
    "make_estimator",
    "config_context",
    "get_config",
    "set_config",
    "SchemaError",
    "ValidationError",
    "NotFittedError",
    "BudgetExceededError",
    "ConvergenceWarning",
    "PrivacyLeakWarning",
    "__version__",
]

# Public name -> the submodule that defines it (None: the name is the submodule itself).
_LAZY: dict[str, str | None] = {
    "Answers": "answers",
    "as_answers": "answers",
    "evaluate": "evaluation",
    "METHODS": "inference",
    "make_estimator": "inference",
    "config_context": "_config",
    "get_config": "_config",
    "set_config": "_config",
    "datasets": None,
    "inference": None,
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        module = _importlib.import_module(f".{_LAZY[name] or name}", __name__)
        value = module if _LAZY[name] is None else getattr(module, name)
    elif not name.startswith("_") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        value = _importlib.import_module(f".{name}", __name__)  # privtd.mechanisms and the like
    else:
        raise AttributeError(f"module 'privtd' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
