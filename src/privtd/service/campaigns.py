"""What a campaign's public parameters allow: building its mechanism, and checking that a
submission holds only what that mechanism can output."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ValidationError
from ..inference import METHODS, NO_AWARE_METHOD, RELEASE_METHODS, aware_method
from ..mechanisms import MECHANISMS, make_mechanism
from ..mechanisms._base import CellMechanism, Mechanism
from ..mechanisms.null_aware import KRRNull, NullAwareMechanism, TwoLayerNull

#: Mechanisms a device can run alone, answer by answer (MF needs the whole matrix's profiles).
SERVED = (
    "one-layer",
    "two-layer",
    "binary-rr",
    "exp-gaussian",
    "krr-null",
    "two-layer-null",
    "laplace",
)


def build_mechanism(
    name: str, epsilon: float | None, params: dict[str, Any], labels: Sequence[Any] | None
) -> Mechanism:
    """The campaign's mechanism; a categorical one is sized to the answer domain ``labels``."""
    if name not in SERVED:
        known = ", ".join(SERVED)
        raise ValidationError(
            f"The service runs record-local mechanisms only ({known}); got {name!r}."
        )
    params = dict(params)
    if MECHANISMS[name].kind == "categorical" and labels:
        params.setdefault("n_labels", len(labels))
    return make_mechanism(name, epsilon, **params)


def public_params(mech: Mechanism) -> dict[str, Any]:
    """The mechanism's natural parameters, as JSON (numpy scalars made plain)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in mech.params().items()}


def rebuild(name: str, params: dict[str, Any]) -> Mechanism:
    """The campaign's mechanism from its stored natural parameters."""
    return MECHANISMS[name](**params)


def check_labels(mech: Mechanism, labels: Sequence[Any] | None) -> list[Any] | None:
    if mech.kind == "categorical":
        if not labels or len(set(map(str, labels))) != len(labels):
            raise ValidationError(
                f"The {mech.name} mechanism perturbs labels: pass 'labels', the answer domain, "
                "as a list of distinct labels."
            )
        if isinstance(mech, CellMechanism):
            mech._check_domain(len(labels))
        return list(labels)
    if labels:
        raise ValidationError(f"The {mech.name} mechanism perturbs numbers: drop 'labels'.")
    return None


def pick_method(mech: Mechanism, method: str | None) -> str:
    if method is None:
        method = aware_method(mech)
        if method is None:
            raise ValidationError(
                f"Pass 'method': {mech.name} has no perturbation-aware default "
                f"({NO_AWARE_METHOD.get(mech.name, 'none is implemented')})."
            )
    if method not in METHODS and method not in RELEASE_METHODS:
        raise ValidationError(
            f"Unknown method {method!r}. Choose one of {', '.join([*METHODS, *RELEASE_METHODS])}."
        )
    kinds = (METHODS.get(method) or RELEASE_METHODS[method]).kinds
    if mech.kind not in kinds:
        raise ValidationError(f"Method {method!r} does not fit {mech.kind} answers.")
    return method


def whole_row(mech: Mechanism) -> bool:
    """P3's mechanisms release a worker's whole row, NULLs included, in one submission."""
    return isinstance(mech, NullAwareMechanism)


def encode_values(mech: Mechanism, labels: list[Any] | None, values: Sequence[Any]) -> list[Any]:
    """The stored form of reported values (label codes, or floats; None for a NULL report),
    or a ValidationError naming the first value the mechanism cannot output."""
    if mech.kind == "categorical":
        assert labels is not None
        position = {_label_key(label): i for i, label in enumerate(labels)}
        codes = []
        for v in values:
            code = position.get(_label_key(v))
            if code is None:
                raise ValidationError(
                    f"Value {v!r} is not in the campaign's answer domain {labels}."
                )
            codes.append(code)
        return codes
    nullable = isinstance(mech, KRRNull | TwoLayerNull)
    integral = nullable
    low, high = (
        (mech.low, mech.high) if isinstance(mech, KRRNull | TwoLayerNull) else (-math.inf, math.inf)
    )
    out: list[Any] = []
    for v in values:
        if v is None:
            if not nullable:
                raise ValidationError(f"The {mech.name} mechanism never outputs NULL (null).")
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValidationError(f"Value {v!r} is not a finite number.")
        if integral and (v != int(v) or not low <= v <= high):
            raise ValidationError(
                f"Value {v!r} is outside {mech.name}'s output domain: integers {low}..{high} "
                "or null."
            )
        out.append(float(v))
    return out


def _label_key(label: Any) -> str:
    # JSON carries 1 and "1" differently; a label domain of either kind matches both.
    return str(label)
