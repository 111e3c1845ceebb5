"""One contract, checked on every estimator (STYLE.md: parametrize over every estimator)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from privtd import METHODS, Answers, NotFittedError, SchemaError, ValidationError, make_estimator
from privtd.datasets import make_categorical, make_numeric
from privtd.errors import ConvergenceWarning

CATEGORICAL = [
    "mv",
    "wv",
    "crh",
    "catd",
    "ds",
    "one-coin-ds",
    "aware-one-coin",
    "aware-ds",
    "lc",
    "private-ds",
    "wawa",
    "zbs",
    "kos",
    "mmsr",
    "glad",
    "aware-glad",
    "mace",
    "aware-mace",
    "zencrowd",
    "aware-zencrowd",
    "minimax",
]
NUMERIC = ["crh", "catd", "gtm", "aware-gaussian", "raykar", "sigma", "mean", "median"]
BINARY_ONLY = {"lc", "private-ds", "kos"}
CASES = [(m, "categorical") for m in CATEGORICAL] + [(m, "numeric") for m in NUMERIC]


def test_every_method_is_covered():
    assert set(CATEGORICAL) | set(NUMERIC) == set(METHODS)


def toy(kind: str) -> pd.DataFrame:
    if kind == "categorical":
        answers, _, _ = make_categorical(40, 9, 2, answers_per_task=5, accuracy=(0.7, 0.95), rng=3)
    else:
        answers, _, _ = make_numeric(20, 8, answers_per_task=6, error_rate=2.0, rng=3)
    return answers.to_frame()


def fit(method: str, data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return make_estimator(method).fit(data, **kwargs)


@pytest.mark.parametrize("method, kind", CASES)
def test_fitted_attributes(method, kind):
    data = toy(kind)
    est = fit(method, data)
    tasks = pd.Index(pd.unique(data["task"]))
    assert est.truths_.index.equals(tasks)
    assert est.truths_.notna().all()
    counts = data.groupby("worker", sort=False).size()
    assert est.weights_["n_answers"].to_dict() == counts.to_dict()
    assert np.isfinite(est.weights_["weight"]).all()
    assert isinstance(est.n_iter_, int) and est.n_iter_ >= 1
    assert isinstance(est.converged_, bool)
    assert isinstance(est.objective_, np.ndarray)
    if est.probas_ is not None:
        np.testing.assert_allclose(est.probas_.sum(axis=1), 1.0)
    if kind == "categorical":
        assert set(est.truths_) <= set(data["answer"])


@pytest.mark.parametrize("method, kind", CASES)
def test_not_fitted(method, kind):
    est = make_estimator(method)
    with pytest.raises(NotFittedError, match="call fit"):
        _ = est.truths_


@pytest.mark.parametrize("method, kind", CASES)
def test_missing_column(method, kind):
    with pytest.raises(SchemaError, match="lacks column"):
        make_estimator(method).fit(toy(kind).drop(columns="worker"))


@pytest.mark.parametrize("method, kind", CASES)
def test_empty_input(method, kind):
    with pytest.raises(ValidationError, match="empty"):
        make_estimator(method).fit(toy(kind).iloc[:0])


@pytest.mark.parametrize("method, kind", CASES)
def test_nan_answer(method, kind):
    data = toy(kind)
    data.loc[3, "answer"] = np.nan
    with pytest.raises(ValidationError, match="missing"):
        make_estimator(method).fit(data)


@pytest.mark.parametrize("method, kind", CASES)
def test_duplicate_pairs(method, kind):
    data = toy(kind)
    data = pd.concat([data, data.iloc[[0]]], ignore_index=True)
    with pytest.raises(ValidationError, match="repeat a \\(task, worker\\) pair"):
        make_estimator(method).fit(data)


@pytest.mark.parametrize("method, kind", CASES)
def test_one_worker(method, kind):
    data = toy(kind)
    one = data[data["worker"] == data["worker"].iloc[0]]
    est = fit(method, one)
    expected = one.set_index("task")["answer"]
    if kind == "categorical":
        assert est.truths_.loc[expected.index].tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(est.truths_.loc[expected.index], expected, atol=1e-9)


@pytest.mark.parametrize("method, kind", CASES)
def test_one_task(method, kind):
    data = toy(kind)
    one = data[data["task"] == data["task"].iloc[0]]
    est = fit(method, one)
    assert len(est.truths_) == 1
    if kind == "numeric":
        assert one["answer"].min() <= est.truths_.iloc[0] <= one["answer"].max()


@pytest.mark.parametrize("method, kind", CASES)
def test_tasks_nobody_answered(method, kind):
    # A campaign's tasks are known before anyone answers (the service fits such Answers): an
    # unanswered task, first, between others and last, must not disturb the rest, nor warn.
    data = toy(kind)
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
        est = fit(method, wide)
    alone = fit(method, data)
    answered = est.truths_.loc[alone.truths_.index]
    empty = est.truths_.drop(alone.truths_.index)
    assert len(empty) == n + 1
    if kind == "categorical":
        assert (answered == alone.truths_).mean() >= 0.95
        np.testing.assert_allclose(est.probas_.sum(axis=1), 1.0)
        assert est.probas_.notna().all().all()
    else:
        np.testing.assert_allclose(answered, alone.truths_, rtol=1e-4, atol=1e-4)
        assert empty.isna().all()  # nothing is known of them
    assert np.isfinite(est.weights_["weight"]).all()


@pytest.mark.parametrize("method, kind", CASES)
def test_warm_start_from_a_previous_fit(method, kind):
    data = toy(kind)
    est = make_estimator(method)
    if not est.warm_starts:
        with pytest.raises(ValidationError, match="warm_start"):
            est.fit(data, warm_start={"estimator": "X", "tasks": [], "values": []})
        return
    cold = fit(method, data)
    # The state survives JSON (the service keeps it in its database between runs).
    state = json.loads(json.dumps(cold.warm_state_))
    warm = fit(method, data, warm_start=state)
    # Resumed at its own fixed point, the fit stays there and stops within a few steps.
    assert warm.n_iter_ <= max(3, cold.n_iter_ // 2), (warm.n_iter_, cold.n_iter_)
    if kind == "categorical":
        assert (warm.truths_ == cold.truths_).mean() >= 0.95  # near-ties may fall either way
    else:
        # EM stops when a step moves less than tol; a slow one (aware-gaussian: 84 steps
        # here) is then still up to tol / (1 - rate) from its fixed point, and the resumed fit
        # goes on towards it: 0.006 here, on truths spread over 0..10 with noise sd 2.
        np.testing.assert_allclose(warm.truths_, cold.truths_, atol=0.02)
    # In-process, the fitted estimator itself resumes the same way (without the lists).
    direct = fit(method, data, warm_start=cold)
    assert direct.n_iter_ == warm.n_iter_
    np.testing.assert_allclose(direct.weights_["weight"], warm.weights_["weight"], rtol=1e-9)
    # A state that names some tasks only: the others start as usual.
    part = dict(state, tasks=state["tasks"][:5], values=state["values"][:5])
    assert fit(method, data, warm_start=part).truths_.index.equals(cold.truths_.index)
    for bad, match in [
        (dict(state, estimator="Other"), "comes from Other"),
        (dict(state, tasks=["no-such-task", *state["tasks"][1:]]), "task"),
        (dict(state, values=state["values"][:-1]), "warm_start values"),
        (
            dict(state, values=[[-1.0] * len(v) for v in state["values"]])
            if kind == "categorical"
            else dict(state, values=[np.nan] * len(state["values"])),
            "warm_start",
        ),
        ([1, 2], "warm_state_"),
    ]:
        with pytest.raises(ValidationError, match=match):
            est.fit(data, warm_start=bad)


@pytest.mark.parametrize("method", CATEGORICAL)
@pytest.mark.parametrize("coding", ["int", "bool", "str"])
def test_label_types_give_the_same_truths(method, coding):
    data = toy("categorical")
    mapping = {"int": {0: 10, 1: 20}, "bool": {0: False, 1: True}, "str": {0: "no", 1: "yes"}}[
        coding
    ]
    recoded = data.assign(answer=data["answer"].map(mapping))
    base = fit(method, data).truths_
    other = fit(method, recoded).truths_
    assert other.tolist() == base.map(mapping).tolist()


@pytest.mark.parametrize("method, kind", CASES)
def test_same_seed_same_output(method, kind):
    data = toy(kind)
    params = {}
    if "rng" in make_estimator(method).get_params():
        params = {"rng": 7}
        if "tie_break" in make_estimator(method).get_params():
            params["tie_break"] = "random"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = make_estimator(method, **params).fit(data)
        b = make_estimator(method, **params).fit(data)
    pd.testing.assert_series_equal(a.truths_, b.truths_)
    pd.testing.assert_frame_equal(a.weights_, b.weights_)


@pytest.mark.parametrize("method, kind", CASES)
def test_gold_is_fixed(method, kind):
    data = toy(kind)
    est = fit(method, data)
    task = est.truths_.index[0]
    if kind == "categorical":
        flipped = 1 - est.truths_.iloc[0]
    else:
        flipped = est.truths_.iloc[0] + 3.0
    gold_fit = fit(method, data, gold=pd.Series({task: flipped}))
    assert gold_fit.truths_.loc[task] == pytest.approx(flipped)


@pytest.mark.parametrize("method, kind", CASES)
def test_gold_errors(method, kind):
    data = toy(kind)
    with pytest.raises(ValidationError, match="no answers"):
        make_estimator(method).fit(data, gold={"unknown-task": 1})
    if kind == "categorical":
        with pytest.raises(ValidationError, match="outside the answer domain"):
            make_estimator(method).fit(data, gold={data["task"].iloc[0]: 7})


@pytest.mark.parametrize("method", sorted(set(CATEGORICAL) - set(NUMERIC)))
def test_categorical_only_rejects_numbers(method):
    with pytest.raises(ValidationError, match="takes categorical answers; these are numeric"):
        make_estimator(method).fit(toy("numeric"))


@pytest.mark.parametrize("method", sorted(set(NUMERIC) - set(CATEGORICAL)))
def test_numeric_only_rejects_labels(method):
    with pytest.raises(ValidationError, match="takes numeric answers; these are categorical"):
        make_estimator(method).fit(toy("categorical"))


@pytest.mark.parametrize("method", sorted(BINARY_ONLY))
def test_binary_only_rejects_multiclass(method):
    answers, _, _ = make_categorical(20, 6, 3, answers_per_task=3, rng=1)
    with pytest.raises(ValidationError, match="binary"):
        make_estimator(method).fit(answers)


ITERATIVE = [(m, k) for m, k in CASES if METHODS[m].iterative]


def test_iterative_methods_take_max_iter_and_tol():
    for method, _ in ITERATIVE:
        assert {"max_iter", "tol"} <= set(make_estimator(method).get_params())


@pytest.mark.parametrize("method, kind", ITERATIVE)
def test_bad_iteration_parameters(method, kind):
    with pytest.raises(ValidationError, match="'max_iter' parameter .* must be an int >= 1. Got 0"):
        make_estimator(method, max_iter=0).fit(toy(kind))
    with pytest.raises(ValidationError, match="'tol' parameter"):
        make_estimator(method, tol=-1.0).fit(toy(kind))


def test_unknown_method_and_parameter():
    with pytest.raises(ValidationError, match="Unknown method 'nope'"):
        make_estimator("nope")
    with pytest.raises(
        ValidationError, match="unknown parameter 'bogus' for method ds; it takes: max_iter"
    ):
        make_estimator("ds", bogus=1)


def test_convergence_warning_at_max_iter():
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        make_estimator("ds", max_iter=1, tol=0.0).fit(toy("categorical"))
