"""One way to turn the ``rng`` argument into a Generator."""

from __future__ import annotations

import numbers

import numpy as np

from .errors import ValidationError

RNGLike = np.random.Generator | int | None


def check_rng(rng: RNGLike) -> np.random.Generator:
    """Normalise ``rng``: a Generator is used as is, an int seeds a new one, None draws OS entropy.

    Never falls back to numpy's global state, so results depend only on what the caller passed.
    This serves simulation and estimators; a mechanism's real release (``rng=None``) does not
    come here: it draws from the OS cryptographic generator (``privtd.mechanisms._random``).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        if int(rng) < 0:
            raise ValidationError(
                f"The 'rng' seed must be a non-negative integer. Got {rng}. Pass a seed >= 0."
            )
        return np.random.default_rng(int(rng))
    raise ValidationError(
        "The 'rng' parameter must be a numpy Generator, an int seed or None. "
        f"Got {type(rng).__name__}. Pass np.random.default_rng(seed) or an int."
    )
