"""The estimator contract as checks, for privtd's estimators and for yours.

Every privtd estimator keeps one contract (``fit(answers, *, gold=None) -> self``, fitted
attributes ending in ``_``, one-line errors on bad input, the same output for the same seed):
this module checks it on any estimator, driven by its tags (:class:`privtd.inference.Tags`):
the answer kinds it is fitted on, whether it must refuse more than two labels, whether it takes
a warm start, whether it iterates. A perturbation-aware estimator built with a mechanism is
fitted on answers that mechanism perturbed.

With pytest, in the style of scikit-learn's ``parametrize_with_checks``::

    from privtd.utils.estimator_checks import parametrize_with_checks

    @parametrize_with_checks([MyEstimator(), MyEstimator(max_iter=5)])
    def test_contract(estimator, check):
        check(estimator)

Without it, :func:`check_estimator` runs every check and raises the first failure.

A third-party estimator subclasses :class:`privtd.inference.Estimator`, implements ``_fit``
(calling ``_set_results``), and declares its tags::

    class MyEstimator(Estimator):
        __privtd_tags__ = Tags(binary_only=True)
        kinds = ("categorical",)

Each check takes an unfitted estimator and fits clones of it (:func:`privtd.inference.clone`),
so the estimator given is left as it was. A check fails with an ``AssertionError`` that names
what broke.
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from ..datasets import make_categorical, make_numeric
from ..errors import ConvergenceWarning, NotFittedError, SchemaError, ValidationError
from ..inference._base import Estimator, clone
from ..inference._tags import get_tags

__all__ = [
    "check_estimator",
    "estimator_checks",
    "parametrize_with_checks",
    "toy_answers",
    "estimator_id",
    "check_fit_returns_self",
    "check_params_round_trip",
    "check_fitted_attributes",
    "check_not_fitted",
    "check_missing_column",
    "check_empty_input",
    "check_missing_answer",
    "check_duplicate_pairs",
    "check_one_worker",
    "check_one_task",
    "check_tasks_nobody_answered",
    "check_workers_without_answers",
    "check_every_listed_attribute_reads",
    "check_same_seed_same_output",
    "check_gold_is_fixed",
    "check_gold_errors",
    "check_label_types",
    "check_other_kind_refused",
    "check_binary_only",
    "check_warm_start",
    "check_iteration_parameters",
]

Check = Callable[[Estimator], None]


# ---------------------------------------------------------------- data and helpers
def toy_answers(estimator: Estimator, kind: str) -> pd.DataFrame:
    """The small crowd the checks fit: 40 tasks x 9 workers over two labels (categorical) or
    20 tasks x 8 workers (numeric), perturbed by the estimator's mechanism where it has one
    (parameter ``mechanism``) of that kind."""
    if kind == "categorical":
        answers, _, _ = make_categorical(40, 9, 2, answers_per_task=5, accuracy=(0.7, 0.95), rng=3)
    elif kind == "numeric":
        answers, _, _ = make_numeric(20, 8, answers_per_task=6, error_rate=2.0, rng=3)
    else:
        raise ValidationError(f"kind must be 'categorical' or 'numeric'. Got {kind!r}.")
    mechanism = estimator.get_params().get("mechanism")
    if mechanism is not None and getattr(mechanism, "kind", kind) == kind:
        answers = mechanism.perturb(answers, rng=5)
    return answers.to_frame()


def _fit(estimator: Estimator, data: Any, **kwargs: Any) -> Estimator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clone(estimator).fit(data, **kwargs)


def _seeded(estimator: Estimator) -> Estimator:
    """A clone whose fits repeat: its rng fixed (and a random tie-break, to exercise it)."""
    params = estimator.get_params()
    seeded = clone(estimator)
    if "rng" in params:
        seeded.set_params(rng=7)
        if "tie_break" in params:
            seeded.set_params(tie_break="random")
    return seeded


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _raises(error: type[BaseException], match: str, call: Callable[[], Any], what: str) -> str:
    """Run ``call``; it must raise ``error`` with a message matching ``match``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            call()
    except error as exc:
        _require(
            re.search(match, str(exc)),
            f"{what}: the error {str(exc)!r} does not match {match!r}.",
        )
        return str(exc)
    raise AssertionError(f"{what}: no {error.__name__} was raised.")


def _name(estimator: Estimator) -> str:
    return type(estimator).__name__


# ---------------------------------------------------------------- the checks
def check_fit_returns_self(estimator: Estimator, kind: str = "categorical") -> None:
    """``fit`` returns the estimator itself, and leaves its parameters as they were."""
    est = clone(estimator)
    before = est.get_params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        out = est.fit(toy_answers(est, kind))
    _require(out is est, f"{_name(est)}.fit must return self; it returned {type(out).__name__}.")
    after = est.get_params()
    _require(
        after.keys() == before.keys() and all(after[k] is before[k] for k in before),
        f"{_name(est)}.fit changed its parameters: {before!r} -> {after!r}.",
    )


def check_params_round_trip(estimator: Estimator, kind: str = "categorical") -> None:
    """``get_params`` lists the constructor's parameters: ``clone`` rebuilds the estimator from
    them, and ``set_params`` sets them (refusing a name it lacks)."""
    params = estimator.get_params()
    copy = clone(estimator)
    _require(type(copy) is type(estimator), "clone must keep the class.")
    got = copy.get_params()
    _require(
        got.keys() == params.keys() and all(got[k] is params[k] for k in params),
        f"{_name(estimator)}(**get_params()) gives other parameters: {params!r} -> {got!r}; "
        "__init__ must store each parameter under its own name, unchanged.",
    )
    _require(repr(copy) == repr(estimator), "a clone must have the same repr.")
    _require(copy.set_params(**params) is copy, "set_params must return the estimator.")
    _raises(
        ValidationError,
        "has no parameter 'no_such_parameter'",
        lambda: copy.set_params(no_such_parameter=1),
        "set_params with an unknown name",
    )


def check_fitted_attributes(estimator: Estimator, kind: str = "categorical") -> None:
    """The fitted attributes have the answers' tasks, workers and labels, and ``fit_predict``
    and ``fit_predict_proba`` give what ``fit`` gives."""
    data = toy_answers(estimator, kind)
    est = _fit(estimator, data)
    tasks = pd.Index(pd.unique(data["task"]))
    _require(est.truths_.index.equals(tasks), "truths_ must be indexed by the tasks, in order.")
    _require(est.truths_.notna().all(), "every answered task must get a truth.")
    counts = data.groupby("worker", sort=False).size()
    _require(
        est.weights_["n_answers"].to_dict() == counts.to_dict(),
        "weights_['n_answers'] must count each worker's answers.",
    )
    _require(np.isfinite(est.weights_["weight"]).all(), "weights_['weight'] must be finite.")
    _require(isinstance(est.n_iter_, int) and est.n_iter_ >= 1, "n_iter_ must be an int >= 1.")
    _require(isinstance(est.converged_, bool), "converged_ must be a bool.")
    _require(isinstance(est.objective_, np.ndarray), "objective_ must be an array.")
    if est.probas_ is not None:
        _require(est.probas_.index.equals(tasks), "probas_ must be indexed by the tasks.")
        np.testing.assert_allclose(est.probas_.sum(axis=1), 1.0, err_msg="probas_ rows sum to 1")
    if kind == "categorical":
        _require(
            set(est.truths_) <= set(data["answer"]), "the truths must be labels from the answers."
        )
    seeded = _seeded(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        once = clone(seeded).fit(data)
        pd.testing.assert_series_equal(clone(seeded).fit_predict(data), once.truths_)
        if once.probas_ is None:
            _raises(
                ValidationError,
                "has no per-task probabilities",
                lambda: clone(seeded).fit_predict_proba(data),
                "fit_predict_proba without probabilities",
            )
        else:
            probas = clone(seeded).fit_predict_proba(data)
            pd.testing.assert_frame_equal(probas, once.probas_)


def check_not_fitted(estimator: Estimator, kind: str = "categorical") -> None:
    """Before ``fit``, a fitted attribute raises :class:`NotFittedError` ("call fit")."""
    est = clone(estimator)
    _raises(NotFittedError, "call fit", lambda: est.truths_, "truths_ before fit")
    _require(not hasattr(est, "truths_"), "hasattr(truths_) must be False before fit.")


def check_missing_column(estimator: Estimator, kind: str = "categorical") -> None:
    """A table without a ``worker`` column is a :class:`SchemaError`."""
    data = toy_answers(estimator, kind).drop(columns="worker")
    _raises(SchemaError, "lacks column", lambda: clone(estimator).fit(data), "no worker column")


def check_empty_input(estimator: Estimator, kind: str = "categorical") -> None:
    """No answers is a one-line :class:`ValidationError` that says so."""
    data = toy_answers(estimator, kind).iloc[:0]
    _raises(ValidationError, "empty", lambda: clone(estimator).fit(data), "empty answers")


def check_missing_answer(estimator: Estimator, kind: str = "categorical") -> None:
    """A missing answer (NaN) is reported, not dropped."""
    data = toy_answers(estimator, kind)
    data.loc[3, "answer"] = np.nan
    _raises(ValidationError, "missing", lambda: clone(estimator).fit(data), "a NaN answer")


def check_duplicate_pairs(estimator: Estimator, kind: str = "categorical") -> None:
    """A (task, worker) pair given twice is refused."""
    data = toy_answers(estimator, kind)
    data = pd.concat([data, data.iloc[[0]]], ignore_index=True)
    _raises(
        ValidationError,
        r"repeat a \(task, worker\) pair",
        lambda: clone(estimator).fit(data),
        "a repeated pair",
    )


def check_one_worker(estimator: Estimator, kind: str = "categorical") -> None:
    """With one worker, the truths are that worker's answers."""
    data = toy_answers(estimator, kind)
    one = data[data["worker"] == data["worker"].iloc[0]]
    est = _fit(estimator, one)
    expected = one.set_index("task")["answer"]
    if kind == "categorical":
        _require(
            est.truths_.loc[expected.index].tolist() == expected.tolist(),
            "with one worker, the truths must be its answers.",
        )
    else:
        np.testing.assert_allclose(est.truths_.loc[expected.index], expected, atol=1e-9)


def check_one_task(estimator: Estimator, kind: str = "categorical") -> None:
    """One task fits, and a numeric truth lies within its answers."""
    data = toy_answers(estimator, kind)
    one = data[data["task"] == data["task"].iloc[0]]
    est = _fit(estimator, one)
    _require(len(est.truths_) == 1, "one task must give one truth.")
    if kind == "numeric":
        _require(
            one["answer"].min() <= est.truths_.iloc[0] <= one["answer"].max(),
            "one task's truth must lie within its answers.",
        )


def check_tasks_nobody_answered(estimator: Estimator, kind: str = "categorical") -> None:
    """Tasks known but unanswered (first, between others and last) do not disturb the rest,
    nor warn; a numeric one's truth is NaN."""
    data = toy_answers(estimator, kind)
    base = Answers.from_frame(data)
    n = base.n_tasks
    names = [base.tasks[i // 2] if i % 2 else f"empty{i}" for i in range(2 * n + 1)]
    wide = Answers(
        task=(2 * base.task + 1).astype(np.int32),
        worker=base.worker,
        value=base.value,
        tasks=pd.Index(names),
        workers=base.workers,
        labels=base.labels,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est = _fit(estimator, wide)
    alone = _fit(estimator, data)
    answered = est.truths_.loc[alone.truths_.index]
    empty = est.truths_.drop(alone.truths_.index)
    _require(len(empty) == n + 1, "every unanswered task must get a row.")
    if kind == "categorical":
        _require((answered == alone.truths_).mean() >= 0.95, "unanswered tasks moved the rest.")
        probas = est.probas_
        if probas is None:
            raise AssertionError("a categorical fit with unanswered tasks must set probas_.")
        np.testing.assert_allclose(probas.sum(axis=1), 1.0)
        _require(probas.notna().all().all(), "probas_ must have no NaN.")
    else:
        np.testing.assert_allclose(answered, alone.truths_, rtol=1e-4, atol=1e-4)
        _require(empty.isna().all(), "an unanswered numeric task's truth must be NaN.")
    _require(np.isfinite(est.weights_["weight"]).all(), "weights_['weight'] must be finite.")


def check_workers_without_answers(estimator: Estimator, kind: str = "categorical") -> None:
    """Workers known but without answers do not disturb the truths, nor warn (a 0/0 in a
    per-worker score), and each gets a row of weights_."""
    data = toy_answers(estimator, kind)
    base = Answers.from_frame(data)
    m = base.n_workers
    names = [base.workers[i // 2] if i % 2 else f"idle{i}" for i in range(2 * m + 1)]
    wide = Answers(
        task=base.task,
        worker=(2 * base.worker + 1).astype(np.int32),
        value=base.value,
        tasks=base.tasks,
        workers=pd.Index(names),
        labels=base.labels,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est = _fit(estimator, wide)
    alone = _fit(estimator, data)
    if kind == "categorical":
        _require((est.truths_ == alone.truths_).mean() >= 0.95, "idle workers moved the truths.")
        _require(
            est.probas_ is None or est.probas_.notna().all().all(), "probas_ must have no NaN."
        )
    else:
        np.testing.assert_allclose(est.truths_, alone.truths_, rtol=1e-4, atol=1e-4)
    _require(len(est.weights_) == 2 * m + 1, "every listed worker must get a row of weights_.")


def check_every_listed_attribute_reads(estimator: Estimator, kind: str = "categorical") -> None:
    """After a fit, every public name ``dir`` lists that ends in ``_`` reads, and
    ``warm_state_`` is there exactly when the tags say the estimator warm-starts."""
    est = _fit(estimator, toy_answers(estimator, kind))
    for name in dir(est):
        if name.endswith("_") and not name.startswith("_"):
            getattr(est, name)
    _require(
        hasattr(est, "warm_state_") == get_tags(est).warm_start,
        "warm_state_ must be there exactly when the tags say warm_start.",
    )


def check_same_seed_same_output(estimator: Estimator, kind: str = "categorical") -> None:
    """Two fits with the same seed (``rng``, where the estimator has one) agree exactly."""
    data = toy_answers(estimator, kind)
    seeded = _seeded(estimator)
    a, b = _fit(seeded, data), _fit(seeded, data)
    pd.testing.assert_series_equal(a.truths_, b.truths_)
    pd.testing.assert_frame_equal(a.weights_, b.weights_)


def check_gold_is_fixed(estimator: Estimator, kind: str = "categorical") -> None:
    """A gold truth stays the task's truth, even against what the answers say."""
    data = toy_answers(estimator, kind)
    est = _fit(estimator, data)
    task = est.truths_.index[0]
    if kind == "categorical":
        labels = sorted(set(data["answer"]))
        flipped = next(label for label in labels if label != est.truths_.iloc[0])
    else:
        flipped = est.truths_.iloc[0] + 3.0
    gold_fit = _fit(estimator, data, gold=pd.Series({task: flipped}))
    _require(
        gold_fit.truths_.loc[task] == flipped
        if kind == "categorical"
        else np.isclose(gold_fit.truths_.loc[task], flipped),
        "a gold task must keep its gold truth.",
    )


def check_gold_errors(estimator: Estimator, kind: str = "categorical") -> None:
    """Gold for a task without answers, or outside the labels, is refused."""
    data = toy_answers(estimator, kind)
    _raises(
        ValidationError,
        "no answers",
        lambda: clone(estimator).fit(data, gold={"unknown-task": 1}),
        "gold for an unknown task",
    )
    if kind == "categorical":
        _raises(
            ValidationError,
            "outside the answer domain",
            lambda: clone(estimator).fit(data, gold={data["task"].iloc[0]: 7}),
            "gold outside the labels",
        )


def check_label_types(estimator: Estimator, kind: str = "categorical") -> None:
    """int, bool and str labels give the same truths (labels are coded once)."""
    if kind != "categorical":
        return
    data = toy_answers(estimator, kind)
    base = _fit(estimator, data).truths_
    for mapping in ({0: 10, 1: 20}, {0: False, 1: True}, {0: "no", 1: "yes"}):
        other = _fit(estimator, data.assign(answer=data["answer"].map(mapping))).truths_
        _require(
            other.tolist() == base.map(mapping).tolist(),
            f"recoding the labels as {mapping} changed the truths.",
        )


def check_other_kind_refused(estimator: Estimator, kind: str = "categorical") -> None:
    """Answers of a kind the tags do not list are refused with a message naming both kinds."""
    kinds = get_tags(estimator).kinds
    for other in ("categorical", "numeric"):
        if other in kinds:
            continue
        data = toy_answers(estimator, other)
        _raises(
            ValidationError,
            f"takes {' or '.join(kinds)} answers; these are {other}",
            functools.partial(clone(estimator).fit, data),
            f"{other} answers",
        )


def check_binary_only(estimator: Estimator, kind: str = "categorical") -> None:
    """An estimator tagged ``binary_only`` refuses three labels with a message that says
    "binary"; one not so tagged fits them."""
    if "categorical" not in get_tags(estimator).kinds:
        return
    answers, _, _ = make_categorical(20, 6, 3, answers_per_task=3, rng=1)
    if get_tags(estimator).binary_only:
        _raises(ValidationError, "binary", lambda: clone(estimator).fit(answers), "3 labels")
    elif estimator.get_params().get("mechanism") is None:  # a mechanism fixes the label count
        est = _fit(estimator, answers)
        _require(set(est.truths_) <= {0, 1, 2}, "the truths must be among the 3 labels.")


def check_warm_start(estimator: Estimator, kind: str = "categorical") -> None:
    """Tagged ``warm_start``: a fit resumed from its own ``warm_state_`` (through JSON) or from
    the fitted estimator stays at its fixed point within a few steps, and a bad state is
    refused. Not tagged: ``warm_start=`` is refused."""
    data = toy_answers(estimator, kind)
    if not get_tags(estimator).warm_start:
        _raises(
            ValidationError,
            "warm_start",
            lambda: clone(estimator).fit(data, warm_start={"estimator": "X", "tasks": []}),
            "warm_start on an estimator without one",
        )
        return
    cold = _fit(estimator, data)
    state = json.loads(json.dumps(cold.warm_state_))  # it survives JSON
    warm = _fit(estimator, data, warm_start=state)
    _require(
        warm.n_iter_ <= max(3, cold.n_iter_ // 2),
        f"resumed at its fixed point, the fit took {warm.n_iter_} steps (cold: {cold.n_iter_}).",
    )
    if kind == "categorical":
        _require((warm.truths_ == cold.truths_).mean() >= 0.95, "the warm fit moved the truths.")
    else:
        # EM stops when a step moves less than tol, still up to tol / (1 - rate) from its
        # fixed point, and the resumed fit goes on towards it.
        np.testing.assert_allclose(warm.truths_, cold.truths_, atol=0.02)
    direct = _fit(estimator, data, warm_start=cold)
    _require(direct.n_iter_ == warm.n_iter_, "the fitted estimator must resume as its state.")
    np.testing.assert_allclose(direct.weights_["weight"], warm.weights_["weight"], rtol=1e-9)
    part = dict(state, tasks=state["tasks"][:5], values=state["values"][:5])
    _require(
        _fit(estimator, data, warm_start=part).truths_.index.equals(cold.truths_.index),
        "a state naming some tasks only must still fit them all.",
    )
    bad_values = (
        dict(state, values=[[-1.0] * len(v) for v in state["values"]])
        if kind == "categorical"
        else dict(state, values=[np.nan] * len(state["values"]))
    )
    for bad, match in [
        (dict(state, estimator="Other"), "comes from Other"),
        (dict(state, tasks=["no-such-task", *state["tasks"][1:]]), "task"),
        (dict(state, values=state["values"][:-1]), "warm_start values"),
        (bad_values, "warm_start"),
        ([1, 2], "warm_state_"),
    ]:
        _raises(
            ValidationError,
            match,
            functools.partial(clone(estimator).fit, data, warm_start=bad),
            f"a bad warm_start ({match})",
        )


def check_iteration_parameters(estimator: Estimator, kind: str = "categorical") -> None:
    """An iterative estimator (tag ``iterative``) takes ``max_iter`` and ``tol`` and refuses
    bad values with the parameter's name."""
    if not get_tags(estimator).iterative:
        return
    params = estimator.get_params()
    _require({"max_iter", "tol"} <= set(params), "an iterative estimator takes max_iter and tol.")
    data = toy_answers(estimator, kind)
    _raises(
        ValidationError,
        r"'max_iter' parameter .* must be an int >= 1. Got 0",
        lambda: clone(estimator).set_params(max_iter=0).fit(data),
        "max_iter=0",
    )
    _raises(
        ValidationError,
        "'tol' parameter",
        lambda: clone(estimator).set_params(tol=-1.0).fit(data),
        "tol=-1",
    )


#: Every check, in the order they run. Each takes the estimator and the answer kind.
_CHECKS: tuple[Callable[..., None], ...] = (
    check_params_round_trip,
    check_not_fitted,
    check_fit_returns_self,
    check_fitted_attributes,
    check_missing_column,
    check_empty_input,
    check_missing_answer,
    check_duplicate_pairs,
    check_one_worker,
    check_one_task,
    check_tasks_nobody_answered,
    check_workers_without_answers,
    check_every_listed_attribute_reads,
    check_same_seed_same_output,
    check_gold_is_fixed,
    check_gold_errors,
    check_label_types,
    check_warm_start,
    check_iteration_parameters,
)
#: Checks that look at the estimator as a whole, not at one kind of answers.
_ONCE: tuple[Callable[..., None], ...] = (check_other_kind_refused, check_binary_only)


def estimator_checks(estimator: Estimator) -> Iterator[Check]:
    """The checks for an estimator: each is called with the estimator. Every check runs on each
    answer kind its tags list; each check's ``__name__`` is ``"check_...[kind]"``."""
    if not isinstance(estimator, Estimator):
        raise ValidationError(
            "estimator_checks takes a privtd.inference.Estimator instance; got "
            f"{estimator!r}. Build it first (MyEstimator())."
        )
    for kind in get_tags(estimator).kinds:
        for check in _CHECKS:
            yield _named(check, kind)
    for check in _ONCE:
        yield _named(check, get_tags(estimator).kinds[0])


def _named(check: Callable[..., None], kind: str) -> Check:
    bound = functools.partial(check, kind=kind)
    functools.update_wrapper(bound, check)
    bound.__name__ = f"{check.__name__}[{kind}]"  # type: ignore[attr-defined]
    return bound


def check_estimator(estimator: Estimator) -> None:
    """Run every check on ``estimator``; the first that fails raises its ``AssertionError``
    (or the error the estimator raised), with the check's name added to the message."""
    for check in estimator_checks(estimator):
        try:
            check(estimator)
        except Exception as exc:
            raise AssertionError(f"{check.__name__} failed for {estimator!r}: {exc}") from exc


def estimator_id(estimator: Estimator) -> str:
    """A short name for test ids: the method name (the class name for an unregistered one),
    with ``@mechanism`` where the estimator is told one."""
    name = get_tags(estimator).name or type(estimator).__name__
    mechanism = estimator.get_params().get("mechanism")
    return f"{name}@{mechanism.name}" if mechanism is not None else name


def parametrize_with_checks(estimators: Iterable[Estimator]) -> Any:
    """A ``pytest.mark.parametrize`` over ``(estimator, check)`` for every check of every
    estimator, with ids ``"NAME-check_...[kind]"``; the test calls ``check(estimator)``.

    Examples
    --------
    >>> from privtd.inference import DawidSkene
    >>> from privtd.utils.estimator_checks import parametrize_with_checks
    >>> @parametrize_with_checks([DawidSkene()])
    ... def test_contract(estimator, check):
    ...     check(estimator)
    """
    import pytest

    cases = [(est, check) for est in estimators for check in estimator_checks(est)]
    return pytest.mark.parametrize(
        "estimator, check",
        cases,
        ids=[f"{estimator_id(est)}-{check.__name__}" for est, check in cases],
    )
