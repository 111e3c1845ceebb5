"""Decision rules: from each task's posterior over the labels to one label.

A posterior ``mu[q, y]`` and a cost ``C[y, d]`` of deciding ``d`` when the truth is ``y`` give the
Bayes decision ``argmin_d sum_y mu[q, y] C[y, d]``, the label with the least expected cost. Three
rules are that decision for three costs:

- ``"map"``: every mistake costs 1, so the decision is ``argmax_y mu[q, y]``, the most probable
  label. It maximises the expected accuracy, and where each task's evidence is weak next to a
  skewed class prior it gives every task the majority class.
- ``"balanced"``: a mistake on a task of class ``y`` costs ``1 / p_y`` (``p`` the class prior the
  model fitted), so the decision is ``argmax_y mu[q, y] / p_y``, the label under which the task's
  answers are most likely. It maximises the expected balanced accuracy (the mean of the
  per-class recalls: accuracy as if every class were equally frequent). For a model that fits no
  class prior (its posteriors already treat the labels alike: majority vote, GLAD, MACE,
  ZenCrowd, the one-coin aware model at its default) it is ``"map"``.
- ``"cost"``: the user's costs, per class (missing a task of class ``y`` costs ``c_y``, so the
  decision is ``argmax_y c_y mu[q, y]``) or per pair ``(y, d)`` (unnamed pairs cost 1, a right
  decision 0).

The CLI spells them ``--decision map``, ``--decision balanced`` and ``--decision
cost=LABEL:COST,...`` (per class) or ``cost=TRUTH>DECIDED:COST,...`` (per pair).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from ..errors import ValidationError

__all__ = [
    "DECISIONS",
    "decide",
    "cost_matrix",
    "fitted_prior",
    "parse_decision",
    "one_class_warning",
]

#: The decision rules by name.
DECISIONS = ("map", "balanced", "cost")

Costs = Mapping[Hashable, float] | Mapping[tuple[Hashable, Hashable], float] | pd.DataFrame


def check_decision(owner: str, decision: str | None) -> None:
    """An estimator's ``decision`` parameter: None (its default), "map" or "balanced"."""
    if decision not in (None, "map", "balanced"):
        raise ValidationError(
            f"The 'decision' parameter of {owner} must be None, 'map' or 'balanced'. Got "
            f"{decision!r}. For costs, apply privtd.inference.decide to probas_."
        )


def default_decision(decision: str | None, mechanism: Any) -> str:
    """``decision``, or where None: "balanced" under a mechanism, "map" without one. Under a
    mechanism the aware models' learned class prior can outweigh every task's evidence on skewed
    classes and the most probable label is then one class for every task
    (``benchmarks/results/class_prior.txt``); without one, "map" keeps the plain models'
    decision."""
    if decision is not None:
        return decision
    return "map" if mechanism is None else "balanced"


def fitted_prior(estimator: Any) -> pd.Series | None:
    """The class prior a fitted estimator learned, over the columns of its ``probas_``: its
    ``priors_`` (the Dawid-Skene family), LatentClass's ``prior_`` (the second label's share), or
    None for a model that fits none."""
    prior = getattr(estimator, "priors_", None)
    if isinstance(prior, pd.Series):
        return prior
    share = getattr(estimator, "prior_", None)
    probas = getattr(estimator, "probas_", None)
    if isinstance(share, (float, np.floating)) and probas is not None and probas.shape[1] == 2:
        return pd.Series([1.0 - float(share), float(share)], index=probas.columns)
    return None


def decision_codes(
    mu: np.ndarray, rule: str, prior: np.ndarray | None = None, cost: np.ndarray | None = None
) -> np.ndarray:
    """The decision's label codes for posteriors ``mu[q, y]`` (code level, for the estimators):
    ``prior`` for ``"balanced"`` (None: uniform), ``cost[y, d]`` for ``"cost"``."""
    if rule == "map":
        return np.asarray(mu.argmax(axis=1))
    if rule == "balanced":
        if prior is None:
            return np.asarray(mu.argmax(axis=1))
        # A class the fit gave (almost) no prior mass has posteriors as small: the ratio is
        # still the likelihood ratio, so only an exact zero needs guarding.
        return _best(mu / np.maximum(prior, 1e-300), mu)
    if rule == "cost":
        if cost is None:
            raise ValidationError("The 'cost' decision needs costs.")
        return _best(-(mu @ cost), mu)
    raise ValidationError(f"Unknown decision {rule!r}. Choose one of {', '.join(DECISIONS)}.")


def _best(scores: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Each row's best score; a tie (to 1e-9 relative) goes to the most probable of the tied
    labels. A task whose answers favour no label (none at all, or equal evidence) has scores
    equal up to rounding, and the two kernel backends round differently (they agree to 1e-9):
    without the rule its label would depend on which one ran."""
    top = scores.max(axis=1, keepdims=True)
    tied = scores >= top - 1e-9 * np.abs(top)
    return np.asarray(np.where(tied, mu, -np.inf).argmax(axis=1))


def cost_matrix(costs: Costs, labels: Sequence[Hashable] | pd.Index) -> np.ndarray:
    """``C[y, d]`` over ``labels`` from per-class costs ``{label: cost}`` (a miss of that class),
    per-pair costs ``{(truth, decided): cost}`` (other pairs 1), or a DataFrame with the truths
    as rows and the decisions as columns. A right decision costs 0; every cost given must be a
    finite number > 0 (a free mistake would let a tie overrule a known truth)."""
    index = pd.Index(labels)
    k = len(index)
    if isinstance(costs, pd.DataFrame):
        missing = [x for x in index if x not in costs.index or x not in costs.columns]
        if missing:
            raise ValidationError(
                f"The cost matrix lacks label(s) {missing[:4]}: give a row and a column for "
                f"each of {list(index)}."
            )
        matrix = costs.loc[index, index].to_numpy(dtype=float, copy=True)
        given = matrix[~np.eye(k, dtype=bool)]
        _check_costs(given.tolist())
        np.fill_diagonal(matrix, 0.0)
        return matrix
    if not isinstance(costs, Mapping) or not costs:
        raise ValidationError(
            "costs must be {label: cost}, {(truth, decided): cost} or a DataFrame. "
            f"Got {costs!r}."
        )
    _check_costs(list(costs.values()))
    keys = list(costs)
    pairs = [isinstance(key, tuple) and len(key) == 2 for key in keys]
    if any(pairs) and not all(pairs):
        raise ValidationError(
            "costs mixes per-class and per-pair entries; give one kind ({1: 5} or {(1, 0): 5}).",
            param="costs",
        )
    position = {label: i for i, label in enumerate(index)}

    def code(label: Hashable) -> int:
        if label not in position:
            raise ValidationError(
                f"The cost names label {label!r}, which is not one of {list(index)[:8]}."
            )
        return position[label]

    matrix = np.ones((k, k))
    if all(pairs):
        for key, value in costs.items():
            pair = cast(tuple[Hashable, Hashable], key)
            y, d = code(pair[0]), code(pair[1])
            if y == d:
                raise ValidationError(
                    f"The cost of deciding {pair[0]!r} when the truth is {pair[0]!r} is 0: name "
                    "pairs of two labels."
                )
            matrix[y, d] = float(value)
    else:
        for label, value in costs.items():
            matrix[code(label), :] = float(value)
    np.fill_diagonal(matrix, 0.0)
    return matrix


def _check_costs(values: list[Any]) -> None:
    for value in values:
        ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(
            value, bool
        )
        if not ok or not math.isfinite(float(value)) or float(value) <= 0:
            raise ValidationError(f"Each cost must be a finite number > 0. Got {value!r}.")


def decide(
    probas: pd.DataFrame,
    rule: str = "map",
    *,
    prior: pd.Series | np.ndarray | None = None,
    costs: Costs | None = None,
) -> pd.Series:
    """Each task's label under a decision rule (module doc) from a fit's ``probas_``.

    Parameters
    ----------
    probas : DataFrame
        Posteriors, tasks by labels (an estimator's ``probas_``).
    rule : {"map", "balanced", "cost"}
    prior : Series or array, optional
        The class prior the model fitted (its ``priors_``), for ``"balanced"``. None: the model
        fitted none, and ``"balanced"`` is ``"map"``.
    costs : mapping or DataFrame, optional
        For ``"cost"``: see :func:`cost_matrix`.

    Examples
    --------
    >>> import pandas as pd
    >>> from privtd.inference import decide
    >>> mu = pd.DataFrame({"no": [0.9, 0.7], "yes": [0.1, 0.3]}, index=["t1", "t2"])
    >>> decide(mu).tolist()
    ['no', 'no']
    >>> decide(mu, "balanced", prior=pd.Series({"no": 0.8, "yes": 0.2})).tolist()
    ['no', 'yes']
    >>> decide(mu, "cost", costs={"yes": 5}).tolist()
    ['no', 'yes']
    """
    if rule not in DECISIONS:
        raise ValidationError(f"Unknown decision {rule!r}. Choose one of {', '.join(DECISIONS)}.")
    labels = probas.columns
    mu = probas.to_numpy(dtype=float)
    prior_array = None
    if rule == "balanced" and prior is not None:
        if isinstance(prior, pd.Series):
            prior = prior.reindex(labels)
            if prior.isna().any():
                raise ValidationError("The prior must give a probability for every label.")
        prior_array = np.asarray(prior, dtype=float)
        if prior_array.shape != (len(labels),):
            raise ValidationError(
                f"The prior must hold one probability per label ({len(labels)}). Got "
                f"{prior_array.shape}."
            )
    if rule == "cost" and costs is None:
        raise ValidationError(
            "The 'cost' decision needs costs: pass costs={LABEL: COST}.", param="decision"
        )
    cost = cost_matrix(costs, labels) if rule == "cost" else None  # type: ignore[arg-type]
    codes = decision_codes(mu, rule, prior_array, cost)
    return pd.Series(labels.take(codes), index=probas.index, name="truth")


def parse_decision(text: str, labels: Sequence[Hashable] | pd.Index) -> tuple[str, Costs | None]:
    """The CLI's ``--decision`` value: ``map``, ``balanced``, ``cost=LABEL:COST,...`` (per class:
    missing a task of LABEL costs COST, other classes 1) or ``cost=TRUTH>DECIDED:COST,...`` (per
    pair; other pairs 1). Labels are matched as written against ``labels``."""
    text = text.strip()
    if text in ("map", "balanced"):
        return text, None
    how = (
        "Write map, balanced, cost=LABEL:COST,... (a miss of LABEL costs COST, others 1) or "
        "cost=TRUTH>DECIDED:COST,... (deciding DECIDED when the truth is TRUTH)"
    )
    if not text.startswith("cost="):
        raise ValidationError(f"Unknown decision {text!r}. {how}.", param="decision")
    by_name = {str(label): label for label in labels}
    costs: dict[Any, float] = {}
    for item in text[len("cost=") :].split(","):
        key, sep, value = item.rpartition(":")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not key or not math.isfinite(number) or number <= 0:
            raise ValidationError(
                f"The decision's costs: cannot read {item!r} as LABEL:COST with COST a number "
                f"> 0. {how}.",
                param="decision",
            )
        names = key.split(">") if ">" in key else [key]
        unknown = [n for n in names if n not in by_name]
        if len(names) > 2 or unknown:
            raise ValidationError(
                f"The decision's costs: {key!r} names no label of the answers (they are "
                f"{', '.join(list(by_name)[:8])}). {how}.",
                param="decision",
            )
        entry = tuple(by_name[n] for n in names) if len(names) == 2 else by_name[names[0]]
        if entry in costs:
            raise ValidationError(
                f"The decision's costs name {key!r} twice. Give each cost once.", param="decision"
            )
        costs[entry] = number
    return "cost", costs


#: A label is "lost" when the truths give it under a tenth of the share the workers' answers give
#: it. A model that believes its workers moves a class's share from the answers' towards the
#: truths' by the crowd's bias (its false alarms and misses); a tenfold drop is past what that
#: explains on the bundled datasets, where Dawid-Skene and aware-ds on the clean answers keep
#: every class at 0.7-1.3 times its share of the answers and majority vote at 0.28-1.33
#: (adult_content's rarer classes lose most ties), and it is what a fit shows when each task's
#: evidence no longer outweighs the class prior.
LOST_RATIO = 0.1
#: ... and when the answers' share, less three standard errors, is worth at least this many of
#: the answered tasks: below that a share is mostly sampling noise.
LOST_MIN_TASKS = 20


def lost_labels(
    truths: np.ndarray, answers: Any, mechanism: Any = None
) -> list[tuple[int, float, float]]:
    """The labels the truths (codes over ``answers``' tasks) give under a tenth of their share
    of the answers: ``(code, share of the answered tasks, share of the answers)`` each. Under a
    randomized-response mechanism the answers' shares are the workers' own, its mean flip taken
    out (``s = (r - f / (K - 1)) / (1 - f K / (K - 1))`` for a report share ``r``): the reports
    alone give every label at least ``f / (K - 1)`` whatever the workers said."""
    from ._channel import flip_law

    k = answers.n_labels
    answered = np.bincount(answers.task, minlength=answers.n_tasks) > 0
    n = int(answered.sum())
    if n == 0 or k < 2:
        return []
    given = np.bincount(answers.value, minlength=k) / answers.n_answers
    # Each share's standard error, as a binomial share of the answers (tasks' answers are
    # correlated, so this is a lower bound): a share counts only 3 of them above zero.
    noise = np.sqrt(given * (1.0 - given) / answers.n_answers)
    if mechanism is not None:
        try:
            flips, weights = flip_law(mechanism, k, owner="the one-class check")
        except ValidationError:  # not randomized response: its answers are read as given
            flips, weights = np.zeros(1), np.ones(1)
        f = float(flips @ weights)
        keep = 1.0 - f * k / (k - 1)
        if keep > 0.05:  # a channel that keeps almost nothing cannot be taken out
            given = np.clip((given - f / (k - 1)) / keep, 0.0, 1.0)
            noise = noise / keep
    shares = np.bincount(np.asarray(truths)[answered], minlength=k) / n
    lost = ((given - 3.0 * noise) * n >= LOST_MIN_TASKS) & (shares < LOST_RATIO * given)
    return [(int(c), float(shares[c]), float(given[c])) for c in np.flatnonzero(lost)]


def one_class_warning(
    truths: pd.Series,
    answers: Any,
    *,
    mechanism: Any = None,
    method: str = "the method",
    prior: pd.Series | None = None,
    decision: str = "map",
) -> str | None:
    """One line for a fit that (nearly) drops a label the answers give (:func:`lost_labels`),
    saying what it means and what to do; None when no label is lost."""
    labels = answers.labels
    codes = labels.get_indexer(truths.reindex(answers.tasks).to_numpy())
    lost = lost_labels(codes, answers, mechanism)
    if not lost:
        return None
    answered = int((np.bincount(answers.task, minlength=answers.n_tasks) > 0).sum())
    top = np.bincount(codes[codes >= 0], minlength=len(labels))
    what = "; ".join(
        f"'{labels[c]}' on {share:.1%} of them against {given:.1%} of the answers"
        + (" (the mechanism's flips taken out)" if mechanism is not None else "")
        for c, share, given in lost
    )
    why = "is too weak to tell the classes apart"
    # A fixed uniform prior (the one-coin model's default, aware-ds's over more than two
    # labels) is no learned prior.
    if prior is not None and float(prior.max()) > 1.0 / len(prior) + 1e-9:
        big = int(np.argmax(prior.to_numpy()))
        why = (
            f"cannot overturn the learned class prior ({float(prior.iloc[big]):.3f} on "
            f"'{prior.index[big]}')"
        )
    todo = {
        "map": "decide by the 'balanced' rule (the Bayes decision for balanced accuracy) or by "
        "'cost' with per-class costs, collect more answers per task, or raise epsilon",
        "balanced": "collect more answers per task or raise epsilon; the 'cost' rule weighs a "
        "class's misses more",
    }.get(
        decision,
        "raise the lost class's cost, decide by the 'balanced' rule, collect more answers per "
        "task, "
        "or raise epsilon",
    )
    return (
        f"{method} labels {int(top.max()):,} of {answered:,} answered tasks "
        f"'{labels[top.argmax()]}', {what}: each task's evidence {why} at this epsilon and "
        "redundancy, so these truths say little about the lost class(es) and their accuracy is "
        f"mostly the majority's share; {todo}."
    )
