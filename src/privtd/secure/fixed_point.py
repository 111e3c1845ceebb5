"""Fixed-point encoding of real contributions as 64-bit integers
(docs/algorithms.md#fixed-point-encoding).

A value ``r`` is sent as ``round(r * 2**F)`` in two's complement modulo ``2**64``. Sums of
encoded values are exact modulo ``2**64``, so a sum decodes correctly as long as the true sum
stays inside the signed 64-bit range: each party checks its own values against
:func:`value_bound` before sending. Each rounding is off by at most ``2**-(F+1)``, so a sum over
``J`` parties is off by at most ``J * 2**-(F+1)`` (:func:`sum_error_bound`); this is the whole of
the "approximation" P2 measures.
"""

from __future__ import annotations

import numpy as np

from ..errors import ProtocolError

#: Default fraction bits: a sum over 64 workers is off by at most 2.9e-11, and a contribution may
#: be up to 2**23 / (J + 1) in absolute value (log-probabilities are at most 23 here).
FRACTION_BITS = 40


def value_bound(fraction_bits: int, n_parties: int) -> float:
    """The largest ``|value|`` one party may contribute so that ``n_parties`` of them sum safely."""
    return float(2 ** (63 - fraction_bits)) / (n_parties + 1)


def sum_error_bound(fraction_bits: int, n_parties: int) -> float:
    """The most a decoded sum over ``n_parties`` contributions can differ from the true sum."""
    return n_parties * 2.0 ** -(fraction_bits + 1)


def encode(values: np.ndarray, fraction_bits: int, bound: float) -> np.ndarray:
    """``uint64`` codes of ``values``; a value that is not finite or above ``bound`` raises."""
    values = np.asarray(values, dtype=np.float64).ravel()
    bad = ~np.isfinite(values) | (np.abs(values) > bound)
    if bad.any():
        first = values[np.flatnonzero(bad)[0]]
        raise ProtocolError(
            f"{int(bad.sum())} contribution(s) cannot be encoded (first: {first}); each must be "
            f"finite and at most {bound:.4g} in absolute value."
        )
    return np.rint(values * 2.0**fraction_bits).astype(np.int64).view(np.uint64)


def decode(sums: np.ndarray, fraction_bits: int) -> np.ndarray:
    """Real values from ``uint64`` sums (read as signed 64-bit)."""
    return np.asarray(sums, dtype=np.uint64).view(np.int64) / 2.0**fraction_bits
