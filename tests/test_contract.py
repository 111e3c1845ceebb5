"""One contract, checked on every estimator (STYLE.md: parametrize over every estimator).

The contract itself is :mod:`privtd.utils.estimator_checks`, driven by each estimator's tags;
here it runs on every registered estimator, and on each perturbation-aware one told each
mechanism it models (its "METHOD@MECHANISM" cases fit answers that mechanism perturbed, so
gold, unanswered tasks, label types and warm starts go through the channel). What follows it is
privtd's own: crowd-kit's names, the told mechanism entering the fit, and multi-label fits.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

from privtd import Answers, NotFittedError, SchemaError, ValidationError, make_estimator
from privtd.errors import ConvergenceWarning
from privtd.inference import BinaryRelevance, all_estimators, get_tags
from privtd.inference._base import CROWDKIT_ONLY_NAMES
from privtd.inference._tags import method_tags
from privtd.mechanisms import ExpGaussian, OneLayerRR, TwoLayerRR
from privtd.utils.estimator_checks import (
    estimator_id,
    parametrize_with_checks,
    toy_answers,
)

#: The mechanisms the perturbation-aware estimators are told in their "METHOD@MECHANISM" cases.
CHANNELS = {
    "one-layer": OneLayerRR(f=0.1, n_labels=2),
    "two-layer": TwoLayerRR(a=0.05, b=0.2, n_labels=2),
    "exp-gaussian": ExpGaussian(rate=2.0, low=-5.0, high=15.0),
}


def _estimators() -> list[Any]:
    """Every registered estimator (bar those that read a mechanism's release only), and each
    aware one told each mechanism of CHANNELS that its tags say it models. The aware form of
    a plain model (aware-glad: GLAD given a mechanism) runs told only: untold it is the plain
    model, checked under its own name."""
    out = []
    for method, cls in all_estimators():
        tags = method_tags(cls, method)
        if tags.release_only:
            continue
        if get_tags(cls).name == method:
            out.append(make_estimator(method))
        out += [
            make_estimator(method, mechanism=CHANNELS[m]) for m in tags.mechanisms if m in CHANNELS
        ]
    return out


ESTIMATORS = _estimators()
#: (case id, estimator, answer kind) for the privtd-only tests below.
CASES = [
    pytest.param(est, kind, id=f"{estimator_id(est)}-{kind}")
    for est in ESTIMATORS
    for kind in get_tags(est).kinds
]
TOLD = [case for case in CASES if "@" in case.id]
CATEGORICAL = [estimator_id(e) for e in ESTIMATORS if "categorical" in get_tags(e).kinds]


def test_every_method_and_mechanism_is_covered():
    plain = {estimator_id(e) for e in ESTIMATORS if "@" not in estimator_id(e)}
    assert plain == {
        m for m, c in all_estimators() if not get_tags(c).release_only and get_tags(c).name == m
    }
    # ... and every perturbation-aware one is told a mechanism in some case.
    told = {estimator_id(e).partition("@")[0] for e in ESTIMATORS if "@" in estimator_id(e)}
    assert told == {m for m, c in all_estimators(aware=True) if not method_tags(c, m).release_only}
    assert len(ESTIMATORS) == 25 + 6 * 2 + 1


@parametrize_with_checks(ESTIMATORS)
def test_estimator_contract(estimator, check):
    check(estimator)


def build(case: str, **params) -> Any:
    """The estimator of a case: "METHOD", or "METHOD@MECHANISM" told that mechanism."""
    method, _, channel = case.partition("@")
    if channel:
        params["mechanism"] = CHANNELS[channel]
    return make_estimator(method, **params)


def toy(kind: str, case: str = "") -> pd.DataFrame:
    """The checks' small crowd of this kind, perturbed by the case's mechanism if it has one."""
    return toy_answers(build(case or "mv"), kind)


def fit(est: Any, data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return (build(est) if isinstance(est, str) else est).fit(data, **kwargs)


def seeded(case: str) -> dict[str, Any]:
    """Parameters that make a randomised estimator's fits repeat (its rng, and tie_break)."""
    params: dict[str, Any] = {}
    if "rng" in build(case).get_params():
        params = {"rng": 7}
        if "tie_break" in build(case).get_params():
            params["tie_break"] = "random"
    return params


@pytest.mark.parametrize("est, kind", TOLD)
def test_told_mechanism_enters_the_fit(est, kind):
    # The told cases check the contract through the channel only if the estimator uses it:
    # on the same perturbed answers, the fit without the mechanism must differ.
    data = toy_answers(est, kind)
    told = fit(est, data)
    blind = fit(make_estimator(get_tags(est).name), data)
    assert told.get_params()["mechanism"] is est.get_params()["mechanism"]
    assert not np.allclose(told.weights_["weight"], blind.weights_["weight"], rtol=1e-6)


@pytest.mark.parametrize("est, kind", CASES)
def test_crowdkit_names_answer(est, kind):
    # crowd-kit's names answer too (docs/reference.md, "crowd-kit's names in privtd").
    est = fit(est, toy_answers(est, kind))
    assert est.labels_ is est.truths_
    assert est.skills_.name == "skill" and est.skills_.index.name == "worker"
    assert est.skills_.index.equals(est.weights_.index)
    # Majority vote's skill is crowd-kit's: agreement with the majority, not the vote weight.
    skill = "agreement" if get_tags(est).name == "mv" else "weight"
    np.testing.assert_array_equal(est.skills_.to_numpy(), est.weights_[skill].to_numpy())
    assert isinstance(est.loss_history_, list) and est.loss_history_ == est.objective_.tolist()
    if "confusions_" in vars(est):
        assert est.errors_ is est.confusions_
        assert est.errors_.index.names == ["worker", "label"]
    else:
        assert est.errors_ is None


@pytest.mark.parametrize("est, kind", CASES)
def test_names_the_model_lacks(est, kind):
    # A name the model has no attribute for is an AttributeError that says so, not "call fit
    # first" (which a fitted model cannot act on); crowd-kit's names point to privtd's.
    def error(est, name):
        with pytest.raises(AttributeError) as info:
            getattr(est, name)
        assert not isinstance(info.value, NotFittedError), info.value
        assert "call fit" not in str(info.value)
        assert getattr(est, name, "none") == "none"
        return str(info.value)

    table = 'docs/reference.md, "crowd-kit\'s names in privtd"'
    assert table in error(est, "alphas_")  # no fit would give it
    est = fit(est, toy_answers(est, kind))
    # No estimator has a crowd-kit-only name (privtd's own name for it is in the table).
    assert not (set(vars(est)) | set(dir(type(est)))) & CROWDKIT_ONLY_NAMES
    for name in ["alphas_", "thetas_", "spamming_", "scores_"]:
        assert error(est, name).startswith(f"{type(est).__name__} has no attribute {name!r}")
        assert table in error(est, name)
    for name in ["priors_", "betas_"]:  # crowd-kit's names that only some models have
        if name not in vars(est):
            assert table in error(est, name)
    lacking = "difficulties_" if "confusions_" in vars(est) else "confusions_"
    message = error(est, lacking)
    assert f"has no attribute {lacking!r}; its fitted attributes are " in message
    assert "truths_" in message and table not in message


#: aware-ds's fit is the MAP of a model with a learned class prior and a Dirichlet prior on
#: the confusions. One worker gives no way to tell its bias from the class balance (the ridge
#: its docstring describes), and the most probable label can be the more frequent class for
#: every task: without a mechanism, on 38 of 90 one-worker subsets of this toy (seeds 0-29, 3
#: workers each). That is the model's answer, not a bug; with the class prior fixed a lone
#: worker's answers stand (test_aware_ds_keeps_a_lone_worker_with_a_fixed_class_prior), and
#: so they do under a mechanism, where the default decision divides the posteriors by that
#: prior (leaving the lone worker's likelihood, which favours what it said). Strict: if the
#: default without a mechanism ever keeps them, this mark must go.
ONE_WORKER_OPEN = pytest.mark.xfail(
    strict=True, reason="aware-ds's learned class prior can absorb a lone worker's bias"
)


@pytest.mark.parametrize("channel", ["", "@two-layer", "@one-layer"])
def test_aware_ds_keeps_a_lone_worker_with_a_fixed_class_prior(channel):
    case = "aware-ds" + channel
    data = toy("categorical", case)
    one = data[data["worker"] == data["worker"].iloc[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = build(case, class_prior="uniform").fit(one)
    expected = one.set_index("task")["answer"]
    assert est.truths_.loc[expected.index].tolist() == expected.tolist()


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


# ---------------------------------------------------------------- multi-label: BinaryRelevance
# BinaryRelevance(method) (CLI: infer --multi-label SEP) runs one binary fit of `method` per
# label; it keeps the contract above where it applies to sets of labels. Its input is a long
# table whose answer is the list of labels a worker chose, so a task nobody answered cannot be
# written; the nearest case, a task every worker answered with no label, is checked instead.
# It has no n_iter_, converged_ or objective_ of its own (each of estimators_ has them), and
# takes no warm_start.
MULTI_METHODS = [c for c in CATEGORICAL if "@" not in c]
LABELS = ["cat", "dog", "bird"]


def multi_toy(rng: int = 3) -> pd.DataFrame:
    """40 tasks x 9 workers, 5 answers per task; each label is present with probability 0.4 and
    each worker gets it right (chosen iff present) with its own probability in U(0.7, 0.95)."""
    gen = np.random.default_rng(rng)
    n_tasks, n_workers, per_task = 40, 9, 5
    present = gen.random((n_tasks, len(LABELS))) < 0.4
    accuracy = gen.uniform(0.7, 0.95, n_workers)
    task = np.repeat(np.arange(n_tasks), per_task)
    worker = np.concatenate(
        [gen.choice(n_workers, per_task, replace=False) for _ in range(n_tasks)]
    )
    right = gen.random((task.size, len(LABELS))) < accuracy[worker, None]
    chosen = np.where(right, present[task], ~present[task])
    names = np.asarray(LABELS, dtype=object)
    return pd.DataFrame(
        {
            "task": [f"t{t}" for t in task],
            "worker": [f"w{w}" for w in worker],
            "answer": [list(names[row]) for row in chosen],
        }
    )


def multi(method: str, data: pd.DataFrame, **kwargs) -> BinaryRelevance:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return BinaryRelevance(method, **seeded(method)).fit(data, **kwargs)


@pytest.mark.parametrize("method", MULTI_METHODS)
def test_multi_label_fitted_attributes(method):
    data = multi_toy()
    est = multi(method, data)
    tasks = pd.Index(pd.unique(data["task"]))
    assert est.truths_.index.equals(tasks)
    assert all(isinstance(s, set) and s <= set(LABELS) for s in est.truths_)
    assert est.labels_ is est.truths_
    assert list(est.estimators_) == sorted(LABELS)
    for label, binary in est.estimators_.items():
        # Each label's binary fit decides whether a task has it.
        has = est.truths_.map(lambda s, label=label: label in s)
        assert has.tolist() == binary.truths_.astype(bool).tolist()
    probas = est.probas_
    assert probas.index.equals(tasks) and list(probas.columns) == sorted(LABELS)
    assert ((probas >= 0) & (probas <= 1)).all().all()
    for label in LABELS:
        has = est.truths_.map(lambda s, label=label: label in s)
        assert has[probas[label] > 0.5 + 1e-9].all() and not has[probas[label] < 0.5 - 1e-9].any()
    counts = data.groupby("worker", sort=False).size()
    assert list(est.weights_.columns) == [*sorted(LABELS), "n_answers"]
    assert est.weights_["n_answers"].to_dict() == counts.to_dict()
    assert np.isfinite(est.weights_[sorted(LABELS)].to_numpy()).all()
    again = BinaryRelevance(method, **seeded(method))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pd.testing.assert_series_equal(again.fit_predict(data), est.truths_)
        pd.testing.assert_frame_equal(again.fit_predict_proba(data), est.probas_)
    # Reproducible: the same seed gives the same fit.
    pd.testing.assert_frame_equal(multi(method, data).weights_, est.weights_)


def test_multi_label_fit_predict_proba_raises_without_probabilities():
    class NoProbas(BinaryRelevance):
        # No registry method lacks probabilities on two labels; stand in for one that would.
        def fit(self, answers, *, gold=None):
            super().fit(answers, gold=gold)
            self.probas_ = None
            return self

    with pytest.raises(ValidationError, match="Method 'mv' has no per-task probabilities"):
        NoProbas("mv").fit_predict_proba(multi_toy())


@pytest.mark.parametrize("method", MULTI_METHODS)
def test_multi_label_not_fitted_and_names_it_lacks(method):
    est = BinaryRelevance(method)
    with pytest.raises(NotFittedError, match="call fit"):
        _ = est.truths_
    assert not hasattr(est, "probas_")
    est = multi(method, multi_toy())
    for name, crowdkit in [("confusions_", False), ("aggregators_", True), ("n_iter_", False)]:
        with pytest.raises(AttributeError) as info:
            getattr(est, name)
        assert not isinstance(info.value, NotFittedError), info.value
        assert "its fitted attributes are " in str(info.value)
        assert ("crowd-kit's names in privtd" in str(info.value)) == crowdkit


def test_multi_label_repr():
    est = BinaryRelevance("ds", max_iter=5)
    assert repr(est) == "BinaryRelevance(method='ds', max_iter=5)"
    assert repr(multi("ds", multi_toy())) == "BinaryRelevance(method='ds')"  # after fit too


@pytest.mark.parametrize("method", MULTI_METHODS)
def test_multi_label_gold_is_fixed(method):
    data = multi_toy()
    est = multi(method, data)
    task = est.truths_.index[0]
    flipped = sorted(set(LABELS) - est.truths_.loc[task])
    gold_fit = multi(method, data, gold=pd.Series({task: flipped}))
    assert gold_fit.truths_.loc[task] == set(flipped)
    with pytest.raises(ValidationError, match="no answers"):
        multi(method, data, gold={"unknown-task": ["cat"]})
    with pytest.raises(ValidationError, match=r"gold names label\(s\) \['fish'\]"):
        multi(method, data, gold={task: ["fish"]})


@pytest.mark.parametrize("method", MULTI_METHODS)
def test_multi_label_tasks_where_no_label_was_chosen(method):
    # The nearest a multi-label table comes to an unanswered task: every answer chose nothing.
    data = multi_toy()
    empty = pd.DataFrame(
        {
            "task": [f"none{t}" for t in range(3) for _ in range(5)],
            "worker": [f"w{w}" for _ in range(3) for w in range(5)],
            "answer": [[] for _ in range(15)],
        }
    )
    wide = pd.concat([empty.iloc[:5], data, empty.iloc[5:]], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est = multi(method, wide)
    alone = multi(method, data)
    assert est.truths_.loc[["none0", "none1", "none2"]].tolist() == [set(), set(), set()]
    assert (est.truths_.loc[alone.truths_.index] == alone.truths_).mean() >= 0.95
    assert est.probas_.notna().all().all()
    assert np.isfinite(est.weights_[sorted(LABELS)].to_numpy()).all()


@pytest.mark.parametrize("method", MULTI_METHODS)
@pytest.mark.parametrize("coding", ["int", "str", "tuple", "set", "bare"])
def test_multi_label_types_give_the_same_truths(method, coding):
    data = multi_toy()
    base = multi(method, data).truths_
    mapping = {
        "int": dict(zip(LABELS, [10, 20, 30], strict=True)),
        "str": dict(zip(LABELS, ["x", "y", "z"], strict=True)),
    }
    code = mapping.get(coding, {label: label for label in LABELS})
    container = {"tuple": tuple, "set": set}.get(coding, list)
    answers = [container(code[label] for label in row) for row in data["answer"]]
    if coding == "bare":  # a bare label counts as a list of one
        answers = [row[0] if len(row) == 1 else row for row in answers]
    other = multi(method, data.assign(answer=answers)).truths_
    assert other.tolist() == [{code[label] for label in s} for s in base]


@pytest.mark.parametrize(
    "method",
    # aware-select without a mechanism chooses among models that include aware-ds.
    [
        pytest.param(m, marks=ONE_WORKER_OPEN) if m in ("aware-ds", "aware-select") else m
        for m in MULTI_METHODS
    ],
)
def test_multi_label_one_worker_and_one_task(method):
    data = multi_toy()
    one = data[data["worker"] == data["worker"].iloc[0]]
    est = multi(method, one)
    assert est.truths_.loc[one["task"]].tolist() == [set(a) for a in one["answer"]]
    task = data[data["task"] == data["task"].iloc[0]]
    assert len(multi(method, task).truths_) == 1


@pytest.mark.parametrize("method", MULTI_METHODS)
def test_multi_label_bad_input(method):
    data = multi_toy()
    with pytest.raises(SchemaError, match="lacks column"):
        BinaryRelevance(method).fit(data.drop(columns="worker"))
    with pytest.raises(ValidationError, match="empty"):
        BinaryRelevance(method).fit(data.iloc[:0])
    missing = data.copy()
    missing.loc[3, "answer"] = np.nan  # not "chose none" (an empty list): a missing answer
    with pytest.raises(ValidationError, match="missing answer.*position 3"):
        BinaryRelevance(method).fit(missing)
    twice = pd.concat([data, data.iloc[[0]]], ignore_index=True)
    with pytest.raises(ValidationError, match="repeat a \\(task, worker\\) pair"):
        BinaryRelevance(method).fit(twice)
    with pytest.raises(ValidationError, match="No worker chose any label"):
        BinaryRelevance(method).fit(data.assign(answer=[[] for _ in range(len(data))]))
    with pytest.raises(ValidationError, match="takes a DataFrame"):
        BinaryRelevance(method).fit(Answers.from_frame(toy("categorical")))
    with pytest.raises(ValidationError, match="unknown parameter 'bogus'"):
        BinaryRelevance(method, bogus=1).fit(data)


def test_multi_label_needs_a_method_for_labels():
    with pytest.raises(ValidationError, match="Unknown method 'nope'"):
        BinaryRelevance("nope").fit(multi_toy())
    with pytest.raises(ValidationError, match="needs a method for labels; 'gtm' is numeric"):
        BinaryRelevance("gtm").fit(multi_toy())
